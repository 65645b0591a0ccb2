// expect-error: versatil: option given twice to this backend policy
// expect-error: check_option<versatil::fixed_string<7>\{"XNNPACK"\}, versatil::options::dynamic_t
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(XNNPACK<dynamic, per_tensor, dynamic>::is_dynamic);

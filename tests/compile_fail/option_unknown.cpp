// expect-error: versatil: unknown option for this backend policy
// expect-error: check_option<versatil::fixed_string<11>\{"X86Inductor"\}, versatil::options::per_tensor_t
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(X86Inductor<dynamic, per_tensor>::is_dynamic);

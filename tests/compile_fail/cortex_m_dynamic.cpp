// expect-error: static assertion failed: versatil::CortexM: no 'dynamic' option: dynamic quantization computes activation scales in float at run time
// expect-error: versatil::CortexM<versatil::options::dynamic_t(\(\)|\{\})>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!CortexM<dynamic>::is_qat);

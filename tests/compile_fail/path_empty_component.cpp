// expect-error: versatil::Target: invalid module path: a component is empty
// expect-error: \{"encoder\.\.0"\}
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!Target<"encoder..0", XNNPACK<>>::is_exclude);

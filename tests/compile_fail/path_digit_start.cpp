// expect-error: versatil::Target: invalid module path: a component starts with a digit but is not an index
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Exclude<"layers.0a">::is_exclude);

// expect-error: versatil::Target: invalid module path: an index component has a leading zero
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!Target<"layers.01", X86Inductor<>>::is_exclude);

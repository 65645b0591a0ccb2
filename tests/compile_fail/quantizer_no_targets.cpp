// expect-error: versatil::Quantizer: needs at least one target
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!Quantizer<>::is_dynamic);

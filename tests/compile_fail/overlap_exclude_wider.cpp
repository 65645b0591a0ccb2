// expect-error: versatil::Quantizer: targets overlap
// An Exclude may only sit inside a wider target, never cover one.
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder.block0", XNNPACK<>>, Exclude<"encoder">>::needs_calibration);

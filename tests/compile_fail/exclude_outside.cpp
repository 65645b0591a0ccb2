// expect-error: versatil::Quantizer: an Exclude must sit strictly inside a quantizing target
// expect-error: Exclude<versatil::fixed_string<12>\{"decoder.norm"\}>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder", XNNPACK<>>, Exclude<"decoder.norm">>::needs_calibration);

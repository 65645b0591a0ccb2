// expect-error: versatil::Quantizer: targets overlap
// expect-error: fixed_string<0>\{""\}
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"", XNNPACK<>>, Target<"head", XNNPACK<per_tensor>>>::needs_calibration);

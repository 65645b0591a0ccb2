// expect-error: versatil::Quantizer: static and dynamic targets do not mix
// expect-error: "head"\}, versatil::XNNPACK<versatil::options::dynamic_t(\(\)|\{\})>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder", XNNPACK<>>, Target<"head", XNNPACK<dynamic>>>::needs_calibration);

// expect-error: versatil::Target: invalid module path: a component holds a character other than
// expect-error: \{"encoder\.block/1"\}
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder.block/1", XNNPACK<>>>::needs_calibration);

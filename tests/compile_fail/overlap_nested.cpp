// expect-error: versatil::Quantizer: targets overlap
// expect-error: Target<versatil::fixed_string<7>\{"encoder"\}, versatil::XNNPACK<> >, versatil::Target<versatil::fixed_string<14>\{"encoder.block0"\}
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder", XNNPACK<>>, Target<"encoder.block0", X86Inductor<>>>::needs_calibration);

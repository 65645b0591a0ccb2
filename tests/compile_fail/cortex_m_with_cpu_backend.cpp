// expect-error: static assertion failed: versatil::Quantizer: the targets' backends share no device type
// expect-error: composition_violation<versatil::composition_rule::devices_must_intersect, versatil::Target<versatil::fixed_string<8>\{"features"\}, versatil::CortexM<> >, versatil::Target<versatil::fixed_string<10>\{"classifier"\}, versatil::X86Inductor<> >
#include "versatil/versatil.hpp"
using namespace versatil;
// A microcontroller backend and a CPU one: the model would run on no single device.
static_assert(Quantizer<Target<"features", CortexM<>>, Target<"classifier", X86Inductor<>>>::needs_calibration);

// expect-error: versatil::Quantizer: QAT and post-training targets do not mix
// expect-error: "head"\}, versatil::X86Inductor<versatil::options::qat_t(\(\)|\{\})>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(Quantizer<Target<"encoder", XNNPACK<>>, Target<"head", X86Inductor<qat>>>::needs_calibration);

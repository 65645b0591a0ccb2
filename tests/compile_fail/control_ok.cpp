// expect: compiles
// The control case: everything the failing cases misuse, used correctly. If this stops
// compiling, the harness's flags are wrong and every "rejected" verdict would be meaningless.
#include "versatil/versatil.hpp"

using namespace versatil;

using composed = Quantizer<Target<"encoder", XNNPACK<dynamic>>, Target<"head", X86Inductor<dynamic, reduce_range>>,
                           Exclude<"encoder.norm">>;
static_assert(composed::is_dynamic);
static_assert(Quantizer<Target<"", XNNPACK<qat, per_tensor>>, Exclude<"layers.0">>::is_qat);
static_assert(Quantizer<Target<"layers.10", XNNPACK<>>>::needs_calibration);
static_assert(Quantizer<Target<"features", CortexM<per_tensor>>, Target<"classifier", CortexM<>>>::needs_calibration);
static_assert(CortexM<qat>::is_qat);
constexpr quantization_spec spec = checked(quantization_spec{});
template <Backend B>
constexpr bool accepts() { return true; }
static_assert(accepts<XNNPACK<>>());

// A firmware translation unit: the backend configuration is checked while compiling, and
// the integer-only requantization the device runs is computed from the same constants.
// Built for a Cortex-M4 with -fno-exceptions -fno-rtti by `meson test firmware_cortex_m4`.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "versatil/versatil.hpp"

namespace {

using namespace versatil;

// The deployed model, quantized for the firmware backend (the int8 scheme CMSIS-NN and TFLite
// Micro run): depthwise-separable features per channel, a per-tensor classifier head, the
// final softmax kept in float.
using deployed = Quantizer<Target<"features", CortexM<>>, Target<"classifier", CortexM<per_tensor>>,
                           Exclude<"classifier.softmax">>;

static_assert(deployed::backend_names == std::array<std::string_view, 2>{"cortex_m", "cortex_m"});
static_assert(deployed::needs_calibration && !deployed::is_dynamic && !deployed::is_qat);
static_assert(deployed::supported_device_types.contains(device_type::mcu));
static_assert(deployed::quantizer_for("features.3.depthwise")->config().weight->qscheme ==
              qscheme::per_channel_symmetric);
static_assert(deployed::quantizer_for("classifier.fc")->config().weight->qscheme == qscheme::per_tensor_symmetric);
static_assert(!deployed::quantizer_for("classifier.softmax"));

// Firmware has no process environment: a store of its own records what a backend would set
// (CortexM sets nothing).
struct firmware_store {
    static inline int writes = 0;
    static std::optional<std::string> get(std::string_view) { return std::nullopt; }
    static bool set(std::string_view, std::string_view) {
        ++writes;
        return true;
    }
    static bool unset(std::string_view) { return true; }
};
static_assert(EnvironmentStore<firmware_store>);

// Scales measured on the host and baked into the image.
constexpr float input_scale = 0.0235F, weight_scale = 0.0031F, output_scale = 0.0412F;
constexpr math::fixed_point_multiplier output_multiplier =
    math::quantize_multiplier(double{input_scale} * weight_scale / output_scale);
static_assert(output_multiplier.multiplier >= (1 << 30) && output_multiplier.shift < 0);

}  // namespace

// An int32 accumulator of the int8 kernel to the int8 output, as the device computes it.
extern "C" std::int32_t versatil_requantize(std::int32_t accumulator, std::int32_t output_zero_point) {
    const auto scope = CortexM<>::environment_context<firmware_store>();
    return math::requantize(accumulator, output_multiplier, output_zero_point, -128, 127);
}

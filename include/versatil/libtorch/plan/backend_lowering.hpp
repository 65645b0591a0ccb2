// What the LibTorch layer knows of each backend, keyed on its policy template (the core's
// backend_family), never on its serialized name: the quantized engine it lowers to, and what
// that engine in this LibTorch cannot run. Adding a backend means a specialization here; a
// compile-time Quantizer whose backend has none does not compile into this layer, and every
// built-in backend is checked to have one when this header compiles.
#pragma once

#include <c10/core/QEngine.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/backends/builtin_families.hpp"
#include "versatil/core/quantizer.hpp"
#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

struct lowering_traits {
    at::QEngine engine;
    // Set when the engine's static int8 linear kernel takes per-tensor weights only: why. The
    // linear layers of a per-channel target then get per-tensor symmetric weights, and the
    // report gives this reason.
    std::string_view per_tensor_linear_only_because = {};
    // Set when the engine runs the backend's int8 activations (-128..127) as quint8 (0..255): the
    // zero point plus 128 is the same quantization, scale and rounding unchanged.
    bool int8_activations_as_quint8 = false;
    // For a backend whose devices LibTorch has none of (a microcontroller): the device LibTorch
    // quantizes and evaluates its model on. Empty: the backend's own devices.
    std::optional<device_type> evaluated_on = std::nullopt;
    // Set when the engine's clamp (hardtanh, ReLU6, clamp) returns a channels-last input in the
    // wrong layout: why. lower() then gives each clamp a contiguous copy of its input, and the
    // report gives this reason.
    std::string_view clamps_read_contiguous_copies_because = {};
    // Set when the backend's quantizer leaves a conv / linear output unquantized unless a
    // quantized op reads it, so the model's own outputs stay in float: why, and what runs them.
    // convert() then returns those layers' outputs unrounded (float_model_outputs.hpp).
    std::string_view model_outputs_stay_float_because = {};
    // Set when the backend's quantizer quantizes an activation only where a conv / linear reads
    // it, so the result of another op (add, layer_norm, ...) that no conv / linear reads stays in
    // float: why. convert() then removes those values' quantize / dequantize pairs
    // (float_unread_values.hpp).
    std::string_view unread_values_stay_float_because = {};
};

// No definition: a backend without a specialization has no LibTorch lowering.
template <template <auto...> class Policy>
struct lowering;

// x86_inductor lowers to oneDNN (uint8 activations). X86InductorQuantizer annotates a conv /
// linear pattern's inputs, not its output; XNNPACKQuantizer (and CMSIS-NN) quantize outputs.
template <>
struct lowering<X86Inductor> {
    static constexpr lowering_traits traits{
        .engine = at::QEngine::ONEDNN,
        .model_outputs_stay_float_because =
            "X86InductorQuantizer quantizes a conv / linear output only where a quantized op reads it; "
            "LibTorch 1.13 has no int8 kernel with a float output, so the layer runs a float kernel on "
            "its int8 input and weights, dequantized",
        .unread_values_stay_float_because =
            "X86InductorQuantizer quantizes an activation where a conv / linear reads it (and through "
            "pooling, cat and flatten after one); the result of another op that no conv / linear reads "
            "stays fp32"};
};

// xnnpack lowers to QNNPACK, whose int8-activation path runs XNNPACK kernels; its int8 linear
// kernel rejects per-channel weights ("quantized::linear (xnnpack): Unsupported config for
// dtype KQInt8").
template <>
struct lowering<XNNPACK> {
    static constexpr lowering_traits traits{at::QEngine::QNNPACK,
                                            "XNNPACK's int8 linear kernel in this LibTorch has no per-channel variant"};
};

// cortex_m is evaluated on the host's CPU, on QNNPACK with quint8 activations. Of this LibTorch's
// engines, QNNPACK is the one that computes the integer scheme a Cortex-M runs on every CPU:
// per-channel symmetric qint8 weights (conv and linear), full-range 8-bit activations and exact
// int32 accumulation, then one rounding of the rescale in float32 (at most 1 LSB from the
// fixed-point rescale of CMSIS-NN). oneDNN matches it only on CPUs with VNNI; without VNNI its
// u8*s8 products saturate in 16 bits (measured: up to 100 LSB off with ONEDNN_MAX_CPU_ISA=AVX2,
// tests/firmware/check_engine.py). XNNPACK's qint8 path has no per-channel linear kernel.
// QNNPACK's own quint8 clamp ignores the memory format: on the channels-last output of a conv
// it returns the values in channels-last order under contiguous strides (a ReLU6 off by up to
// 6.0), so its clamps read contiguous copies.
template <>
struct lowering<CortexM> {
    static constexpr lowering_traits traits{
        .engine = at::QEngine::QNNPACK,
        .int8_activations_as_quint8 = true,
        .evaluated_on = device_type::cpu,
        .clamps_read_contiguous_copies_because =
            "LibTorch 1.13's QNNPACK clamp on quint8 returns a channels-last input in the wrong layout"};
};

namespace detail {
template <class Policy>
inline constexpr bool has_lowering = false;
template <template <auto...> class Policy, auto... Options>
inline constexpr bool has_lowering<Policy<Options...>> =
    requires { lowering<Policy>::traits; } && versatil::detail::is_listed(&family_of<Policy>, builtin_families{});

template <template <auto...> class... Policies>
const lowering_traits* find_lowering(const backend_family* family, family_list<Policies...>) {
    const lowering_traits* found = nullptr;
    ((family == &family_of<Policies> ? (void)(found = &lowering<Policies>::traits) : void()), ...);
    return found;
}
}  // namespace detail

// The lowering of a configured backend; an error for one this layer cannot lower.
inline const lowering_traits& lowering_of(const backend_descriptor& backend) {
    if (const lowering_traits* traits = detail::find_lowering(backend.family, builtin_families{})) return *traits;
    throw error(error_kind::unsupported_composition,
                "backend '" + std::string(backend.name) +
                    "' has no lowering in the LibTorch layer: give its policy template a "
                    "versatil::libtorch::lowering specialization and list it in versatil::builtin_families");
}

// The composed quantizer of a compile-time Quantizer<...>, checked while compiling to name only
// backends this layer can lower.
template <class... Targets>
runtime_quantizer to_runtime(Quantizer<Targets...>) {
    Quantizer<Targets...>::for_each_target([](auto target) {
        using target_type = typename decltype(target)::type;
        if constexpr (!target_type::is_exclude) {
            using policy = typename target_type::backend;
            static_assert(detail::has_lowering<policy>,
                          "versatil::libtorch: a target's backend has no LibTorch lowering (no "
                          "versatil::libtorch::lowering specialization for its policy template in builtin_families)");
        }
    });
    std::vector<runtime_target> targets;
    for (const target_info& target : Quantizer<Targets...>::targets)
        targets.push_back({std::string(target.path), target.backend});
    return *runtime_quantizer::compose(std::move(targets));  // valid: it compiled
}

}  // namespace versatil::libtorch

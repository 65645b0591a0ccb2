// The quantization plan: what every stage (prepare, calibrate or train, convert, lower) and the
// measurements read, decided once from the quantizer: its targets, the one engine they lower
// to, the quant type, and per target its backend's lowering traits (backend_lowering.hpp), the
// specs of its observers and the accuracy steps it runs. No stage asks the quantizer or the
// traits again. Each stage returns a staged_model: its module, the plan, and the changes made so
// that the engine can run a layer.
#pragma once

#include <torch/csrc/jit/passes/quantization/quantization_type.h>
#include <torch/script.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"

namespace versatil::libtorch {

// A change made so that the engine can run a layer, reported to the user.
struct adjustment {
    std::string module_path;
    std::string change;
};

// A recurrent layer of the lowered model (LSTM, GRU, RNN or one of their cells) and whether
// lowering quantized it; when not, why (passes/recurrent_dynamic.hpp).
struct recurrent_layer {
    std::string module_path;
    std::string kind;  // "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"
    bool quantized = false;
    std::string stays_float_because{};
};

// What the plan decides for one quantizing target. It holds the specs its observers are made
// from, not the observers: prepare makes the QConfigs (stages/prepare.hpp), and a path that
// observes nothing (the direct dynamic path) makes none.
struct target_plan {
    std::string path;
    const lowering_traits* lowering;
    quantization_spec activation;  // as the engine stores it (int8 asked for as quint8 where it must)
    quantization_spec weight;
    // For a backend whose static linear kernel is per-tensor only: its linear layers' weights.
    std::optional<quantization_spec> per_tensor_linear_weight;
    bool equalizes = false;        // the cle option: prepare equalizes its layer chains
    bool rounds_weights = false;   // gptq: rounded between calibrate and convert
    bool corrects_biases = false;  // bias_correction: corrected between convert and lower
    bool dynamic = false, qat = false;
    bool adarounds_weights = false;  // adaround: rounded between calibrate and convert
    bool chooses_output_ranges = false;  // calibration=output: ranges chosen between calibrate and convert
};

struct quantization_plan {
    runtime_quantizer quantizer;
    at::QEngine engine = at::QEngine::ONEDNN;
    device_set devices{};  // where LibTorch runs the model: its backends' devices, or where it evaluates them
    ::torch::jit::QuantType quant_type = ::torch::jit::QuantType::STATIC;
    std::map<std::string, target_plan, std::less<>> targets{};  // by target path; none for an exclude
    bool keeps_folded_model = false;  // for the steps that read prepare's float model (GPTQ, AdaRound, ...)

    // The plan of the target that quantizes `path`; none outside every target or in an exclude.
    [[nodiscard]] const target_plan* target_for(std::string_view path) const {
        const std::optional<backend_quantizer> q = quantizer.quantizer_for(path);
        return q ? &targets.find(q->module_path)->second : nullptr;
    }
    // Whether a target runs the step `step` (&target_plan::rounds_weights, ...), and which target of `path` does.
    [[nodiscard]] bool any(bool target_plan::*step) const {
        return std::any_of(targets.begin(), targets.end(), [&](const auto& target) { return target.second.*step; });
    }
    [[nodiscard]] std::optional<std::string> target_with(std::string_view path, bool target_plan::*step) const {
        const target_plan* target = target_for(path);
        return target && target->*step ? std::optional<std::string>(target->path) : std::nullopt;
    }
};

namespace detail {
inline quantization_spec per_tensor_weights(quantization_spec weight) {
    weight.qscheme = qscheme::per_tensor_symmetric;
    weight.ch_axis = no_channel_axis;
    weight.observer =
        is_moving_average(weight.observer) ? observer_kind::moving_average_min_max : observer_kind::min_max;
    return weight;
}

// The same quantization in quint8: levels and zero point shifted by 128.
inline quantization_spec as_quint8(quantization_spec activation) {
    activation.dtype = dtype::uint8;
    activation.quant_min += 128;
    activation.quant_max += 128;
    return activation;
}
}  // namespace detail

// One model runs on one quantized engine: every quantizing target must lower to the same one.
inline quantization_plan plan_for(const runtime_quantizer& quantizer) {
    quantization_plan plan{quantizer};
    plan.quant_type = quantizer.is_dynamic() ? ::torch::jit::QuantType::DYNAMIC : ::torch::jit::QuantType::STATIC;
    const std::vector<backend_quantizer> quantizers = quantizer.quantizers();
    plan.engine = lowering_of(*quantizers.front().backend).engine;
    plan.devices = device_set::all();
    for (const backend_quantizer& q : quantizers) {
        const lowering_traits& lowering = lowering_of(*q.backend);
        plan.devices = plan.devices & (lowering.evaluated_on ? device_set{*lowering.evaluated_on}
                                                             : q.backend->supported_device_types);
        if (lowering.engine != plan.engine)
            throw error(error_kind::unsupported_composition,
                        "targets '" + std::string(quantizers.front().module_path) + "' (" +
                            std::string(quantizers.front().backend_name()) + ") and '" + std::string(q.module_path) +
                            "' (" + std::string(q.backend_name()) + ") lower to different quantized engines (" +
                            engine_name(plan.engine) + ", " + engine_name(lowering.engine) +
                            "); LibTorch runs one engine per process, so quantize the model with one backend");
        const quantization_config& config = q.config();
        const quantization_spec& asked = *config.input_activation;
        const quantization_spec activation =
            lowering.int8_activations_as_quint8 && asked.dtype == dtype::int8 ? detail::as_quint8(asked) : asked;
        std::optional<quantization_spec> per_tensor_linear_weight;
        if (!lowering.per_tensor_linear_only_because.empty() && !q.is_dynamic() &&
            is_per_channel(config.weight->qscheme))
            per_tensor_linear_weight = detail::per_tensor_weights(*config.weight);
        plan.targets.emplace(std::string(q.module_path),
                             target_plan{std::string(q.module_path), &lowering, activation, *config.weight,
                                         per_tensor_linear_weight,
                                         config.cross_layer_equalization, config.gptq, config.bias_correction,
                                         q.is_dynamic(), q.is_qat(), config.adaround, config.chooses_output_ranges});
        plan.keeps_folded_model = plan.keeps_folded_model || config.gptq || config.bias_correction || config.adaround ||
                                 config.chooses_output_ranges;
    }
    return plan;
}

enum class stage { prepared, converted, lowered };

// A model after one stage: prepared (observers in place), converted (quantize/dequantize
// pairs), lowered (the engine's quantized ops; run it with engine_scope(plan.engine) active).
template <stage At>
struct staged_model {
    ::torch::jit::Module module;
    quantization_plan plan;
    std::vector<adjustment> adjustments;
    // prepare's float model (batch norm folded, equalized where cle is on) before observers went
    // in: what bias correction measures the converted model against, and what GPTQ takes the
    // layers' inputs from. Kept only when a target has one of those steps; lower() drops it.
    std::optional<::torch::jit::Module> folded_model{};
    std::vector<recurrent_layer> recurrent_layers{};  // lowered: every recurrent layer, quantized or not
};

using prepared_model = staged_model<stage::prepared>;
using converted_model = staged_model<stage::converted>;
using lowered_model = staged_model<stage::lowered>;

}  // namespace versatil::libtorch

// prepare: a clone of the model with observers where its targets' backend configs say.
// Conv + batch-norm pairs are folded first (the fold LibTorch's graph passes recognise), then
// LibTorch's InsertObservers places one observer per quantized value, configured per module
// path from the composed quantizer: each target's subtree gets its backend's QConfig, an
// Exclude's subtree none, everything outside every target none.
#pragma once

#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/script.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/core/quantizer.hpp"
#include "versatil/torch/pipeline/engine.hpp"
#include "versatil/torch/error.hpp"
#include "versatil/torch/pipeline/fake_quantize.hpp"
#include "versatil/torch/pipeline/inference_graph.hpp"
#include "versatil/torch/pipeline/measure.hpp"
#include "versatil/torch/pipeline/module_tree.hpp"
#include "versatil/torch/pipeline/shared_types.hpp"

namespace versatil::libtorch {

// A change prepare made so that the engine can run a layer, reported to the user.
struct adjustment {
    std::string module_path;
    std::string change;
};

struct prepared_model {
    ::torch::jit::Module module;  // the clone, with observers
    runtime_quantizer quantizer;
    ::torch::jit::QuantType quant_type = ::torch::jit::QuantType::STATIC;
    at::QEngine engine = at::QEngine::ONEDNN;
    std::vector<adjustment> adjustments;
    double seconds = 0.0;
};

// The composed quantizer of a compile-time Quantizer<...>, for the functions below.
template <class... Targets>
runtime_quantizer to_runtime(Quantizer<Targets...>) {
    std::vector<runtime_target> targets;
    for (const target_info& target : Quantizer<Targets...>::targets)
        targets.push_back({std::string(target.path), target.backend});
    return *runtime_quantizer::compose(std::move(targets));  // valid: it compiled
}

// One model runs on one quantized engine: every quantizing target must lower to the same one.
inline at::QEngine engine_of(const runtime_quantizer& quantizer) {
    const std::vector<backend_quantizer> quantizers = quantizer.quantizers();
    const at::QEngine engine = engine_for(quantizers.front().backend_name());
    for (const backend_quantizer& q : quantizers)
        if (engine_for(q.backend_name()) != engine)
            throw error(error_kind::unsupported_composition,
                        "targets '" + std::string(quantizers.front().module_path) + "' (" +
                            std::string(quantizers.front().backend_name()) + ") and '" + std::string(q.module_path) +
                            "' (" + std::string(q.backend_name()) + ") lower to different quantized engines (" +
                            engine_name(engine) + ", " + engine_name(engine_for(q.backend_name())) +
                            "); LibTorch runs one engine per process, so quantize the model with one backend");
    return engine;
}

namespace detail {

// XNNPACK's int8 linear kernel in this LibTorch takes per-tensor weights only
// ("quantized::linear (xnnpack): Unsupported config for dtype KQInt8"); a linear layer gets
// per-tensor symmetric weights instead, and the report says so.
inline bool needs_per_tensor_linear(const backend_quantizer& quantizer) {
    const quantization_config& config = quantizer.config();
    return quantizer.backend_name() == "xnnpack" && !quantizer.is_dynamic() && config.weight &&
           is_per_channel(config.weight->qscheme);
}

inline quantization_spec per_tensor_weights(quantization_spec weight) {
    weight.qscheme = qscheme::per_tensor_symmetric;
    weight.ch_axis = no_channel_axis;
    weight.observer = is_moving_average(weight.observer) ? observer_kind::moving_average_min_max : observer_kind::min_max;
    return weight;
}

inline ::torch::jit::QConfig qconfig_for(const quantization_config& config, const quantization_spec& weight) {
    return {make_observer_or_fake_quantize(*config.input_activation), make_observer_or_fake_quantize(weight)};
}

}  // namespace detail

// Builds the per-path QConfig map for `quantizer` on `model`; records adjustments.
//
// LibTorch tells QConfigs apart by the observer objects they hold: modules sharing a class
// type, or layers reading one value (attention's q/k/v projections), must get the very same
// QConfig. So each target's QConfigs are made once and reused for every path under it.
inline ::torch::jit::QConfigDict qconfig_dict(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                              std::vector<adjustment>& adjustments) {
    struct target_qconfigs {
        ::torch::jit::QConfig standard;
        std::optional<::torch::jit::QConfig> per_tensor_linear;  // made on first use
    };
    std::map<std::string, target_qconfigs, std::less<>> by_target;
    ::torch::jit::QConfigDict dict;
    dict[""] = c10::nullopt;  // outside every target: float
    for (const target_info& target : quantizer.target_infos()) {
        if (target.is_exclude()) {
            dict[std::string(target.path)] = c10::nullopt;
            continue;
        }
        const quantization_config& config = target.backend->config;
        const ::torch::jit::QConfig standard = detail::qconfig_for(config, *config.weight);
        by_target.emplace(std::string(target.path), target_qconfigs{standard, std::nullopt});
        dict[std::string(target.path)] = standard;
    }
    for (const auto& item : model.named_modules()) {
        const std::optional<backend_quantizer> applies = quantizer.quantizer_for(item.name);
        if (!applies || !detail::needs_per_tensor_linear(*applies) || !calls_op(item.value, is_linear_op)) continue;
        target_qconfigs& qconfigs = by_target.find(applies->module_path)->second;
        if (!qconfigs.per_tensor_linear)
            qconfigs.per_tensor_linear = ::torch::jit::QConfig{
                std::get<0>(qconfigs.standard),
                make_observer_or_fake_quantize(detail::per_tensor_weights(*applies->config().weight))};
        dict[item.name] = *qconfigs.per_tensor_linear;
        adjustments.push_back({item.name, "per-tensor symmetric weights: XNNPACK's int8 linear kernel in this "
                                          "LibTorch has no per-channel variant"});
    }
    return dict;
}

inline prepared_model prepare(const ::torch::jit::Module& model, const runtime_quantizer& quantizer) {
    const auto start = std::chrono::steady_clock::now();
    if (!model.find_method("forward"))
        throw error(error_kind::invalid_argument, "the model has no forward method to quantize");
    check_model_fits(model, quantizer);
    const at::QEngine engine = engine_of(quantizer);
    const auto quant_type = quantizer.is_dynamic() ? ::torch::jit::QuantType::DYNAMIC : ::torch::jit::QuantType::STATIC;
    prepared_model prepared{model, quantizer, quant_type, engine, {}, 0.0};

    // Post-training quantization runs the model as it will be deployed, in eval mode: where
    // LibTorch cannot place observers in the graphs as scripted, they are specialized for
    // inference (inference_graph.hpp), a step deeper each time. QAT trains, and keeps them.
    std::vector<specialization_depth> depths{specialization_depth::none};
    if (!quantizer.is_qat())
        depths.insert(depths.end(), {specialization_depth::branches, specialization_depth::constants,
                                     specialization_depth::inlined});
    for (const specialization_depth depth : depths) {
        ::torch::jit::Module clone = model.clone();
        clone.eval();  // folding and freezing need eval mode
        const inference_specialization changes = specialize_for_inference(clone, depth);
        // Batch norm is folded into the convolution before observers (QAT included): what is
        // then trained is exactly what convert quantizes. See qat.hpp.
        ::torch::jit::Module folded = ::torch::jit::FoldConvBatchNorm(clone);
        reset_parameters(folded, quantizer.is_qat());  // trainable for QAT, frozen for calibration
        std::vector<adjustment> adjustments;
        const ::torch::jit::QConfigDict dict = qconfig_dict(folded, quantizer, adjustments);
        split_shared_types(folded, dict);
        try {
            prepared.module = ::torch::jit::InsertObservers(folded, "forward", dict, /*inplace=*/true, prepared.quant_type);
        } catch (const std::exception& failure) {
            if (depth != depths.back()) continue;
            throw error(error_kind::unsupported_model,
                        "LibTorch cannot place observers in this model: " + first_line(without_backtrace(failure)));
        }
        if (changes.fast_paths > 0)
            adjustments.push_back({"", std::to_string(changes.fast_paths) +
                                           " fused inference fast path(s) (nn.TransformerEncoderLayer, "
                                           "nn.MultiheadAttention) replaced by their reference branches, whose linear "
                                           "layers quantize"});
        prepared.adjustments = std::move(adjustments);
        break;
    }
    prepared.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return prepared;
}

template <class... Targets>
prepared_model prepare(const ::torch::jit::Module& model, Quantizer<Targets...> quantizer) {
    return prepare(model, to_runtime(quantizer));
}

}  // namespace versatil::libtorch

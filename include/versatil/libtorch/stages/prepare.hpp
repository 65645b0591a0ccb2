// prepare: a clone of the model with observers where its targets' backend configs say.
// Conv + batch-norm and linear + batch-norm pairs are folded first (fold_batch_norm.hpp), then
// LibTorch's InsertObservers places one observer per quantized value (calls to parameterless
// leaf modules inlined first, leaf_calls.hpp), configured per module path from the plan
// (plan.hpp): each target's subtree gets its backend's QConfig, an Exclude's subtree none,
// everything outside every target none. Targets with the cle option
// have their layer chains equalized between the two (equalize.hpp); where the plan says so, the
// float model observed is kept for the accuracy steps that read it (plan.hpp). An observer whose value
// only clamps read then sees it clamped (clamped_observation.hpp; convert undoes that).
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/script.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "versatil/core/quantizer.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/passes/clamped_observation.hpp"
#include "versatil/libtorch/accuracy/equalize.hpp"
#include "versatil/libtorch/observers/fake_quantize.hpp"
#include "versatil/libtorch/passes/fold_batch_norm.hpp"
#include "versatil/libtorch/passes/inference_graph.hpp"
#include "versatil/libtorch/passes/leaf_calls.hpp"
#include "versatil/libtorch/passes/loop_layers.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"
#include "versatil/libtorch/passes/shared_types.hpp"

namespace versatil::libtorch {

// What makes one observer from its spec. prepare's default makes versatil's own (or the
// fake-quantize module a QAT spec asks for); a test passes reference observers
// (tests/torch/observers.cpp compares the calibrated state with theirs).
using observer_maker = ::torch::jit::Module (*)(const quantization_spec&);

namespace detail {

// A target's QConfigs: its standard one and, for a backend whose static linear kernel is
// per-tensor only, its linear layers'. LibTorch tells QConfigs apart by the observer objects
// they hold: modules sharing a class type, or layers reading one value (attention's q/k/v
// projections), must get the very same QConfig, so each is made once per prepare and used for
// every path under its target.
struct target_qconfigs {
    ::torch::jit::QConfig standard;
    std::optional<::torch::jit::QConfig> per_tensor_linear;
};

inline target_qconfigs qconfigs_of(const target_plan& target, observer_maker make) {
    ::torch::jit::Module activation = make(target.activation);
    target_qconfigs made{{activation, observing_parameters(make(target.weight))}, std::nullopt};
    if (target.per_tensor_linear_weight)
        made.per_tensor_linear =
            ::torch::jit::QConfig{activation, observing_parameters(make(*target.per_tensor_linear_weight))};
    return made;
}

// Every target's QConfigs, by target path.
using qconfigs_by_target = std::map<std::string, target_qconfigs, std::less<>>;

inline qconfigs_by_target qconfigs_for(const quantization_plan& plan, observer_maker make) {
    qconfigs_by_target made;
    for (const auto& [path, target] : plan.targets) made.emplace(path, qconfigs_of(target, make));
    return made;
}

// The per-path QConfig map of `plan` for `model`, with the adjustments it makes: each target's
// subtree gets its QConfig, an exclude's none, everything outside every target none; linear
// layers of a target whose engine runs them per-tensor only get that QConfig; layers called in a
// loop none (passes/loop_layers.hpp).
inline ::torch::jit::QConfigDict qconfig_dict(const ::torch::jit::Module& model, const quantization_plan& plan,
                                              const qconfigs_by_target& made, std::vector<adjustment>& adjustments) {
    ::torch::jit::QConfigDict dict;
    dict[""] = c10::nullopt;  // outside every target: float
    for (const target_info& target : plan.quantizer.target_infos())
        dict[std::string(target.path)] = target.is_exclude() ? c10::optional<::torch::jit::QConfig>{}
                                                             : made.find(target.path)->second.standard;
    const std::set<std::string> in_loops = layers_called_in_loops(model);
    for (const auto& item : model.named_modules()) {
        const target_plan* target = plan.target_for(item.name);
        if (!target || in_loops.contains(item.name) || !target->per_tensor_linear_weight ||
            !calls_op(item.value, is_linear_op))
            continue;
        dict[item.name] = *made.find(target->path)->second.per_tensor_linear;
        adjustments.push_back({item.name, "per-tensor symmetric weights: " +
                                              std::string(target->lowering->per_tensor_linear_only_because)});
    }
    for (const std::string& path : in_loops) {
        if (!plan.target_for(path)) continue;  // float already
        dict[path] = c10::nullopt;
        adjustments.push_back({path, float_in_loop_reason});
    }
    return dict;
}

}  // namespace detail

inline prepared_model prepare(const ::torch::jit::Module& model, const quantization_plan& plan,
                              observer_maker make_observer_for = make_observer_or_fake_quantize) {
    if (!model.find_method("forward"))
        throw error(error_kind::invalid_argument, "the model has no forward method to quantize");
    const runtime_quantizer& quantizer = plan.quantizer;
    check_model_fits(model, quantizer, plan.devices);
    prepared_model prepared{model, plan, {}, std::nullopt};

    // Post-training quantization runs the model as it will be deployed, in eval mode: where
    // LibTorch cannot place observers in the graphs as scripted, they are specialized for
    // inference (inference_graph.hpp), a step deeper each time. QAT trains, and keeps them.
    std::vector<specialization_depth> depths{specialization_depth::none};
    const detail::qconfigs_by_target qconfigs = detail::qconfigs_for(plan, make_observer_for);  // once, for every depth
    if (!quantizer.is_qat())
        depths.insert(depths.end(), {specialization_depth::branches, specialization_depth::constants,
                                     specialization_depth::inlined});
    for (const specialization_depth depth : depths) {
        ::torch::jit::Module clone = private_clone(model);
        clone.eval();  // folding and freezing need eval mode
        const inference_specialization changes = specialize_for_inference(clone, depth);
        // Batch norm is folded into the convolution or linear layer before observers (QAT
        // included): what is then trained is exactly what convert quantizes. See qat.hpp.
        ::torch::jit::Module folded = fold_batch_norms(clone);
        // Equalized after folding: the folded weights are what observers see and convert quantizes.
        std::vector<adjustment> adjustments = equalize_for_targets(folded, plan);
        reset_parameters(folded, quantizer.is_qat());  // trainable for QAT, frozen for calibration
        const ::torch::jit::QConfigDict dict = detail::qconfig_dict(folded, plan, qconfigs, adjustments);
        split_shared_types(folded, dict);
        // InsertObservers edits `folded` in place: the float model the plan keeps is a copy.
        if (plan.keeps_folded_model) prepared.folded_model = folded.clone();
        // Fewer calls for InsertObservers to preprocess (leaf_calls.hpp). QAT keeps its modules
        // as they are: what it trains is the model the user wrote.
        if (!quantizer.is_qat()) inline_parameterless_leaf_calls(folded, dict);
        try {
            prepared.module = ::torch::jit::InsertObservers(folded, "forward", dict, /*inplace=*/true, plan.quant_type);
        } catch (const std::exception& failure) {
            if (depth != depths.back()) continue;
            throw error(error_kind::unsupported_model,
                        "LibTorch cannot place observers in this model: " + one_line(failure));
        }
        if (const int clamped = clamp_observed_values(prepared.module); clamped > 0)
            adjustments.push_back({"", std::to_string(clamped) +
                                           " value(s) read only by clamps (ReLU6, hardtanh, clamp, ReLU, hardswish, "
                                           "hardsigmoid) observed as the clamp sees them, so their range skips what "
                                           "it cuts off"});
        if (changes.fast_paths > 0)
            adjustments.push_back({"", std::to_string(changes.fast_paths) +
                                           " fused inference fast path(s) (nn.TransformerEncoderLayer, "
                                           "nn.MultiheadAttention) replaced by their reference branches, whose linear "
                                           "layers quantize"});
        prepared.adjustments = std::move(adjustments);
        break;
    }
    return prepared;
}

inline prepared_model prepare(const ::torch::jit::Module& model, const runtime_quantizer& quantizer) {
    return prepare(model, plan_for(quantizer));
}

template <class... Targets>
prepared_model prepare(const ::torch::jit::Module& model, Quantizer<Targets...> quantizer) {
    return prepare(model, plan_for(to_runtime(quantizer)));
}

}  // namespace versatil::libtorch

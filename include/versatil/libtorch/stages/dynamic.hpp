// The direct dynamic path: dynamic quantization needs no calibration and no observer on an
// activation, so instead of prepare (observers), convert (quantize / dequantize pairs) and
// Finalize's pattern fusion, the model is folded and frozen as lower() freezes it, and each
// targeted linear op of the frozen graph is replaced by the op Finalize would have made of it:
// quantized::linear_dynamic on its weight, quantized with the weight observer's qparams and
// packed, registered as the module attribute LibTorch's prepack folding names. Same graph, same
// packed weights, same outputs and saved form as the graph-mode path (tests/torch/pipeline.cpp
// compares them), at a fraction of its time.
//
// A linear op is targeted when the module whose code calls it (its path in the inlined call
// stack) is inside a dynamic target, as graph mode gives each module's code its QConfig.
// Models the direct path does not cover (a targeted linear inside an `if` or a loop, with a
// weight computed at run time, or whose input an untargeted linear reads too) take the
// graph-mode path.
#pragma once

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/fuse_linear.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/csrc/jit/passes/inline_fork_wait.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/script.h>

#include <optional>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/accuracy/dynamic_weight_choice.hpp"
#include "versatil/libtorch/accuracy/equalize.hpp"
#include "versatil/libtorch/passes/fold_batch_norm.hpp"
#include "versatil/libtorch/passes/recurrent_dynamic.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/stages/lower.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/observers/observers.hpp"
#include "versatil/libtorch/observers/quantized_weight.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"

namespace versatil::libtorch {

namespace detail {

// The targeted linear ops of a frozen graph with how each is quantized (its backend's weight
// spec and LibTorch's reduce_range until measured: dynamic_weight_choice.hpp), or none when one
// of them is beyond the direct path.
struct targeted_linear {
    ::torch::jit::Node* node;
    dynamic_weight_choice quantized;
    bool reduce_range_asked = false;  // the backend's reduce_range option: not a candidate to drop
};

inline std::optional<std::vector<targeted_linear>> targeted_linears(const std::shared_ptr<::torch::jit::Graph>& graph,
                                                                    const runtime_quantizer& quantizer) {
    std::vector<targeted_linear> found;
    for (::torch::jit::Node* node :
         nodes_where(graph, [](const ::torch::jit::Node* n) { return n->kind() == c10::aten::linear; })) {
        const std::optional<backend_quantizer> applies = quantizer.quantizer_for(call_stack_path(node).value_or(""));
        if (!applies) continue;
        const bool constant_weight = node->input(1)->node()->kind() == c10::prim::Constant &&
                                     (node->input(2)->node()->kind() == c10::prim::Constant);
        if (node->owningBlock() != graph->block() || !constant_weight) return std::nullopt;
        const quantization_spec& activation = *applies->config().input_activation;
        // LibTorch 1.13's InsertQuantDeQuant asks for reduce_range on every dynamic activation.
        found.push_back({node, {*applies->config().weight, true}, activation.quant_max - activation.quant_min < 255});
    }
    // Graph mode quantizes a targeted linear's input dynamically for every linear that reads
    // it, targeted or not (LibTorch 1.13's RemoveRedundantQuantizationOps keeps the quantize /
    // dequantize pair before any dynamically quantizable op): an untargeted linear sharing the
    // input (a target on q_proj alone, beside k_proj and v_proj) reads it quantized. The direct
    // path does not reproduce that; such models take graph mode.
    std::unordered_set<const ::torch::jit::Node*> targeted;
    for (const targeted_linear& linear : found) targeted.insert(linear.node);
    for (const targeted_linear& linear : found)
        for (const ::torch::jit::Use& use : linear.node->input(0)->uses())
            if (use.user->kind() == c10::aten::linear && !targeted.count(use.user)) return std::nullopt;
    return found;
}

// The passes InsertObservers runs on every method graph before it observes anything (LibTorch
// 1.13, InsertObserversHelper::preprocess), so that the direct path quantizes the linear ops
// graph mode quantizes (FuseLinear makes aten::linear of addmm / matmul + add) and freezes the
// same graph (RemoveListMutation turns appends to a fresh list into one ListConstruct).
// Each distinct module type's graphs once, and each pattern pass only on a graph holding the
// op its patterns start from: the rewriters parse their IR patterns on every call, about 1 ms
// a graph, which was most of the direct path's time on a CNN.
inline void preprocess_as_insert_observers(const ::torch::jit::Module& module) {
    for (std::shared_ptr<::torch::jit::Graph>& graph : all_method_graphs(module)) {
        if (has_node_of_kind(graph, {c10::prim::fork})) ::torch::jit::InlineForkWait(graph);
        if (has_node_of_kind(graph, {c10::aten::addmm, c10::aten::matmul, c10::aten::linear, c10::prim::CallFunction}))
            ::torch::jit::FuseLinear(graph);
        if (has_node_of_kind(graph, {c10::aten::_convolution}))
            ::torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
        ::torch::jit::RemoveListMutation(graph);
    }
}

// Each targeted linear's weight scheme and reduce_range measured on the leading
// dynamic_choice_samples of `batches` with the engine in effect (dynamic_weight_choice.hpp), one
// adjustment per layer saying what it chose and why.
inline std::vector<adjustment> choose_measured_weights(const ::torch::jit::Module& frozen,
                                                       std::vector<targeted_linear>& linears,
                                                       const std::vector<batch>& batches) {
    std::vector<::torch::jit::Node*> nodes;
    for (const targeted_linear& linear : linears) nodes.push_back(linear.node);
    const std::vector<batch> sample = leading_batches(batches, dynamic_choice_samples);
    const std::vector<std::vector<at::Tensor>> inputs = linear_inputs(frozen, nodes, sample);
    std::vector<adjustment> chosen;
    for (std::size_t i = 0; i < linears.size(); ++i) {
        ::torch::jit::Node* node = linears[i].node;
        const at::Tensor weight = ::torch::jit::toIValue(node->input(1))->toTensor();
        const c10::IValue bias = *::torch::jit::toIValue(node->input(2));
        const measured_weight_choice measured = choose_dynamic_weights(
            weight, bias.isTensor() ? bias.toTensor() : at::Tensor(), inputs[i],
            dynamic_weight_candidates(linears[i].quantized, linears[i].reduce_range_asked), samples_in(sample));
        linears[i].quantized = measured.choice;
        chosen.push_back({call_stack_path(node).value_or(""), measured.reason});
    }
    return chosen;
}

// The model as the direct path quantizes it: folded, equalized for the targets with the cle
// option, preprocessed as InsertObservers preprocesses and frozen as lower() freezes, with the
// targeted linear ops of its frozen graph; none when one of them is beyond the direct path.
struct frozen_for_direct_path {
    ::torch::jit::Module module;
    std::vector<targeted_linear> linears;
    std::vector<adjustment> adjustments;
};

// With `choose_on` batches, each targeted linear's weights are chosen by measurement on them
// (choose_measured_weights); without, it is quantized as graph mode quantizes it.
inline std::optional<frozen_for_direct_path> freeze_for_direct_path(const ::torch::jit::Module& model,
                                                                    const quantization_plan& plan,
                                                                    const std::vector<batch>& choose_on = {}) {
    ::torch::jit::Module clone = private_clone(model);
    clone.eval();
    ::torch::jit::Module folded = fold_batch_norms(clone);
    // Equalized after folding, as prepare() does: the cle option holds on this path too.
    std::vector<adjustment> adjustments = equalize_for_targets(folded, plan);
    preprocess_as_insert_observers(folded);
    ::torch::jit::Module frozen = ::torch::jit::freeze_module(folded);
    auto linears = targeted_linears(frozen.get_method("forward").graph(), plan.quantizer);
    if (!linears) return std::nullopt;
    if (!choose_on.empty()) {
        std::vector<adjustment> chosen = choose_measured_weights(frozen, *linears, choose_on);
        adjustments.insert(adjustments.end(), chosen.begin(), chosen.end());
    }
    return frozen_for_direct_path{std::move(frozen), std::move(*linears), std::move(adjustments)};
}

// What Finalize makes of a targeted linear, in two ops inserted at the graph's insertion point:
// its weight quantized and prepacked (a constant FoldQuantizedPrepackingOps turns into a module
// attribute), and quantized::linear_dynamic on an input and that packed weight.
inline ::torch::jit::Value* insert_packed_weight(::torch::jit::Graph& graph, const targeted_linear& linear) {
    const at::Tensor weight = ::torch::jit::toIValue(linear.node->input(1))->toTensor();
    return graph.insert(
        c10::Symbol::fromQualString("quantized::linear_prepack"),
        {graph.insertConstant(quantized_weight(weight, linear.quantized.weight)), linear.node->input(2)});
}

inline ::torch::jit::Value* insert_linear_dynamic(::torch::jit::Graph& graph, const targeted_linear& linear,
                                                  ::torch::jit::Value* input, ::torch::jit::Value* packed) {
    // The engines' dynamic linear ops receive reduce_range (QNNPACK's ignores it).
    return graph.insert(c10::Symbol::fromQualString("quantized::linear_dynamic"),
                        {input, packed, graph.insertConstant(linear.quantized.reduce_range)});
}


}  // namespace detail

// Dynamic targets quantized directly into the lowered module; none when the model needs the
// graph-mode path (see above). Runs one forward on options.sample, as lower() does. With
// `choose_on` batches (the calibration data), each layer's weight scheme and reduce_range are
// chosen on them with the engine (freeze_for_direct_path).
inline std::optional<lowered_model> lower_dynamic_directly(const ::torch::jit::Module& model,
                                                           const quantization_plan& plan,
                                                           const lowering_options& options = {},
                                                           const std::vector<batch>& choose_on = {}) {
    if (plan.quant_type != ::torch::jit::QuantType::DYNAMIC || plan.quantizer.is_qat()) return std::nullopt;
    check_model_fits(model, plan.quantizer, plan.devices);
    const auto environment = plan.quantizer.environment_context();
    const engine_scope engine(engine_settings{plan.engine, options.threads, std::nullopt});
    auto frozen = detail::freeze_for_direct_path(model, plan, choose_on);
    if (!frozen) return std::nullopt;
    ::torch::jit::Module& lowered = frozen->module;
    const std::shared_ptr<::torch::jit::Graph> graph = lowered.get_method("forward").graph();
    std::vector<recurrent_layer> recurrent;
    try {
        for (const detail::targeted_linear& linear : frozen->linears) {
            const ::torch::jit::WithInsertPoint before(linear.node);
            ::torch::jit::Value* packed = detail::insert_packed_weight(*graph, linear);
            linear.node->output()->replaceAllUsesWith(
                detail::insert_linear_dynamic(*graph, linear, linear.node->input(0), packed));
            linear.node->destroy();
        }
        ::torch::jit::EliminateDeadCode(graph);
        ::torch::jit::FoldQuantizedPrepackingOps(lowered);
        recurrent = quantize_recurrent_layers(lowered, plan);
    } catch (const std::exception& failure) {
        throw detail::lowering_failure(plan, failure);
    }
    detail::check_lowered_runs(lowered, plan, options);
    note_float_recurrent_layers(recurrent, plan, frozen->adjustments);
    return lowered_model{lowered, plan, std::move(frozen->adjustments), std::nullopt, std::move(recurrent)};
}

}  // namespace versatil::libtorch

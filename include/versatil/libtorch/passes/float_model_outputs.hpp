// A layer whose output the model returns keeps that output in float where its backend's
// quantizer does not quantize it.
//
// LibTorch 1.13's graph mode quantizes every conv / linear output, the model's own outputs
// included: a classifier's logits leave the model rounded to 256 levels. X86InductorQuantizer,
// whose scheme the x86_inductor backend follows, annotates a conv / linear pattern's inputs and
// weight only; its output is quantized only where a quantized op reads it, so what the model
// returns stays in float (the Inductor kernel writes fp32). On the zoo that rounding is up to
// half of the output noise (tests/zoo's two_inputs, dict_heads, multitask).
//
// LibTorch 1.13 has no int8 conv / linear kernel with a float output, so such a layer runs as
// it computes in the converted graph: a float kernel on its int8 input and int8 weights,
// dequantized. That is the same int8 x int8 product with fp32 accumulation, without the
// rounding of the result; it is not counted as a quantized op. A float kernel reads four times
// the weight bytes (and dequantizes them each call), and at batch 1 a classifier head is bound
// by them once they leave the cache: on the zoo's MobileNetV2 (1280 x 1000 head) the model went
// from 0.81 to 1.55 ms for no SQNR gain, while resnet18's 512 x 1000 head cost nothing
// measurable here (1.46 / 1.47 ms, +0.2 dB; medians of interleaved rounds). That boundary
// moves with the cache, so only layers of at most float_output_weight_limit weights return
// float: 256 KiB as float, within any x86 core's L2. A larger one keeps its int8 kernel, rounded
// output included, and the report says so.
//
// Finalize packs a float-output layer's weight and unpacks it on every call (oneDNN's unpack
// reorders: +0.36 ms a forward on resnet18's head), so lower() unpacks it once
// (unpack_weights_once): the layer keeps its int8 weight and dequantizes it per call.
//
// Static post-training targets only: the model QAT trained rounds those outputs (LibTorch's
// QAT prepare fake-quantizes every conv / linear output), and dynamic targets return float.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/libtorch/passes/dequantize_tuples.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/layer_ops.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/plan/plan.hpp"

namespace versatil::libtorch {

// The most weights a layer returning float output may have (see above).
inline constexpr std::int64_t float_output_weight_limit = 65536;
// How the adjustment of such a layer begins (analysis/float_layers.hpp finds the layer by it).
inline constexpr std::string_view kept_float_output_note = "output the model returns kept in float: ";

namespace detail {

// Ops X86InductorQuantizer fuses after a conv / linear as one pattern (conv2d_unary,
// linear_unary): the pattern's output is the op's.
inline bool is_fused_activation(std::string_view kind) {
    for (const std::string_view op : {"aten::relu", "aten::relu6", "aten::hardtanh", "aten::hardswish", "aten::silu",
                                      "aten::gelu"})
        if (kind == op || (kind.size() == op.size() + 1 && kind.starts_with(op) && kind.back() == '_')) return true;
    return false;
}

// The conv / linear op that computes `value`, directly or through one fused activation.
inline ::torch::jit::Node* layer_op_computing(::torch::jit::Value* value) {
    ::torch::jit::Node* node = value->node();
    if (is_fused_activation(node->kind().toQualString()) && node->inputs().size() >= 1)
        node = node->input(0)->node();
    return is_quantizable_op(node->kind().toQualString()) && node->inputs().size() >= 2 ? node : nullptr;
}

// The values the graph returns, through the tuples, lists and dicts it builds to return them;
// `use` is where each is read.
inline void collect_returned_values(::torch::jit::Value* value, std::vector<::torch::jit::Use>& uses,
                                    const ::torch::jit::Use& use) {
    ::torch::jit::Node* node = value->node();
    const bool container = node->kind() == c10::prim::TupleConstruct || node->kind() == c10::prim::ListConstruct ||
                           node->kind() == c10::prim::DictConstruct;
    if (!container) {
        uses.push_back(use);
        return;
    }
    if (value->uses().size() != 1) return;  // read elsewhere too: its items are not only returned
    for (std::size_t i = 0; i < node->inputs().size(); ++i)
        collect_returned_values(node->input(i), uses, ::torch::jit::Use(node, i));
}

}  // namespace detail

// In `converted`'s forward (inlined by InsertQuantDeQuant), each returned value that is a
// static post-training layer's output rounded by quantize / dequantize, where the layer's backend
// leaves model outputs in float (lowering_traits::model_outputs_stay_float_because), is returned
// unrounded, if it is small enough (float_output_weight_limit). Returns what changed, or why
// not, for each of those layers, in graph order.
inline std::vector<adjustment> leave_model_outputs_float(const ::torch::jit::Module& converted,
                                                          const quantization_plan& plan) {
    const std::shared_ptr<::torch::jit::Graph> graph = converted.get_method("forward").graph();
    // A model returning a tuple gets one dequantize of the whole tuple: one per item, so each
    // item's quantize / dequantize pair is found.
    detail::dequantize_tuples_item_by_item(graph);
    const std::map<const ::torch::jit::Value*, std::string> path_of = module_value_paths(graph);
    std::vector<::torch::jit::Use> returned;
    ::torch::jit::Node* const output = graph->return_node();
    for (std::size_t i = 0; i < output->inputs().size(); ++i)
        detail::collect_returned_values(output->input(i), returned, ::torch::jit::Use(output, i));

    std::vector<adjustment> layers;
    for (const ::torch::jit::Use& use : returned) {
        ::torch::jit::Value* dequantized = use.user->input(use.offset);
        if (dequantized->node()->kind() != c10::aten::dequantize) continue;
        ::torch::jit::Node* quantize = dequantized->node()->input(0)->node();
        if (quantize->kind() != c10::aten::quantize_per_tensor) continue;
        ::torch::jit::Value* unrounded = quantize->input(0);
        const ::torch::jit::Node* op = detail::layer_op_computing(unrounded);
        if (!op) continue;
        const ::torch::jit::Node* weight = detail::weight_source(op->input(1))->node();
        if (weight->kind() != c10::prim::GetAttr || weight->s(c10::attr::name) != "weight") continue;
        const auto path = path_of.find(weight->input());
        if (path == path_of.end()) continue;
        const target_plan* target = plan.target_for(path->second);
        if (!target || target->dynamic || target->qat) continue;
        const std::string_view because = target->lowering->model_outputs_stay_float_because;
        if (because.empty()) continue;
        const std::int64_t weights = find_submodule(converted, path->second).attr("weight").toTensor().numel();
        if (weights > float_output_weight_limit) {
            layers.push_back({path->second, "output the model returns rounded to 8 bits, though " +
                                                std::string(because) + ": its " + std::to_string(weights) +
                                                " weights exceed " + std::to_string(float_output_weight_limit) +
                                                ", and a float kernel reading them would cost more than the int8 one"});
            continue;
        }
        use.user->replaceInput(use.offset, unrounded);
        layers.push_back({path->second, std::string(kept_float_output_note) + std::string(because)});
        // The pair goes where nothing else reads it (InsertQuantDeQuant gives each reader its own
        // dequantize; another quantized op may read the quantized value).
        if (dequantized->uses().empty()) dequantized->node()->destroy();
        if (quantize->output()->uses().empty()) quantize->destroy();
    }
    return layers;
}

namespace detail {
inline bool is_weight_unpack(std::string_view kind) {
    return kind == "quantized::linear_unpack" || kind == "quantized::conv1d_unpack" ||
           kind == "quantized::conv2d_unpack" || kind == "quantized::conv3d_unpack";
}
}  // namespace detail

// In `lowered` (frozen), each weight unpacked on every forward from packed parameters the
// module holds is unpacked now: its int8 weight and float bias become constants of the graph,
// and the packed parameters go. Returns how many.
inline int unpack_weights_once(::torch::jit::Module& lowered) {
    const std::shared_ptr<::torch::jit::Graph> graph = lowered.get_method("forward").graph();
    const ::torch::jit::Value* self = graph->inputs().at(0);
    int unpacked = 0;
    for (::torch::jit::Node* unpack : nodes_where(graph, [&](const ::torch::jit::Node* node) {
             return detail::is_weight_unpack(node->kind().toQualString()) &&
                    node->input(0)->node()->kind() == c10::prim::GetAttr && node->input(0)->node()->input() == self;
         })) {
        ::torch::jit::Node* read = unpack->input(0)->node();
        const std::string name = read->s(c10::attr::name);
        ::torch::jit::Stack stack{lowered.attr(name)};
        c10::Dispatcher::singleton().findSchemaOrThrow(unpack->kind().toQualString(), "").callBoxed(&stack);
        const ::torch::jit::WithInsertPoint before(unpack);
        for (std::size_t i = 0; i < unpack->outputs().size(); ++i)
            unpack->output(i)->replaceAllUsesWith(graph->insertConstant(stack.at(i)));
        unpack->destroy();
        ++unpacked;
        if (!read->output()->uses().empty()) continue;
        read->destroy();
        if (has_node_where(graph, [&](const ::torch::jit::Node* node) {
                return node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == name;
            }))
            continue;
        lowered._ivalue()->unsafeRemoveAttr(name);
        lowered.type()->unsafeRemoveAttribute(name);
    }
    return unpacked;
}

}  // namespace versatil::libtorch

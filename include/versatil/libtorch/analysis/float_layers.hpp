// The conv and linear layers of a lowered model that still run in float, each named with why:
// a report that counts "2 of 5" should say which three and what to do about them. Recurrent
// layers are named by their own pass (passes/recurrent_dynamic.hpp).
#pragma once

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "versatil/libtorch/analysis/report.hpp"
#include "versatil/libtorch/passes/float_model_outputs.hpp"
#include "versatil/libtorch/passes/loop_layers.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

namespace detail {
// Whether the layer's weight is an int8 tensor dequantized (passes/float_model_outputs.hpp keeps
// a layer whose output the model returns so).
inline bool dequantized_weight(const ::torch::jit::Node* node) {
    return node->inputs().size() > 1 && node->input(1)->node()->kind() == c10::aten::dequantize;
}

// The layer an op whose call stack LibTorch's passes dropped stands for: a dequantized-weight op
// is the one layer float_model_outputs.hpp kept so, when there is exactly one.
inline std::string path_of(const ::torch::jit::Node* node, const std::vector<adjustment>& adjustments) {
    if (std::optional<std::string> path = call_stack_path(node); path && !path->empty()) return *path;
    if (!dequantized_weight(node)) return "";
    std::vector<std::string> kept;
    for (const adjustment& a : adjustments)
        if (a.change.starts_with(kept_float_output_note)) kept.push_back(a.module_path);
    return kept.size() == 1 ? kept.front() : "";
}

// Why a float conv/linear `node` of the lowered model at `path` was not quantized.
inline std::string float_reason(const ::torch::jit::Node* node, const std::string& path, const quantization_plan& plan,
                                const std::vector<adjustment>& adjustments) {
    for (const adjustment& a : adjustments)  // a stage that decided it already said why
        if (a.module_path == path && a.change.starts_with(stays_float_note))
            return a.change.substr(stays_float_note.size());
    if (!plan.target_for(path)) return "excluded by the targets (or outside every target)";
    if (plan.quantizer.is_dynamic() && !is_linear_op(node->kind().toQualString()))
        return "dynamic quantization quantizes linear and recurrent layers only";
    if (dequantized_weight(node))
        return "int8 weights and input, dequantized for a float kernel: its output is the model's, and LibTorch 1.13 "
               "has no int8 kernel with a float output";
    if (node->inputs().size() > 1 && node->input(1)->node()->kind() != c10::prim::Constant)
        return "its weight is computed at run time: LibTorch quantizes layers with constant weights only";
    if (inside_loop(node)) return "inside a loop (prim::Loop), which LibTorch's graph-mode quantization does not enter";
    if (inside_node_of_kind(node, c10::prim::If))
        return "inside an if branch (prim::If) that LibTorch's graph-mode quantization left float";
    return "LibTorch's graph-mode quantization left it float (no quantized pattern matched it on this engine)";
}
}  // namespace detail

// Every float conv/linear call site of `lowered`'s forward, once per module path (a layer called
// several times, as in an unrolled loop, is one layer), in the graph's order.
inline std::vector<float_layer> float_layers(const lowered_model& lowered, const std::vector<adjustment>& adjustments) {
    const auto graph = lowered.module.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    std::vector<float_layer> layers;
    std::set<std::string> seen;
    for (const ::torch::jit::Node* node : nodes_where(graph, [](const ::torch::jit::Node* n) {
             return is_quantizable_op(n->kind().toQualString());
         })) {
        const std::string path = detail::path_of(node, adjustments);
        const std::string op = node->kind().toQualString();
        if (!seen.insert(path + "\n" + op).second) continue;
        layers.push_back(
            {path.empty() ? "(model)" : path, op, detail::float_reason(node, path, lowered.plan, adjustments)});
    }
    return layers;
}

// Whether most of the model's conv/linear/recurrent op calls stay float. Over half, because then
// the quantized model is mostly the float one: its size and speed figures describe float work,
// and a user reading "quantized" would be misled; below half the float layers are exceptions the
// report lists.
inline bool mostly_float(std::int64_t quantized_ops, std::int64_t quantizable_ops) {
    return quantizable_ops > 0 && 2 * (quantizable_ops - std::min(quantized_ops, quantizable_ops)) > quantizable_ops;
}

}  // namespace versatil::libtorch

// The conv and linear layers a model calls inside a loop (prim::Loop). LibTorch 1.13's graph-mode
// observer insertion does not enter loop bodies ("prim::Loop is not yet supported"), and when a
// submodule's forward is called from one it leaves that module's type with an observer attribute
// its object has no slot for: the next walk over the modules (named_modules, Python's
// quantize_jit alike) fails an internal assert. Such layers are given no QConfig (stages/prepare.hpp)
// and stay float, with the reason in the report.
#pragma once

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <set>
#include <string>
#include <string_view>

#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

// Whether `node` sits in a block of a node of `kind` (prim::Loop, prim::If), at any depth.
inline bool inside_node_of_kind(const ::torch::jit::Node* node, c10::Symbol kind) {
    for (const ::torch::jit::Block* block = node->owningBlock(); block && block->owningNode();
         block = block->owningNode()->owningBlock())
        if (block->owningNode()->kind() == kind) return true;
    return false;
}

inline bool inside_loop(const ::torch::jit::Node* node) { return inside_node_of_kind(node, c10::prim::Loop); }

// The module paths of the conv and linear layers `model`'s forward calls in a loop body. Layers
// of the model's own forward (path "") are not listed: giving the model itself no QConfig would
// leave everything float.
inline std::set<std::string> layers_called_in_loops(const ::torch::jit::Module& model) {
    const auto graph = model.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    std::set<std::string> paths;
    for (const ::torch::jit::Node* node : nodes_where(graph, [](const ::torch::jit::Node* n) {
             return is_quantizable_op(n->kind().toQualString()) && inside_loop(n);
         }))
        if (const std::optional<std::string> path = call_stack_path(node); path && !path->empty()) paths.insert(*path);
    return paths;
}

// How a stage's adjustment for a layer it leaves float begins; the report's float-layer list
// (analysis/float_layers.hpp) takes the reason after it.
inline constexpr std::string_view stays_float_note = "stays float: ";

// The reason the report gives for such a layer.
inline constexpr const char* float_in_loop_reason =
    "stays float: called inside a loop (prim::Loop), where LibTorch 1.13's graph-mode quantization places no "
    "observers";

static_assert(std::string_view(float_in_loop_reason).starts_with(stays_float_note));

}  // namespace versatil::libtorch

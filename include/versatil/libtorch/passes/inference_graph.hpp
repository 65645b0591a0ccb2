// Specializes a model's graphs for inference before observers go in. InsertObservers needs
// the two branches of every `if` to be observed alike, and two kinds of branch break that in
// models people write:
//   - branches on settings fixed for inference: `self.training` (torchvision's stochastic
//     depth), flags such as DenseNet's memory_efficient, arguments every caller passes alike
//     (MultiheadAttention's need_weights). The model is in eval mode and these are constants,
//     so they become constants in the graphs and their dead branches fold away;
//   - PyTorch's fused inference fast paths (nn.TransformerEncoderLayer's and
//     nn.MultiheadAttention's): one kernel that hides the linear layers, beside a reference
//     branch that computes the same values with them. The reference branch is kept, so its
//     linear layers quantize.
// Editing a graph edits its class type, which every submodule of that type shares: call this
// on a clone (prepare does), never on the caller's model. Not for QAT, which trains.
#pragma once

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

// What specialize_for_inference changed, for the report.
struct inference_specialization {
    int constants = 0;   // attribute reads and call arguments that became constants
    int fast_paths = 0;  // fused fast-path branches replaced by their reference branch
};

namespace detail {

// Fused kernels of PyTorch's inference fast paths, each beside a reference branch of the
// same function built from linear layers.
inline bool is_fused_fast_path(const ::torch::jit::Node* node) {
    constexpr std::array<std::string_view, 3> kinds{"aten::_transformer_encoder_layer_fwd",
                                                    "aten::_native_multi_head_attention",
                                                    "aten::_transformer_decoder_only_layer_fwd"};
    return std::ranges::find(kinds, std::string_view(node->kind().toQualString())) != kinds.end();
}

inline bool block_has_fast_path(::torch::jit::Block* block) {
    bool found = false;
    for_each_node(block, [&](const ::torch::jit::Node* node) { found = found || is_fused_fast_path(node); });
    return found;
}

// Inlines calls to free functions (not to submodules' methods, which observers need): a flag
// passed to a function, as `stochastic_depth(x, p, mode, self.training)` does, only folds
// inside the caller's graph.
inline void inline_function_calls(const std::shared_ptr<::torch::jit::Graph>& graph) {
    for (;;) {
        const auto calls = nodes_where(graph, [](::torch::jit::Node* node) {
            return node->kind() == c10::prim::CallFunction && node->input(0)->node()->kind() == c10::prim::Constant &&
                   ::torch::jit::tryToGraphFunction(node) != nullptr;
        });
        if (calls.empty()) return;
        for (::torch::jit::Node* call : calls) {
            ::torch::jit::GraphFunction* callee = ::torch::jit::tryToGraphFunction(call);
            call->removeInput(0);
            ::torch::jit::inlineCallTo(call, callee);
        }
    }
}

// Plain values a graph can hold as constants.
inline bool is_plain(const c10::IValue& value) {
    return value.isBool() || value.isInt() || value.isDouble() || value.isString() || value.isNone();
}

inline bool same_plain(const c10::IValue& a, const c10::IValue& b) {
    if (a.tagKind() != b.tagKind()) return false;
    if (a.isBool()) return a.toBool() == b.toBool();
    if (a.isInt()) return a.toInt() == b.toInt();
    if (a.isDouble()) return a.toDouble() == b.toDouble();
    if (a.isString()) return a.toStringRef() == b.toStringRef();
    return a.isNone();
}

// Module attributes of plain types (bool, int, float, str: self.training, flags such as
// DenseNet's memory_efficient or MultiheadAttention's batch_first) become constants where no
// method assigns them and every instance of the type holds the same value.
inline int fold_constant_attributes(const ::torch::jit::Module& model, bool training_only) {
    std::unordered_map<const c10::ClassType*, std::vector<::torch::jit::Module>> instances;
    for (const auto& item : model.named_modules()) instances[item.value.type().get()].push_back(item.value);
    int folded = 0;
    for (const auto& [type, modules] : instances) {
        const auto graphs = method_graphs(modules.front().type());
        std::unordered_set<std::string> assigned;
        for (const auto& graph : graphs)
            for (const ::torch::jit::Node* node :
                 nodes_where(graph, [](const ::torch::jit::Node* n) { return n->kind() == c10::prim::SetAttr; }))
                assigned.insert(node->s(c10::attr::name));
        for (const auto& graph : graphs) {
            for (::torch::jit::Node* read : self_attribute_reads(graph)) {
                const std::string name = read->s(c10::attr::name);
                if (assigned.count(name) != 0 || (training_only && name != "training")) continue;
                const c10::IValue value = modules.front().attr(name);
                // None stays an attribute: passes after this one fill some in (FoldConvBatchNorm
                // gives a bias-less convolution a bias).
                if (!is_plain(value) || value.isNone()) continue;
                bool shared = true;
                for (const ::torch::jit::Module& other : modules)
                    shared = shared && same_plain(other.attr(name), value);
                if (!shared) continue;
                const ::torch::jit::WithInsertPoint here(read);
                read->output()->replaceAllUsesWith(graph->insertConstant(value));
                read->destroy();
                ++folded;
            }
        }
    }
    return folded;
}

// Arguments that every call of a submodule method passes as the same plain constant (the
// defaults TorchScript writes at each call site, ViT's need_weights=False) become constants
// inside that method, so the branches they steer fold.
inline int fold_constant_arguments(const ::torch::jit::Module& model) {
    struct argument {
        bool varying = false;
        std::optional<c10::IValue> value;
    };
    std::map<std::pair<c10::ClassTypePtr, std::string>, std::vector<argument>> calls;
    for (const auto& graph : all_method_graphs(model)) {
        for (const ::torch::jit::Node* call :
             nodes_where(graph, [](const ::torch::jit::Node* n) { return n->kind() == c10::prim::CallMethod; })) {
            const c10::ClassTypePtr callee = call->input(0)->type()->cast<c10::ClassType>();
            if (!callee) continue;
            std::vector<argument>& arguments = calls[{callee, call->s(c10::attr::name)}];
            arguments.resize(std::max(arguments.size(), call->inputs().size()));
            for (std::size_t i = 1; i < call->inputs().size(); ++i) {
                argument& seen = arguments[i];
                const auto constant = ::torch::jit::toIValue(call->input(i));  // c10::optional: IValue converts from it
                if (!constant || !is_plain(*constant) || (seen.value && !same_plain(*seen.value, *constant)))
                    seen.varying = true;
                else
                    seen.value = constant;
            }
        }
    }
    int folded = 0;
    for (const auto& [method, arguments] : calls) {
        ::torch::jit::Function* function = method.first->findMethod(method.second);
        if (!function || !function->isGraphFunction()) continue;
        const std::shared_ptr<::torch::jit::Graph> graph = ::torch::jit::toGraphFunction(*function).graph();
        for (std::size_t i = 1; i < arguments.size() && i < graph->inputs().size(); ++i) {
            ::torch::jit::Value* input = graph->inputs()[i];
            if (arguments[i].varying || !arguments[i].value || !input->hasUses()) continue;
            const ::torch::jit::WithInsertPoint here(graph->block()->nodes().front());
            input->replaceAllUsesWith(graph->insertConstant(*arguments[i].value));
            ++folded;
        }
    }
    return folded;
}

// Makes the outermost `if`s that hold a fast path take their other branch; constant
// propagation then inlines that branch. An `if` with a fast path on both sides stays.
inline int take_reference_branches(const std::shared_ptr<::torch::jit::Graph>& graph) {
    int replaced = 0;
    std::vector<::torch::jit::Node*> pending{graph->block()->nodes().begin(), graph->block()->nodes().end()};
    while (!pending.empty()) {
        ::torch::jit::Node* node = pending.back();
        pending.pop_back();
        if (node->kind() == c10::prim::If) {
            const bool first = block_has_fast_path(node->blocks()[0]);
            const bool second = block_has_fast_path(node->blocks()[1]);
            if (first != second) {
                const ::torch::jit::WithInsertPoint here(node);
                node->replaceInput(0, graph->insertConstant(second));  // true runs the first branch
                ++replaced;
                continue;
            }
        }
        for (::torch::jit::Block* inner : node->blocks())
            pending.insert(pending.end(), inner->nodes().begin(), inner->nodes().end());
    }
    return replaced;
}

}  // namespace detail

// How far to specialize. LibTorch's quantization passes are fragile on rewritten graphs (a
// DenseNet whose flags are constants crashes InsertQuantDeQuant; a ViT whose functions are
// inlined makes InsertObservers observe a list), so prepare goes only as deep as a model needs.
enum class specialization_depth {
    none,       // the graphs as scripted
    branches,   // self.training folded, fast paths replaced by their reference branches
    constants,  // and plain attributes and call arguments folded
    inlined,    // and free functions inlined first, so flags passed to them fold too
};

inline inference_specialization specialize_for_inference(const ::torch::jit::Module& model,
                                                         specialization_depth depth = specialization_depth::inlined) {
    inference_specialization changes;
    if (depth == specialization_depth::none) return changes;
    const bool deep = depth >= specialization_depth::constants;
    if (depth == specialization_depth::inlined)
        for (const auto& graph : all_method_graphs(model)) detail::inline_function_calls(graph);
    // Each round's constants can make more call arguments constant in the next.
    for (int round = 0; round < 8; ++round) {
        const int attributes = detail::fold_constant_attributes(model, /*training_only=*/!deep);
        const int arguments = deep ? detail::fold_constant_arguments(model) : 0;
        int fast_paths = 0;
        for (std::shared_ptr<::torch::jit::Graph> graph : all_method_graphs(model)) {
            fast_paths += detail::take_reference_branches(graph);
            ::torch::jit::ConstantPropagation(graph);
            ::torch::jit::EliminateDeadCode(graph);
        }
        changes.constants += attributes + arguments;
        changes.fast_paths += fast_paths;
        if (attributes + arguments + fast_paths == 0) break;
    }
    return changes;
}

}  // namespace versatil::libtorch

// Walking TorchScript graphs: every node at any depth (inside `if` and loop blocks too, where
// a top-level walk misses them), and every method graph of every distinct module type.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/scope.h>
#include <torch/script.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace versatil::libtorch {

// The module path an inlined node was called from ("layer1.0.conv1"; "" for the model's own
// forward), when LibTorch kept it: its passes drop the call stack of the nodes they rewrite.
// Frames of functions and of methods a module calls on itself add nothing: LibTorch names the
// latter "SELF", and models written in Python are full of them (torchvision's ResNet.forward
// calls self._forward_impl, nn.Conv2d.forward self._conv_forward).
inline std::optional<std::string> call_stack_path(const ::torch::jit::Node* node) {
    const auto stack = node->callstack();
    if (!stack) return std::nullopt;
    std::string path;
    for (const auto& entry : (*stack)->vec()) {
        const auto& module = std::get<2>(entry);
        if (!module || module->instance_name() == "SELF") continue;
        path += (path.empty() ? "" : ".") + module->instance_name();
    }
    return path;
}

// Calls visit(node) for every node of `block` and of the blocks nested in its nodes.
template <class Visit>
void for_each_node(::torch::jit::Block* block, Visit&& visit) {
    for (::torch::jit::Node* node : block->nodes()) {
        visit(node);
        for (::torch::jit::Block* inner : node->blocks()) for_each_node(inner, visit);
    }
}

// The nodes of `graph`, at any depth, for which matches(node) holds; collected first, so the
// caller may edit or destroy them.
template <class Predicate>
std::vector<::torch::jit::Node*> nodes_where(const std::shared_ptr<::torch::jit::Graph>& graph, Predicate&& matches) {
    std::vector<::torch::jit::Node*> found;
    for_each_node(graph->block(), [&](::torch::jit::Node* node) {
        if (matches(node)) found.push_back(node);
    });
    return found;
}

// Whether `graph` has, at any depth, a node for which matches(node) holds.
template <class Predicate>
bool has_node_where(const std::shared_ptr<::torch::jit::Graph>& graph, Predicate&& matches) {
    bool found = false;
    for_each_node(graph->block(), [&](const ::torch::jit::Node* node) { found = found || matches(node); });
    return found;
}

// Whether `graph` has, at any depth, a node of one of `kinds`.
inline bool has_node_of_kind(const std::shared_ptr<::torch::jit::Graph>& graph,
                             std::initializer_list<c10::Symbol> kinds) {
    return has_node_where(graph, [&](const ::torch::jit::Node* node) {
        return std::find(kinds.begin(), kinds.end(), node->kind()) != kinds.end();
    });
}

// The nodes of a method graph that read an attribute of its own module (`self.name`): the
// graph's first input is `self`.
inline std::vector<::torch::jit::Node*> self_attribute_reads(const std::shared_ptr<::torch::jit::Graph>& graph) {
    const ::torch::jit::Value* self = graph->inputs().empty() ? nullptr : graph->inputs()[0];
    return nodes_where(graph, [&](const ::torch::jit::Node* node) {
        return node->kind() == c10::prim::GetAttr && node->input() == self;
    });
}

// The graphs of a module type's methods (forward and every helper such as _conv_forward).
inline std::vector<std::shared_ptr<::torch::jit::Graph>> method_graphs(const c10::ClassTypePtr& type) {
    std::vector<std::shared_ptr<::torch::jit::Graph>> graphs;
    for (::torch::jit::Function* method : type->methods())
        if (method->isGraphFunction()) graphs.push_back(::torch::jit::toGraphFunction(*method).graph());
    return graphs;
}

// Every method graph of the model and its submodules, each distinct type once: submodules
// that share a class type share its graphs.
inline std::vector<std::shared_ptr<::torch::jit::Graph>> all_method_graphs(const ::torch::jit::Module& model) {
    std::vector<std::shared_ptr<::torch::jit::Graph>> graphs;
    std::unordered_set<const c10::ClassType*> seen;
    for (const auto& item : model.named_modules()) {
        if (!seen.insert(item.value.type().get()).second) continue;
        for (auto& graph : method_graphs(item.value.type())) graphs.push_back(std::move(graph));
    }
    return graphs;
}

// The module path of every module value of a method graph that reads submodules from `self`
// (its first input, path "") by attribute chains, as an inlined forward does: "features.0".
inline std::map<const ::torch::jit::Value*, std::string> module_value_paths(
    const std::shared_ptr<::torch::jit::Graph>& graph) {
    std::map<const ::torch::jit::Value*, std::string> paths;
    if (graph->inputs().empty()) return paths;
    paths.emplace(graph->inputs()[0], "");
    for_each_node(graph->block(), [&](const ::torch::jit::Node* node) {
        if (node->kind() != c10::prim::GetAttr || !node->output()->type()->cast<c10::ClassType>()) return;
        const auto parent = paths.find(node->input());
        if (parent == paths.end()) return;
        const std::string name = node->s(c10::attr::name);
        paths.emplace(node->output(), parent->second.empty() ? name : parent->second + "." + name);
    });
    return paths;
}

}  // namespace versatil::libtorch

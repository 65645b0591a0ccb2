// Calls to parameterless leaf submodules (nn.ReLU, nn.Flatten, pooling, a residual add + relu)
// inlined into their callers before observers are placed.
//
// LibTorch 1.13's InsertObservers first preprocesses the graph of every submodule method it
// will visit, once per call: replaceConvolutionWithAtenConv and FuseLinear each parse their IR
// patterns anew (std::regex included) whatever the graph holds, ~0.4 ms a call. That was half
// of InsertObservers' time on the benchmark CNNs, where a ReLU module per convolution makes a
// third of the calls. Such a module holds nothing to observe or quantize of its own (no
// parameter, no buffer, no submodule), so its ops observed in the caller's graph are observed
// as in its own: the lowered models of the four benchmark architectures, both backends, give
// the same outputs to the bit with and without this step (tests/torch/pipeline.cpp checks it).
// A call is kept where the callee's path has a QConfig of its own (a target or an exclusion
// naming it), which its caller's graph would not carry. Submodules with children are kept too:
// inlining a container's body leaves GetAttr chains InsertQuantDeQuant rejects.
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/script.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace versatil::libtorch {

namespace detail {

inline bool is_parameterless_leaf(const ::torch::jit::Module& module) {
    return module.named_parameters(/*recurse=*/false).size() == 0 &&
           module.named_buffers(/*recurse=*/false).size() == 0 && module.named_children().size() == 0;
}

// `forward` calls on a direct child (self.relu(x)) in `graph`, with the child's attribute name.
inline std::vector<std::pair<::torch::jit::Node*, std::string>> child_forward_calls(
    const std::shared_ptr<::torch::jit::Graph>& graph) {
    std::vector<std::pair<::torch::jit::Node*, std::string>> calls;
    ::torch::jit::Value* self = graph->inputs().empty() ? nullptr : graph->inputs()[0];
    for (::torch::jit::Node* node : graph->nodes()) {
        if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward") continue;
        const ::torch::jit::Node* get = node->input(0)->node();
        if (get->kind() == c10::prim::GetAttr && get->input(0) == self)
            calls.emplace_back(node, get->s(c10::attr::name));
    }
    return calls;
}

}  // namespace detail

// Inlines the eligible calls of every method graph of `model` (each graph once: instances of a
// type share theirs, so a call is inlined only where no instance's child has a QConfig of its
// own). Returns how many calls were inlined. Call it on a clone.
inline int inline_parameterless_leaf_calls(::torch::jit::Module& model, const ::torch::jit::QConfigDict& dict) {
    using call_site = std::pair<const ::torch::jit::Graph*, std::string>;  // a graph and the child it calls
    std::set<call_site> kept;  // a site any instance must keep
    for (const auto& item : model.named_modules())
        for (const ::torch::jit::Method& method : item.value.get_methods())
            for (const auto& [call, child] : detail::child_forward_calls(method.graph())) {
                const std::string path = item.name.empty() ? child : item.name + "." + child;
                if (dict.count(path) || !detail::is_parameterless_leaf(item.value.attr(child).toModule()))
                    kept.insert({method.graph().get(), child});
            }
    int inlined = 0;
    std::set<const ::torch::jit::Graph*> done;
    for (const auto& item : model.named_modules())
        for (const ::torch::jit::Method& method : item.value.get_methods()) {
            const std::shared_ptr<::torch::jit::Graph> graph = method.graph();
            if (!done.insert(graph.get()).second) continue;
            for (const auto& [call, child] : detail::child_forward_calls(graph)) {
                if (kept.count({graph.get(), child})) continue;
                ::torch::jit::Function& forward = item.value.attr(child).toModule().type()->getMethod("forward");
                ::torch::jit::inlineCallTo(call, &::torch::jit::toGraphFunction(forward));
                ++inlined;
            }
        }
    return inlined;
}

}  // namespace versatil::libtorch

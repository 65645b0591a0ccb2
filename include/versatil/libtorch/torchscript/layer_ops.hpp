// The conv / linear ops of an inlined forward graph that run a given layer: those whose weight
// argument is the layer's `weight` attribute, read directly or through quantize / dequantize
// (a converted model's). accuracy/layer_recorder.hpp instruments these ops to measure a layer's
// inputs (GPTQ) or outputs (bias correction) where the forward computes them.
#pragma once

#include <torch/script.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

struct layer_op {
    ::torch::jit::Node* op;        // aten::conv2d, aten::linear, ...
    ::torch::jit::Value* layer;    // the layer's module value in the graph
    std::string path;              // its module path
};

namespace detail {
// The value a weight argument was read from: through dequantize and quantize ops.
inline ::torch::jit::Value* weight_source(::torch::jit::Value* value) {
    for (;;) {
        const std::string_view kind = value->node()->kind().toQualString();
        if (kind != "aten::dequantize" && kind != "aten::quantize_per_tensor" && kind != "aten::quantize_per_channel")
            return value;
        value = value->node()->input(0);
    }
}
}  // namespace detail

// The ops of `graph` (an inlined forward) that run a layer `wanted` holds (by path), in graph order.
template <class Wanted>
std::vector<layer_op> ops_of_layers(const std::shared_ptr<::torch::jit::Graph>& graph, const Wanted& wanted) {
    const std::map<const ::torch::jit::Value*, std::string> path_of = module_value_paths(graph);
    std::vector<layer_op> found;
    for (::torch::jit::Node* op : nodes_where(graph, [](const ::torch::jit::Node* node) {
             return is_quantizable_op(node->kind().toQualString()) && node->inputs().size() >= 2;
         })) {
        ::torch::jit::Node* read = detail::weight_source(op->input(1))->node();
        if (read->kind() != c10::prim::GetAttr || read->s(c10::attr::name) != "weight") continue;
        const auto path = path_of.find(read->input());
        if (path == path_of.end() || wanted.count(path->second) == 0) continue;
        found.push_back({op, read->input(), path->second});
    }
    return found;
}

}  // namespace versatil::libtorch

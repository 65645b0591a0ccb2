// A dequantize of a tuple, split into a dequantize per item.
#pragma once

#include <torch/script.h>

#include <memory>
#include <vector>

#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch::detail {

// LibTorch 1.13's quantization passes move a dequantize past the TupleConstruct of a model
// returning several quantized tensors, leaving aten::dequantize applied to the tuple: it runs
// (as dequantize of a list, returning a list), but the saved model no longer loads ("annotated
// as having type Tuple[Tensor, Tensor] but is actually of type List[Tensor]"). Each such node
// becomes a dequantize per item, packed into the tuple again; a tuple built just before gives
// its items directly, so each dequantize reads the quantize that made its item.
inline void dequantize_tuples_item_by_item(const std::shared_ptr<::torch::jit::Graph>& graph) {
    const auto wrong = nodes_where(graph, [](const ::torch::jit::Node* node) {
        return node->kind() == c10::aten::dequantize && node->inputs().size() == 1 &&
               node->input()->type()->kind() == c10::TypeKind::TupleType;
    });
    for (::torch::jit::Node* node : wrong) {
        const ::torch::jit::WithInsertPoint here(node);
        ::torch::jit::Node* built = node->input()->node();
        const auto parts = built->kind() == c10::prim::TupleConstruct
                               ? built->inputs()
                               : graph->insertNode(graph->createTupleUnpack(node->input()))->outputs();
        std::vector<::torch::jit::Value*> items;
        for (::torch::jit::Value* item : parts) {
            ::torch::jit::Node* dequantize = graph->insertNode(graph->create(c10::aten::dequantize, {item}));
            dequantize->output()->setType(c10::TensorType::get());
            items.push_back(dequantize->output());
        }
        ::torch::jit::Node* tuple = graph->insertNode(graph->createTuple(items));
        node->output()->replaceAllUsesWith(tuple->output());
        node->destroy();
        if (built->kind() == c10::prim::TupleConstruct && built->output()->uses().empty()) built->destroy();
    }
}

}  // namespace versatil::libtorch::detail

// LSTM and GRU layers quantized dynamically, as PyTorch's quantize_dynamic quantizes them
// (torch.ao.nn.quantized.dynamic.LSTM / GRU): per direction and layer, both weight matrices
// quantized, prepacked with their biases (quantized::linear_prepack) and bound into a cell
// (quantized::make_quantized_cell_params_dynamic); aten::lstm / aten::gru on the float weights
// become aten::quantized_lstm / aten::quantized_gru on those cells, which quantize each step's
// input and hidden state at run time. Runs on a frozen model, where the weights are constants.
//
// What LibTorch 1.13 cannot quantize stays float, with the reason recorded: nn.RNN (no quantized
// op), an LSTM projection (proj_size), layers without a bias. Single cells (LSTMCell, GRUCell)
// and packed sequences are not quantized here yet and say so.
#pragma once

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/script.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/observers/quantized_weight.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/call_operator.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

namespace detail {

// The recurrent ops of a TorchScript graph and the layer each belongs to.
inline std::optional<std::string> recurrent_layer_type(const ::torch::jit::Node* node) {
    const std::string_view kind = node->kind().toQualString();
    if (kind == "aten::lstm") return "LSTM";
    if (kind == "aten::gru") return "GRU";
    if (kind == "aten::rnn_tanh" || kind == "aten::rnn_relu") return "RNN";
    if (kind == "aten::lstm_cell") return "LSTMCell";
    if (kind == "aten::gru_cell") return "GRUCell";
    if (kind == "aten::rnn_tanh_cell" || kind == "aten::rnn_relu_cell") return "RNNCell";
    return std::nullopt;
}

// aten::lstm.input and aten::gru.input share their arguments' positions:
// (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first).
enum argument : std::size_t { params = 2, has_biases = 3, num_layers = 4, train = 6, bidirectional = 7 };

// Why LibTorch cannot quantize this recurrent op dynamically (or versatil does not yet); none
// when it can.
inline std::optional<std::string> stays_float_because(const ::torch::jit::Node* node, const std::string& kind) {
    if (kind == "RNN") return "LibTorch 1.13 has no quantized RNN op (quantize_dynamic leaves nn.RNN float too)";
    if (kind != "LSTM" && kind != "GRU")
        return "a single " + kind + " is not quantized by versatil yet (only LSTM and GRU)";
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (!schema || schema->overload_name() != "input")
        return "its input is a packed sequence, not quantized by versatil yet";
    const auto constant = [&](std::size_t index) { return ::torch::jit::toIValue(node->input(index)); };
    const std::optional<c10::IValue> weights = constant(params), biased = constant(has_biases),
                                     layers = constant(num_layers), training = constant(train),
                                     both_ways = constant(bidirectional);
    if (!weights || !biased || !layers || !training || !both_ways)
        return "its weights or configuration are computed at run time";
    if (training->toBool()) return "it runs in training mode";
    if (!biased->toBool())
        return "it has no bias: LibTorch 1.13's quantized cells take one (quantize_dynamic refuses bias=False too)";
    const std::int64_t cells = layers->toInt() * (both_ways->toBool() ? 2 : 1);
    if (static_cast<std::int64_t>(weights->toTensorList().size()) != cells * 4)
        return "it has a projection (proj_size): LibTorch 1.13's quantized LSTM has none";
    for (const at::Tensor& weight : weights->toTensorVector())
        if (weight.scalar_type() != at::kFloat)
            return std::string("its weights are ") + c10::toString(weight.scalar_type());
    return std::nullopt;
}

// The cells of a layer's flat weights (w_ih, w_hh, b_ih, b_hh per layer and direction), made as
// quantize_dynamic makes them. `reduce_range` is what the cells pass their dynamic linear ops.
inline c10::impl::GenericList quantized_cells(const std::vector<at::Tensor>& flat_weights,
                                              const quantization_spec& weight_spec, bool reduce_range) {
    std::optional<c10::impl::GenericList> cells;
    for (std::size_t i = 0; i + 3 < flat_weights.size(); i += 4) {
        const at::Tensor &w_ih = flat_weights[i], &w_hh = flat_weights[i + 1];
        const at::Tensor &b_ih = flat_weights[i + 2], &b_hh = flat_weights[i + 3];
        const c10::IValue packed_ih =
            call_operator("quantized::linear_prepack", {quantized_weight(w_ih, weight_spec), b_ih}).front();
        const c10::IValue packed_hh =
            call_operator("quantized::linear_prepack", {quantized_weight(w_hh, weight_spec), b_hh}).front();
        const c10::IValue cell = call_operator("quantized::make_quantized_cell_params_dynamic",
                                               {packed_ih, packed_hh, b_ih, b_hh, reduce_range})
                                     .front();
        if (!cells) cells.emplace(cell.type());
        cells->push_back(cell);
    }
    return std::move(*cells);
}

// The float op replaced by its quantized one reading `cells`, registered on `module` as an
// attribute (saved with it, as the packed weights of linear layers are).
inline void replace_with_quantized(::torch::jit::Module& module, ::torch::jit::Node* node,
                                   c10::impl::GenericList cells, const std::string& attribute) {
    ::torch::jit::Graph& graph = *node->owningGraph();
    const bool lstm = node->kind() == c10::aten::lstm;
    module.register_attribute(attribute, c10::ListType::create(cells.elementType()), std::move(cells));
    const ::torch::jit::WithInsertPoint before(node);
    std::vector<::torch::jit::Value*> inputs(node->inputs().begin(), node->inputs().end());
    inputs[params] = graph.insertGetAttr(graph.inputs()[0], attribute);
    if (lstm) {  // quantize_dynamic's keyword arguments: qint8 weights, dynamic cells
        inputs.push_back(graph.insertConstant(static_cast<std::int64_t>(at::kQInt8)));
        inputs.push_back(graph.insertConstant(true));
    }
    ::torch::jit::Node* quantized =
        graph.create(c10::Symbol::fromQualString(lstm ? "aten::quantized_lstm" : "aten::quantized_gru"), inputs,
                     node->outputs().size());
    quantized->insertBefore(node)->copyMetadata(node);
    if (!quantized->maybeSchema())
        throw std::runtime_error("versatil: no quantized recurrent op matches " +
                                 std::string(node->kind().toQualString()));
    for (std::size_t i = 0; i < node->outputs().size(); ++i) {
        quantized->output(i)->setType(node->output(i)->type());
        node->output(i)->replaceAllUsesWith(quantized->output(i));
    }
    node->destroy();
}

}  // namespace detail

// Every recurrent layer of a frozen model's forward, those of dynamic targets quantized in place
// on the plan's engine (with engine_scope(plan.engine) active), each with its outcome. LibTorch's
// QNNPACK ignores reduce_range and warns on every step when asked for it, so its cells are not
// (same outputs); the other engines get it, as quantize_dynamic gives it.
inline std::vector<recurrent_layer> quantize_recurrent_layers(::torch::jit::Module& frozen,
                                                              const quantization_plan& plan) {
    std::vector<recurrent_layer> layers;
    const std::shared_ptr<::torch::jit::Graph> graph = frozen.get_method("forward").graph();
    const bool reduce_range = plan.engine != at::QEngine::QNNPACK;
    for (::torch::jit::Node* node : nodes_where(graph, [](const ::torch::jit::Node* n) {
             return detail::recurrent_layer_type(n).has_value();
         })) {
        recurrent_layer layer{call_stack_path(node).value_or(""), *detail::recurrent_layer_type(node)};
        const target_plan* target = plan.target_for(layer.module_path);
        if (!target) {
            layer.stays_float_because = "outside every target, or excluded";
        } else if (!target->dynamic) {
            layer.stays_float_because = "LibTorch 1.13 quantizes LSTM and GRU dynamically only: give its target the "
                                        "dynamic option";
        } else if (auto because = detail::stays_float_because(node, layer.kind)) {
            layer.stays_float_because = std::move(*because);
        } else {
            const auto flat_weights = ::torch::jit::toIValue(node->input(detail::params))->toTensorVector();
            const quantization_spec& weight_spec = *plan.quantizer.quantizer_for(layer.module_path)->config().weight;
            std::string attribute = "_recurrent_cells_" + std::to_string(layers.size());
            while (frozen.hasattr(attribute)) attribute += "_";
            detail::replace_with_quantized(
                frozen, node, detail::quantized_cells(flat_weights, weight_spec, reduce_range), attribute);
            layer.quantized = true;
        }
        layers.push_back(std::move(layer));
    }
    ::torch::jit::EliminateDeadCode(graph);
    return layers;
}

// The report's note for each recurrent layer of a target that stays float.
inline void note_float_recurrent_layers(const std::vector<recurrent_layer>& layers, const quantization_plan& plan,
                                        std::vector<adjustment>& adjustments) {
    for (const recurrent_layer& layer : layers)
        if (!layer.quantized && plan.target_for(layer.module_path))
            adjustments.push_back({layer.module_path, layer.kind + " stays float: " + layer.stays_float_because});
}

}  // namespace versatil::libtorch

// The integer graph of a model lowered for a microcontroller (a cortex_m quantizer): the
// lowered TorchScript forward walked op by op, the packed weights unpacked, and every
// activation's shape and quantization read off one batch-1 run of the lowered graph itself
// (so what is exported is what LibTorch evaluated). The firmware code generator
// (versatil::codegen) turns the result into a compile-time C++ model.
//
// Exported: quantize_per_tensor of the input, quantized::conv2d / conv2d_relu (stride,
// padding, dilation, groups: depthwise included) and conv1d (a conv2d of height 1),
// quantized::linear / linear_relu, quantized::add / add_relu, quantized::mul / mul_relu (the
// second operand may be broadcast per channel: squeeze-and-excite), quantized::cat, relu /
// hardtanh (ReLU6) / clamp, the elementwise ops of one input that LibTorch runs on int8
// (sigmoid, hardsigmoid, hardswish, tanh, leaky_relu, elu, a scalar add or mul: lookup tables
// LibTorch's own op fills at export), max_pool2d, avg_pool2d, adaptive_avg_pool2d (to 1x1, or
// by a whole factor), flatten / view / reshape / squeeze / unsqueeze (views), permute /
// transpose, contiguous and eval-mode dropout (no-ops), the dequantize of the one output and
// a softmax over its channels after it. Anything else is an error(unsupported_export) naming
// the op and the module it comes from.
#pragma once

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <algorithm>
#include <initializer_list>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "versatil/codegen/integer_graph.hpp"
#include "versatil/codegen/validate.hpp"
#include "versatil/firmware/data_movement/concat.hpp"
#include "versatil/firmware/elementwise/lookup.hpp"
#include "versatil/firmware/elementwise/softmax.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/call_operator.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/passes/fold_batch_norm.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"

namespace versatil::libtorch {

namespace detail {

using ::torch::jit::Node;
using ::torch::jit::Value;

inline bool has_tensor_output(const Node* node) {
    return std::any_of(node->outputs().begin(), node->outputs().end(), [](const Value* output) {
        return output->type()->kind() == c10::TypeKind::TensorType;
    });
}

// The float op a lowered op stands for: quantized::conv2d_relu was aten::conv2d, and so on.
inline std::string float_kind(std::string kind) {
    if (kind.starts_with("quantized::")) {
        kind = "aten::" + kind.substr(11);
        if (kind.ends_with("_relu")) kind.resize(kind.size() - 5);
    }
    if (kind.ends_with("_") && !kind.ends_with("__")) kind.pop_back();  // relu_ is relu
    return kind;
}

// The module each tensor op of the lowered graph comes from. LibTorch keeps the call stack of
// the float ops it leaves alone but not of those it rewrites (quantized::conv2d, ...), so each
// lowered op is matched with the float model's ops of its kind in forward's order (the inlined
// graph at any depth, which keeps call stacks) when both have as many; otherwise its own call
// stack names it, when it has one.
inline std::unordered_map<const Node*, std::string> module_names(const ::torch::jit::Module& float_model,
                                                                 const std::shared_ptr<::torch::jit::Graph>& lowered) {
    ::torch::jit::Module clone = private_clone(float_model);
    clone.eval();
    auto graph = fold_batch_norms(clone).get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    ::torch::jit::ConstantPropagation(graph);  // Conv2d's padding_mode branch, and the like
    std::map<std::string, std::vector<std::string>> float_paths;
    for_each_node(graph->block(), [&](const Node* node) {
        if (has_tensor_output(node))
            float_paths[float_kind(node->kind().toQualString())].push_back(call_stack_path(node).value_or(""));
    });
    std::map<std::string, std::vector<const Node*>> lowered_nodes;
    for_each_node(lowered->block(), [&](const Node* node) {
        if (has_tensor_output(node)) lowered_nodes[float_kind(node->kind().toQualString())].push_back(node);
    });
    std::unordered_map<const Node*, std::string> names;
    for (const auto& [kind, nodes] : lowered_nodes) {
        const auto paths = float_paths.find(kind);
        const bool matched = paths != float_paths.end() && paths->second.size() == nodes.size();
        for (std::size_t i = 0; i < nodes.size(); ++i)
            names[nodes[i]] = matched ? paths->second[i] : call_stack_path(nodes[i]).value_or("");
    }
    return names;
}

// Every value of the top-level block as one run of the graph computes it: the graph's
// outputs are replaced by a tuple of them, run by the TorchScript interpreter on `self` and
// the sample.
inline std::unordered_map<const Value*, c10::IValue> probe(const std::shared_ptr<::torch::jit::Graph>& graph,
                                                           const ::torch::jit::Module& module,
                                                           const at::Tensor& sample) {
    std::vector<Value*> values;
    for (Node* node : graph->nodes())
        for (Value* output : node->outputs()) values.push_back(output);
    const std::vector<Value*> returned(graph->outputs().begin(), graph->outputs().end());
    const ::torch::jit::WithInsertPoint at_return(graph->return_node());
    Node* tuple = graph->insertNode(graph->createTuple(values));
    for (std::size_t i = returned.size(); i-- > 0;) graph->eraseOutput(i);
    graph->registerOutput(tuple->output());

    const ::torch::jit::Code code(graph, "versatil_export_probe");
    std::vector<c10::IValue> stack{module._ivalue(), sample};
    {
        const ::torch::NoGradGuard no_grad;
        ::torch::jit::InterpreterState(code).run(stack);
    }
    const auto& items = stack.at(0).toTupleRef().elements();
    std::unordered_map<const Value*, c10::IValue> computed;
    for (std::size_t i = 0; i < values.size(); ++i) computed.emplace(values[i], items[i]);

    // The graph as it was: the tuple out, the outputs back.
    graph->eraseOutput(0);
    tuple->destroy();
    for (Value* output : returned) graph->registerOutput(output);
    return computed;
}

inline std::vector<int> int_vector(const c10::IValue& value) {
    std::vector<int> ints;
    for (const std::int64_t i : value.toIntVector()) ints.push_back(static_cast<int>(i));
    return ints;
}

// A pair from a TorchScript int list of one or two items (kernel_size=3 is [3, 3]).
inline std::pair<int, int> pair_of(const std::vector<int>& list, std::pair<int, int> if_empty) {
    if (list.empty()) return if_empty;
    return {list.front(), list.size() > 1 ? list[1] : list.front()};
}

class extractor {
public:
    extractor(const ::torch::jit::Module& float_model, const lowered_model& lowered, const at::Tensor& sample)
        : lowered_(lowered) {
        graph_ = lowered.module.get_method("forward").graph()->copy();
        ::torch::jit::Inline(*graph_);
        if (graph_->inputs().size() != 2)
            fail("the model's forward takes " + std::to_string(graph_->inputs().size() - 1) +
                 " inputs; firmware models take one tensor");
        values_ = probe(graph_, lowered.module, sample);
        names_ = module_names(float_model, graph_);
    }

    codegen::integer_graph run() {
        refuse_unsupported_kinds();
        for (Node* node : graph_->nodes()) visit(node);
        if (graph_->outputs().size() != 1 || graph_->outputs()[0] != output_value_ || result_.output < 0)
            fail("the model must return one tensor, dequantized from an int8 one (it returns " +
                 graph_->outputs()[0]->type()->str() + ")");
        return std::move(result_);
    }

private:
    [[noreturn]] static void fail(const std::string& message) {
        throw error(error_kind::unsupported_export, "cannot export for firmware: " + message);
    }

    [[noreturn]] void unsupported(const Node* node, const std::string& module, const std::string& why) const {
        fail("op '" + std::string(node->kind().toQualString()) + "' in module '" +
             (module.empty() ? std::string("(the model's forward)") : module) + "' " + why);
    }

    const c10::IValue& computed(const Value* value) const { return values_.at(value); }

    // The activation tensor a lowered value holds: batch 1, int8 levels (quint8 less 128).
    codegen::activation_tensor activation(const Value* value, const Node* node, const std::string& module) const {
        const c10::IValue& ivalue = computed(value);
        if (!ivalue.isTensor() || !ivalue.toTensor().is_quantized())
            unsupported(node, module, "produces a float tensor; firmware runs int8 ops only");
        const at::Tensor& tensor = ivalue.toTensor();
        if (tensor.qscheme() != c10::kPerTensorAffine)
            unsupported(node, module, "produces a tensor quantized per channel; activations are per-tensor");
        const std::int64_t offset = tensor.scalar_type() == c10::kQUInt8 ? 128 : 0;
        if (tensor.scalar_type() != c10::kQUInt8 && tensor.scalar_type() != c10::kQInt8)
            unsupported(
                node, module,
                "produces a " + std::string(c10::toString(tensor.scalar_type())) + " tensor; activations are 8-bit");
        return {shape_of_sizes(tensor.sizes(), node, module), tensor.q_scale(),
                static_cast<std::int32_t>(tensor.q_zero_point() - offset)};
    }

    // A tensor's shape as the firmware holds it (activation()'s rule).
    codegen::tensor_shape shape_of_sizes(c10::IntArrayRef sizes, const Node* node, const std::string& module) const {
        codegen::tensor_shape shape;
        if (sizes.empty() || sizes[0] != 1)
            unsupported(node, module, "produces a tensor of shape " + c10::str(sizes) + "; firmware runs batch 1");
        if (sizes.size() == 4)
            shape = {static_cast<int>(sizes[1]), static_cast<int>(sizes[2]), static_cast<int>(sizes[3])};
        else if (sizes.size() == 3)
            shape = {static_cast<int>(sizes[1]), 1, static_cast<int>(sizes[2])};  // [1, C, L]: a row of height 1
        else if (sizes.size() == 2)
            shape = {static_cast<int>(sizes[1]), 1, 1};
        else
            unsupported(node, module,
                        "produces a tensor of shape " + c10::str(sizes) +
                            "; firmware tensors are images [1, C, H, W], sequences [1, C, L] or rows [1, F]");
        return shape;
    }

    int add_tensor(const Value* value, const Node* node, const std::string& module) {
        result_.tensors.push_back(activation(value, node, module));
        const int index = static_cast<int>(result_.tensors.size()) - 1;
        tensor_of_[value] = index;
        return index;
    }

    int input_tensor(const Node* node, std::size_t i, const std::string& module) const {
        const auto found = tensor_of_.find(node->input(i));
        if (found == tensor_of_.end())
            unsupported(node, module, "reads a value that is not an int8 activation (input " + std::to_string(i) +
                                          ": " + node->input(i)->type()->str() + ")");
        return found->second;
    }

    codegen::integer_op& emit(codegen::op_kind kind, const Node* node, const std::string& module,
                              std::vector<int> inputs) {
        codegen::integer_op op;
        op.kind = kind;
        op.module = module;
        op.inputs = std::move(inputs);
        op.output = add_tensor(node->output(), node, module);
        result_.ops.push_back(std::move(op));
        return result_.ops.back();
    }

    // The output is the same tensor (a no-op for the export); in-place ops alias their input.
    void alias(const Node* node, const std::string& module) {
        if (const auto island = dequantized_.find(node->input(0)); island != dequantized_.end())
            dequantized_[node->output()] = island->second;
        else
            tensor_of_[node->output()] = input_tensor(node, 0, module);
    }

    // LibTorch's graph mode runs the ops it has no int8 kernel for in float between a dequantize
    // and a quantize_per_tensor (a Dropout(inplace=True), an F.pad). Where those ops only move
    // values, the float tensor is still an int8 tensor's exact dequantization: an island the
    // export keeps in int8, its tensors quantized as the one it came from.
    bool on_island(const Node* node) const { return dequantized_.contains(node->input(0)); }

    // The int8 tensor input 0 holds (on an island, the one it is the dequantization of).
    int source_tensor(const Node* node, const std::string& module) const {
        const auto island = dequantized_.find(node->input(0));
        return island != dequantized_.end() ? island->second : input_tensor(node, 0, module);
    }

    // emit(), for an op on an island: its output quantized as its input, its float value the
    // island's from here on.
    codegen::integer_op& emit_on_island(codegen::op_kind kind, const Node* node, const std::string& module, int input) {
        const codegen::activation_tensor& from = result_.tensors.at(static_cast<std::size_t>(input));
        codegen::integer_op op;
        op.kind = kind;
        op.module = module;
        op.inputs = {input};
        result_.tensors.push_back(
            {shape_of_sizes(computed(node->output()).toTensor().sizes(), node, module), from.scale, from.zero_point});
        op.output = static_cast<int>(result_.tensors.size()) - 1;
        dequantized_[node->output()] = op.output;
        result_.ops.push_back(std::move(op));
        return result_.ops.back();
    }

    codegen::integer_op& emit_moving(codegen::op_kind kind, const Node* node, const std::string& module) {
        const int input = source_tensor(node, module);
        return on_island(node) ? emit_on_island(kind, node, module, input) : emit(kind, node, module, {input});
    }

    // quantize_per_tensor of an island's value: the same tensor when the quantization is the
    // island's, else a requantization by the table LibTorch's dequantize and quantize give.
    void leave_island(const Node* node, const std::string& module) {
        const int input = dequantized_.at(node->input(0));
        const codegen::activation_tensor out = activation(node->output(), node, module);
        const codegen::activation_tensor& in = result_.tensors.at(static_cast<std::size_t>(input));
        if (codegen::detail::same_quantization(in, out) && out.shape == in.shape) {
            tensor_of_[node->output()] = input;
            return;
        }
        const at::Tensor& like = computed(node->output()).toTensor();
        const at::Tensor levels = every_level(like.scalar_type(), in.scale,
                                              in.zero_point + (like.scalar_type() == c10::kQUInt8 ? 128 : 0), 2);
        const at::Tensor requantized = at::quantize_per_tensor(levels.dequantize(), like.q_scale(), like.q_zero_point(),
                                                               like.scalar_type());
        codegen::integer_op& op = emit(codegen::op_kind::lookup, node, module, {input});
        op.table = int8_levels(requantized);
    }

    // F.pad / constant_pad_nd with a constant on the value's grid (0.0: the zero point).
    void pad(const Node* node, const std::string& module) {
        const std::vector<std::int64_t> amounts = computed(node->input(1)).toIntVector();
        double value = 0.0;
        if (node->kind() == c10::aten::constant_pad_nd) {
            value = computed(node->input(2)).toScalar().toDouble();
        } else {
            if (computed(node->input(2)).toStringRef() != "constant")
                unsupported(
                    node, module,
                    "pads in mode '" + computed(node->input(2)).toStringRef() + "'; firmware pads with a constant");
            if (node->inputs().size() > 3 && !computed(node->input(3)).isNone())
                value = computed(node->input(3)).toDouble();
        }
        const std::int64_t rank = computed(node->input(0)).toTensor().dim();
        codegen::integer_op& op = emit_moving(codegen::op_kind::pad, node, module);
        const codegen::activation_tensor& in = result_.tensors.at(static_cast<std::size_t>(op.inputs[0]));
        for (std::size_t i = 0; i + 1 < amounts.size() && i / 2 < static_cast<std::size_t>(rank); i += 2) {
            const int axis = chw_axis(rank, rank - 1 - static_cast<std::int64_t>(i / 2));
            if (amounts[i] < 0 || amounts[i + 1] < 0) unsupported(node, module, "pads by a negative amount (a crop)");
            if (axis < 0 && (amounts[i] != 0 || amounts[i + 1] != 0)) unsupported(node, module, "pads the batch");
            if (axis >= 0) op.before[axis] = static_cast<int>(amounts[i]);
        }
        const double level = value / in.scale + in.zero_point;
        if (level != std::nearbyint(level) || level < -128 || level > 127)
            unsupported(node, module,
                        "pads with " + std::to_string(value) + ", which is not a level of its int8 input");
        op.pad_level = static_cast<std::int32_t>(level);
    }

    void weights(codegen::integer_op& op, const at::Tensor& weight, const c10::IValue& bias, const Node* node,
                 const std::string& module) const {
        if (weight.scalar_type() != c10::kQInt8)
            unsupported(node, module,
                        "has " + std::string(c10::toString(weight.scalar_type())) + " weights; firmware takes int8");
        const std::int64_t outputs = weight.size(0);
        if (weight.qscheme() == c10::kPerChannelAffine || weight.qscheme() == c10::kPerChannelSymmetric) {
            if (weight.q_per_channel_axis() != 0)
                unsupported(node, module,
                            "has weights quantized along axis " + std::to_string(weight.q_per_channel_axis()) +
                                "; firmware takes axis 0");
            if (weight.q_per_channel_zero_points().ne(0).any().item<bool>())
                unsupported(node, module,
                            "has asymmetric weights (a zero point other than 0); firmware takes symmetric ones (the "
                            "cortex_m backend)");
            const at::Tensor scales = weight.q_per_channel_scales().to(at::kDouble).contiguous();
            op.weight_scales.assign(scales.data_ptr<double>(), scales.data_ptr<double>() + outputs);
        } else {
            if (weight.q_zero_point() != 0)
                unsupported(node, module,
                            "has asymmetric weights (zero point " + std::to_string(weight.q_zero_point()) +
                                "); firmware takes symmetric ones (the cortex_m backend)");
            op.weight_scales.assign(static_cast<std::size_t>(outputs), weight.q_scale());
        }
        const at::Tensor levels = weight.int_repr().contiguous();
        if (levels.min().item<std::int8_t>() < -127)
            unsupported(
                node, module,
                "has a weight at level -128; symmetric int8 weights stay in [-127, 127] (the cortex_m backend)");
        op.weights.assign(levels.data_ptr<std::int8_t>(), levels.data_ptr<std::int8_t>() + levels.numel());
        if (bias.isTensor()) {
            const at::Tensor values = bias.toTensor().to(at::kFloat).contiguous();
            op.bias.assign(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
        }
    }

    void check_shape(const codegen::integer_op& op, const codegen::tensor_shape& expected, const Node* node) const {
        const codegen::tensor_shape& actual = result_.tensors.at(static_cast<std::size_t>(op.output)).shape;
        if (!(actual == expected))
            unsupported(node, op.module, "gives a " + describe(actual) + " output where its parameters give " +
                                             describe(expected) + " (ceil_mode is not exported)");
    }

    static std::string describe(const codegen::tensor_shape& shape) {
        return std::to_string(shape.channels) + "x" + std::to_string(shape.height) + "x" + std::to_string(shape.width);
    }

    static int windowed(int size, int kernel, int stride, int padding, int dilation) {
        return (size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
    }

    const codegen::tensor_shape& shape_of(int tensor) const {
        return result_.tensors.at(static_cast<std::size_t>(tensor)).shape;
    }

    void conv2d(const Node* node, const std::string& module, bool relu) {
        const c10::IValue& packed = computed(node->input(1));
        if (call_operator("quantized::conv2d_transpose", {packed}).at(0).toInt() != 0)
            unsupported(node, module, "is a transposed convolution, which firmware does not run");
        const std::vector<c10::IValue> unpacked = call_operator("quantized::conv2d_unpack", {packed});
        const auto [stride_h, stride_w] =
            pair_of(int_vector(call_operator("quantized::conv2d_stride", {packed}).at(0)), {1, 1});
        const auto [pad_h, pad_w] =
            pair_of(int_vector(call_operator("quantized::conv2d_padding", {packed}).at(0)), {0, 0});
        const auto [dil_h, dil_w] =
            pair_of(int_vector(call_operator("quantized::conv2d_dilation", {packed}).at(0)), {1, 1});
        const int groups = static_cast<int>(call_operator("quantized::conv2d_groups", {packed}).at(0).toInt());
        const at::Tensor& weight = unpacked.at(0).toTensor();
        const int input = input_tensor(node, 0, module);
        codegen::integer_op& op = emit(codegen::op_kind::conv2d, node, module, {input});
        op.relu = relu;
        op.groups = groups;
        op.window = {static_cast<int>(weight.size(2)), static_cast<int>(weight.size(3)), stride_h, stride_w,
                     pad_h, pad_w, dil_h, dil_w};
        weights(op, weight, unpacked.at(1), node, module);
        const codegen::tensor_shape& in = shape_of(input);
        if (weight.size(1) * groups != in.channels)
            unsupported(node, module, "takes " + std::to_string(weight.size(1) * groups) + " channels but gets " +
                                          std::to_string(in.channels));
        check_shape(op,
                    {static_cast<int>(weight.size(0)), windowed(in.height, op.window.kernel_h, stride_h, pad_h, dil_h),
                     windowed(in.width, op.window.kernel_w, stride_w, pad_w, dil_w)},
                    node);
    }

    void linear(const Node* node, const std::string& module, bool relu) {
        const std::vector<c10::IValue> unpacked = call_operator("quantized::linear_unpack", {computed(node->input(1))});
        const at::Tensor& weight = unpacked.at(0).toTensor();
        const int input = input_tensor(node, 0, module);
        const codegen::tensor_shape& in = shape_of(input);
        if (in.height != 1 || in.width != 1 || in.channels != weight.size(1))
            unsupported(node, module, "reads a " + describe(in) + " tensor; a linear layer takes a row of " +
                                          std::to_string(weight.size(1)) + " (flatten first)");
        codegen::integer_op& op = emit(codegen::op_kind::linear, node, module, {input});
        op.relu = relu;
        weights(op, weight, unpacked.at(1), node, module);
        check_shape(op, {static_cast<int>(weight.size(0)), 1, 1}, node);
    }

    // relu, hardtanh (ReLU6) and clamp: the bounds in real values; an open side is the end of
    // the output's int8 range.
    void clamp(const Node* node, const std::string& module, std::optional<double> low, std::optional<double> high) {
        const bool in_place = std::string_view(node->kind().toQualString()).ends_with("_");
        const int input = input_tensor(node, 0, module);
        codegen::integer_op& op = emit(codegen::op_kind::clamp, node, module, {input});
        const codegen::activation_tensor& out = result_.tensors.at(static_cast<std::size_t>(op.output));
        op.clamp_min = low.value_or(out.scale * (-128 - out.zero_point));
        op.clamp_max = high.value_or(out.scale * (127 - out.zero_point));
        if (!(op.clamp_min <= op.clamp_max)) unsupported(node, module, "clamps to an empty range");
        check_shape(op, shape_of(input), node);
        if (in_place) tensor_of_[node->input(0)] = op.output;  // later reads of the input see the clamp
    }

    static std::optional<double> optional_scalar(const c10::IValue& value) {
        if (value.isNone()) return std::nullopt;
        return value.toScalar().toDouble();
    }

    void pool(const Node* node, const std::string& module, codegen::op_kind kind) {
        const auto [kernel_h, kernel_w] = pair_of(int_vector(computed(node->input(1))), {1, 1});
        const auto [stride_h, stride_w] = pair_of(int_vector(computed(node->input(2))), {kernel_h, kernel_w});
        const auto [pad_h, pad_w] = pair_of(int_vector(computed(node->input(3))), {0, 0});
        std::pair<int, int> dilation{1, 1};
        if (kind == codegen::op_kind::max_pool2d) {
            dilation = pair_of(int_vector(computed(node->input(4))), {1, 1});
        } else if (!computed(node->input(6)).isNone()) {
            unsupported(node, module, "sets divisor_override, which firmware does not run");
        }
        const int input = input_tensor(node, 0, module);
        codegen::integer_op& op = emit(kind, node, module, {input});
        op.window = {kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation.first, dilation.second};
        if (kind == codegen::op_kind::avg_pool2d) op.count_include_pad = computed(node->input(5)).toBool();
        const codegen::tensor_shape& in = shape_of(input);
        check_shape(op,
                    {in.channels, windowed(in.height, kernel_h, stride_h, pad_h, dilation.first),
                     windowed(in.width, kernel_w, stride_w, pad_w, dilation.second)},
                    node);
    }

    // Adaptive average pooling to 1x1 is global average pooling; to a size that divides the
    // input it is average pooling with the quotient as window and stride.
    void adaptive_avg_pool(const Node* node, const std::string& module) {
        const int input = input_tensor(node, 0, module);
        const codegen::tensor_shape in = shape_of(input);
        const auto [out_h, out_w] = pair_of(int_vector(computed(node->input(1))), {1, 1});
        if (out_h == 1 && out_w == 1) {
            check_shape(emit(codegen::op_kind::global_avg_pool2d, node, module, {input}), {in.channels, 1, 1}, node);
            return;
        }
        if (out_h <= 0 || out_w <= 0 || in.height % out_h != 0 || in.width % out_w != 0)
            unsupported(node, module, "pools " + describe(in) + " to " + std::to_string(out_h) + "x" +
                                          std::to_string(out_w) + ", not by a whole factor");
        codegen::integer_op& op = emit(codegen::op_kind::avg_pool2d, node, module, {input});
        const int kernel_h = in.height / out_h, kernel_w = in.width / out_w;
        op.window = {kernel_h, kernel_w, kernel_h, kernel_w, 0, 0, 1, 1};
        check_shape(op, {in.channels, out_h, out_w}, node);
    }

    // flatten, view, reshape, squeeze, unsqueeze: the same bytes in C, H, W order under another
    // shape (a view of batch 1); one of the same shape is the same tensor.
    void view(const Node* node, const std::string& module) {
        const int input = source_tensor(node, module);
        if (shape_of_sizes(computed(node->output()).toTensor().sizes(), node, module) == shape_of(input)) {
            alias(node, module);
            return;
        }
        emit_moving(codegen::op_kind::flatten, node, module);
    }

    // The axis of a firmware shape (0 channels, 1 height, 2 width) that dimension `dim` of a
    // tensor of `rank` dimensions is (activation()'s mapping); -1 for the batch.
    static int chw_axis(std::int64_t rank, std::int64_t dim) {
        if (dim < 0) dim += rank;
        if (dim <= 0 || dim >= rank) return -1;
        if (rank == 4) return static_cast<int>(dim) - 1;
        return dim == 1 ? 0 : 2;  // [1, C, L] and [1, F]
    }

    // permute / transpose (then contiguous): a copy in the new order. Unit axes a firmware shape
    // adds (the height of [1, C, L]) stay where they are.
    void permute(const Node* node, const std::string& module, const std::vector<std::int64_t>& dims) {
        const auto rank = static_cast<std::int64_t>(dims.size());
        codegen::integer_op& op = emit_moving(codegen::op_kind::permute, node, module);
        op.axes[0] = 0, op.axes[1] = 1, op.axes[2] = 2;
        for (std::int64_t j = 0; j < rank; ++j) {
            const int to = chw_axis(rank, j), from = chw_axis(rank, dims[static_cast<std::size_t>(j)]);
            if ((to < 0) != (from < 0)) unsupported(node, module, "moves the batch dimension; firmware runs batch 1");
            if (to >= 0) op.axes[to] = from;
        }
    }

    std::vector<std::int64_t> permutation(const Node* node, const std::string& module) const {
        const std::int64_t rank = computed(node->input(0)).toTensor().dim();
        if (node->kind().toQualString() == std::string_view("aten::permute"))
            return computed(node->input(1)).toIntVector();
        std::vector<std::int64_t> dims;
        for (std::int64_t d = 0; d < rank; ++d) dims.push_back(d);
        std::int64_t a = computed(node->input(1)).toInt(), b = computed(node->input(2)).toInt();
        if (a < 0) a += rank;
        if (b < 0) b += rank;
        if (a < 0 || b < 0 || a >= rank || b >= rank)
            unsupported(node, module, "transposes a dimension it does not have");
        std::swap(dims[static_cast<std::size_t>(a)], dims[static_cast<std::size_t>(b)]);
        return dims;
    }

    // A tensor holding every level of a quantized type once, with that quantization, shaped
    // [1, 256, 1, ...] to `rank`: what an elementwise op's table is computed from.
    static at::Tensor every_level(c10::ScalarType type, double scale, std::int64_t zero_point, std::int64_t rank) {
        std::vector<std::int64_t> sizes(static_cast<std::size_t>(rank), 1);
        sizes.at(1) = firmware::lookup_table_size;
        const bool unsigned_levels = type == c10::kQUInt8;
        const at::Tensor levels = at::arange(unsigned_levels ? 0 : -128, unsigned_levels ? 256 : 128, at::kInt)
                                      .to(unsigned_levels ? at::kByte : at::kChar)
                                      .reshape(sizes);
        return at::_make_per_tensor_quantized_tensor(levels, scale, zero_point);
    }

    // every_level with `like`'s type, quantization and rank.
    static at::Tensor every_level(const at::Tensor& like) {
        return every_level(like.scalar_type(), like.q_scale(), like.q_zero_point(), like.dim());
    }

    // The int8 levels of a quantized tensor of 256 elements (quint8 less 128).
    static std::vector<std::int8_t> int8_levels(const at::Tensor& tensor) {
        const std::int64_t offset = tensor.scalar_type() == c10::kQUInt8 ? 128 : 0;
        const at::Tensor values = tensor.int_repr().to(at::kInt).flatten().contiguous();
        std::vector<std::int8_t> levels;
        for (std::int64_t i = 0; i < values.numel(); ++i)
            levels.push_back(static_cast<std::int8_t>(values.data_ptr<std::int32_t>()[i] - offset));
        return levels;
    }

    // An elementwise op of one int8 input as a table: the op itself (LibTorch's kernel, under the
    // model's engine) run on every level, so the firmware gives LibTorch's bytes by construction.
    // The sample the export probed must agree with the table, else the op is not elementwise.
    void lookup(const Node* node, const std::string& module) {
        const int input = input_tensor(node, 0, module);
        const at::Tensor& x = computed(node->input(0)).toTensor();
        std::vector<c10::IValue> stack{every_level(x)};
        for (std::size_t i = 1; i < node->inputs().size(); ++i) stack.push_back(computed(node->input(i)));
        node->getOperation()(stack);
        const at::Tensor& y = stack.back().toTensor();
        if (!y.is_quantized() || y.numel() != firmware::lookup_table_size)
            unsupported(node, module, "does not give one int8 level per input level");
        const bool in_place = std::string_view(node->kind().toQualString()).ends_with("_");
        codegen::integer_op& op = emit(codegen::op_kind::lookup, node, module, {input});
        op.table = int8_levels(y);
        const codegen::activation_tensor& out = result_.tensors.at(static_cast<std::size_t>(op.output));
        if (out.scale != y.q_scale() ||
            out.zero_point != y.q_zero_point() - (y.scalar_type() == c10::kQUInt8 ? 128 : 0))
            unsupported(node, module, "quantizes its output by its input's values (not elementwise by level)");
        if (!in_place) {  // an in-place op's probed input is its output already
            const std::vector<std::int8_t> in = int8_levels(x),
                                           sample = int8_levels(computed(node->output()).toTensor());
            for (std::size_t i = 0; i < in.size(); ++i)
                if (sample[i] != op.table[static_cast<std::size_t>(in[i] + 128)])
                    unsupported(node, module,
                                "is not elementwise by level: its table disagrees with the probed sample");
        }
        check_shape(op, shape_of(input), node);
        if (in_place) tensor_of_[node->input(0)] = op.output;
    }

    void mul(const Node* node, const std::string& module, bool relu) {
        emit(codegen::op_kind::mul, node, module, {input_tensor(node, 0, module), input_tensor(node, 1, module)}).relu =
            relu;
    }

    // quantized::cat(tensors, dim, scale, zero_point): each part requantized to the output by a
    // table LibTorch's cat fills (the part alone, every level), or copied when it shares the
    // output's quantization.
    void concat(const Node* node, const std::string& module) {
        const Node* list = node->input(0)->node();
        if (list->kind() != c10::prim::ListConstruct)
            unsupported(node, module, "concatenates a list the graph does not build in place");
        const std::size_t parts = list->inputs().size();
        if (parts == 0 || parts > static_cast<std::size_t>(firmware::max_concat_parts))
            unsupported(node, module, "concatenates " + std::to_string(parts) + " tensors; firmware takes 1 to " +
                                          std::to_string(firmware::max_concat_parts));
        std::vector<int> inputs;
        for (std::size_t k = 0; k < parts; ++k) inputs.push_back(input_tensor(list, k, module));
        const at::Tensor& first = computed(list->input(0)).toTensor();
        const int axis = chw_axis(first.dim(), computed(node->input(1)).toInt());
        if (axis < 0) unsupported(node, module, "concatenates along the batch; firmware runs batch 1");
        codegen::integer_op& op = emit(codegen::op_kind::concat, node, module, inputs);
        op.axis = axis;
        const codegen::activation_tensor& out = result_.tensors.at(static_cast<std::size_t>(op.output));
        for (std::size_t k = 0; k < parts; ++k) {
            const codegen::activation_tensor& part = result_.tensors.at(static_cast<std::size_t>(inputs[k]));
            if (codegen::detail::same_quantization(part, out)) {
                op.part_tables.emplace_back();
                continue;
            }
            std::vector<c10::IValue> stack{c10::List<at::Tensor>({every_level(computed(list->input(k)).toTensor())})};
            for (std::size_t i = 1; i < node->inputs().size(); ++i) stack.push_back(computed(node->input(i)));
            node->getOperation()(stack);
            op.part_tables.push_back(int8_levels(stack.back().toTensor()));
        }
    }

    // A softmax over the channels of the model's dequantized output: exported as int8 softmax
    // (firmware/elementwise/softmax.hpp), its output at scale 1/256 and zero point -128, and the
    // model's output from then on.
    void softmax(const Node* node, const std::string& module) {
        if (node->input(0) != output_value_ || result_.output < 0)
            unsupported(node, module, "runs in float on a value other than the model's int8 output; firmware runs a "
                                      "softmax only as the model's last op");
        const codegen::activation_tensor& logits = result_.tensors.at(static_cast<std::size_t>(result_.output));
        const std::int64_t rank = computed(node->input(0)).toTensor().dim();
        if (chw_axis(rank, computed(node->input(1)).toInt()) != 0)
            unsupported(node, module, "takes the softmax along a dimension other than the channels");
        if (!computed(node->input(2)).isNone())
            unsupported(node, module, "sets a dtype; firmware computes the softmax in int8");
        codegen::integer_op op;
        op.kind = codegen::op_kind::softmax;
        op.module = module;
        op.inputs = {result_.output};
        result_.tensors.push_back({logits.shape, firmware::softmax_output_scale, firmware::softmax_output_zero_point});
        op.output = static_cast<int>(result_.tensors.size()) - 1;
        result_.ops.push_back(std::move(op));
        result_.output = result_.ops.back().output;
        output_value_ = node->output();
    }

    std::string module_of(const Node* node) const {
        const auto found = names_.find(node);
        return found != names_.end() ? found->second : call_stack_path(node).value_or("");
    }

    static bool is_one_of(std::string_view kind, std::initializer_list<std::string_view> kinds) {
        return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
    }

    // Elementwise ops of one int8 tensor whose output level depends on the input level only.
    static bool is_lookup_kind(std::string_view kind) {
        return is_one_of(kind, {"quantized::hardswish", "aten::hardswish", "aten::hardswish_", "aten::hardsigmoid",
                                "aten::hardsigmoid_", "aten::sigmoid", "aten::sigmoid_", "quantized::sigmoid",
                                "aten::tanh", "aten::tanh_", "quantized::leaky_relu", "aten::leaky_relu",
                                "aten::leaky_relu_", "quantized::elu", "aten::elu", "quantized::celu",
                                "quantized::mul_scalar", "quantized::mul_scalar_relu", "quantized::add_scalar",
                                "quantized::add_scalar_relu"});
    }

    static bool is_view_kind(std::string_view kind) {
        return is_one_of(kind, {"aten::flatten", "aten::view", "aten::reshape", "aten::squeeze", "aten::unsqueeze"});
    }

    static bool is_exported_kind(std::string_view kind) {
        return is_lookup_kind(kind) || is_view_kind(kind) ||
               is_one_of(kind, {"aten::quantize_per_tensor", "aten::dequantize", "quantized::conv2d",
                                "quantized::conv2d_relu", "quantized::conv1d", "quantized::conv1d_relu",
                                "quantized::linear", "quantized::linear_relu", "quantized::add", "quantized::add_relu",
                                "quantized::mul", "quantized::mul_relu", "quantized::cat", "quantized::cat_relu",
                                "aten::relu", "aten::relu_", "aten::hardtanh", "aten::hardtanh_", "aten::clamp",
                                "aten::clamp_", "aten::max_pool2d", "aten::avg_pool2d", "aten::adaptive_avg_pool2d",
                                "aten::permute", "aten::transpose", "aten::contiguous", "aten::dropout",
                                "aten::dropout_", "aten::softmax", "aten::pad", "aten::constant_pad_nd"});
    }

    // The first op, at any depth and in forward's order, of a kind firmware has no kernel for:
    // refused before shapes are checked, so a model is refused for what it computes (a
    // transformer block's ops) rather than for a shape on the way there.
    void refuse_unsupported_kinds() const {
        const Node* first = nullptr;
        std::string last_module;  // of the ops before it, for one LibTorch keeps no module path for
        for_each_node(graph_->block(), [&](const Node* node) {
            if (first || !has_tensor_output(node) || node->kind() == c10::prim::Constant || !node->blocks().empty())
                return;
            if (!is_exported_kind(node->kind().toQualString())) first = node;
            else if (std::string module = module_of(node); !module.empty()) last_module = std::move(module);
        });
        if (!first) return;
        const auto value = values_.find(first->outputs()[0]);
        const bool float_op =
            value != values_.end() && value->second.isTensor() && !value->second.toTensor().is_quantized();
        const std::string module = module_of(first);
        if (module.empty() && !last_module.empty())
            fail("op '" + std::string(first->kind().toQualString()) + "' after module '" + last_module +
                 "' (LibTorch keeps no module path for it) " + (float_op ? runs_in_float : no_kernel));
        unsupported(first, module, float_op ? runs_in_float : no_kernel);
    }

    static constexpr const char* runs_in_float =
        "runs in float (a layer left unquantized, or an op LibTorch has no int8 kernel for); firmware runs int8 ops "
        "only";
    static constexpr const char* no_kernel =
        "has no int8 kernel in the firmware runtime (it runs conv1d/conv2d, linear, add, mul, concatenation, "
        "relu/relu6/clamp, sigmoid, hardsigmoid, hardswish, tanh, max and average pooling, reshapes, permutes and a "
        "final softmax)";

    void visit(Node* node) {
        const std::string kind = node->kind().toQualString();
        const bool tensor_op = has_tensor_output(node);
        bool blocks_compute = false;
        for (::torch::jit::Block* block : node->blocks())
            for_each_node(block,
                          [&](const Node* inner) { blocks_compute = blocks_compute || has_tensor_output(inner); });
        // Constants, attributes, lists, shape checks: a tensor constant is data an op may read
        // (input_tensor refuses one that is read as an activation).
        if ((!tensor_op && !blocks_compute) || node->kind() == c10::prim::Constant) return;
        const std::string module = module_of(node);
        if (!node->blocks().empty())
            unsupported(node, module, "computes tensors under control flow; firmware runs a fixed sequence of ops");

        if (kind == "aten::quantize_per_tensor" && on_island(node)) {
            leave_island(node, module);
        } else if (kind == "aten::pad" || kind == "aten::constant_pad_nd") {
            pad(node, module);
        } else if (kind == "aten::quantize_per_tensor") {
            if (node->input(0) != graph_->inputs()[1] || result_.input >= 0)
                unsupported(node, module, "quantizes a value computed in float; firmware runs int8 ops only");
            result_.input = add_tensor(node->output(), node, module);
        } else if (kind == "aten::dequantize") {
            result_.output = input_tensor(node, 0, module);
            output_value_ = node->output();
            dequantized_[node->output()] = result_.output;
        } else if (kind == "aten::softmax") {
            softmax(node, module);
        } else if (kind.starts_with("quantized::conv2d") || kind.starts_with("quantized::conv1d")) {
            conv2d(node, module, kind.ends_with("_relu"));  // a conv1d's packed weights are a conv2d's of height 1
        } else if (kind == "quantized::linear" || kind == "quantized::linear_relu") {
            linear(node, module, kind.ends_with("_relu"));
        } else if (kind == "quantized::mul" || kind == "quantized::mul_relu") {
            mul(node, module, kind.ends_with("_relu"));
        } else if (kind == "quantized::cat" || kind == "quantized::cat_relu") {
            concat(node, module);
        } else if (is_lookup_kind(kind)) {
            lookup(node, module);
        } else if (kind == "aten::permute" || kind == "aten::transpose") {
            permute(node, module, permutation(node, module));
        } else if (kind == "quantized::add" || kind == "quantized::add_relu") {
            emit(codegen::op_kind::add, node, module, {input_tensor(node, 0, module), input_tensor(node, 1, module)})
                .relu = kind.ends_with("_relu");
        } else if (kind == "aten::relu" || kind == "aten::relu_") {
            clamp(node, module, 0.0, std::nullopt);
        } else if (kind == "aten::hardtanh" || kind == "aten::hardtanh_") {
            clamp(node, module, computed(node->input(1)).toScalar().toDouble(),
                  computed(node->input(2)).toScalar().toDouble());
        } else if (kind == "aten::clamp" || kind == "aten::clamp_") {
            clamp(node, module, optional_scalar(computed(node->input(1))), optional_scalar(computed(node->input(2))));
        } else if (kind == "aten::max_pool2d") {
            pool(node, module, codegen::op_kind::max_pool2d);
        } else if (kind == "aten::avg_pool2d") {
            pool(node, module, codegen::op_kind::avg_pool2d);
        } else if (kind == "aten::adaptive_avg_pool2d") {
            adaptive_avg_pool(node, module);
        } else if (is_view_kind(kind)) {
            view(node, module);
        } else if (kind == "aten::contiguous" ||
                   ((kind == "aten::dropout" || kind == "aten::dropout_") && !computed(node->input(2)).toBool())) {
            alias(node, module);
        } else {
            unsupported(node, module, no_kernel);  // refuse_unsupported_kinds found it first
        }
    }

    const lowered_model& lowered_;
    std::unordered_map<const Node*, std::string> names_;
    std::shared_ptr<::torch::jit::Graph> graph_;
    std::unordered_map<const Value*, c10::IValue> values_;
    std::unordered_map<const Value*, int> tensor_of_;
    std::unordered_map<const Value*, int> dequantized_;  // float values that are an int8 tensor's dequantization
    const Value* output_value_ = nullptr;
    codegen::integer_graph result_;
};

}  // namespace detail

// The integer graph of `lowered` (quantized from `float_model` for a microcontroller), its
// shapes and activation quantization read off one run on the first sample of `sample`; an
// error(unsupported_export) naming the op and module that firmware cannot run.
inline codegen::integer_graph extract_integer_graph(const ::torch::jit::Module& float_model,
                                                    const lowered_model& lowered, const batch& sample) {
    if (!lowered.plan.quantizer.supported_device_types().contains(device_type::mcu))
        throw error(error_kind::unsupported_export,
                    "cannot export for firmware: the model is quantized for " + engine_name(lowered.plan.engine) +
                        " on the CPU; quantize it for a microcontroller (a cortex_m target, --target =cortex_m)");
    if (sample.arity() != 1)
        throw error(error_kind::unsupported_export, "cannot export for firmware: the model takes " +
                                                        std::to_string(sample.arity()) +
                                                        " inputs; firmware models take one tensor");
    const engine_scope engine(lowered.plan.engine);
    detail::extractor extractor(float_model, lowered, sample.input().slice(0, 0, 1).contiguous());
    return extractor.run();
}

}  // namespace versatil::libtorch

// Checks an integer graph before anything is generated from it: indices, order, shapes,
// quantization and parameter counts. A malformed graph is a std::invalid_argument whose
// message names the op's index, module and kind and says what is wrong, so the exporter can
// report it and write no header.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "versatil/codegen/integer_graph.hpp"
#include "versatil/firmware/data_movement/concat.hpp"
#include "versatil/firmware/data_movement/pad.hpp"
#include "versatil/firmware/data_movement/permute.hpp"
#include "versatil/firmware/dot.hpp"
#include "versatil/firmware/elementwise/lookup.hpp"
#include "versatil/firmware/elementwise/mul.hpp"
#include "versatil/firmware/elementwise/softmax.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::codegen {

inline const char* op_kind_name(op_kind kind) noexcept {
    switch (kind) {
        case op_kind::conv2d: return "conv2d";
        case op_kind::linear: return "linear";
        case op_kind::add: return "add";
        case op_kind::clamp: return "clamp";
        case op_kind::max_pool2d: return "max_pool2d";
        case op_kind::avg_pool2d: return "avg_pool2d";
        case op_kind::global_avg_pool2d: return "global_avg_pool2d";
        case op_kind::flatten: return "flatten";
        case op_kind::lookup: return "lookup";
        case op_kind::mul: return "mul";
        case op_kind::softmax: return "softmax";
        case op_kind::concat: return "concat";
        case op_kind::permute: return "permute";
        case op_kind::pad: return "pad";
    }
    return "unknown op";
}

inline std::string describe(const tensor_shape& s) {
    return "{" + std::to_string(s.channels) + ", " + std::to_string(s.height) + ", " + std::to_string(s.width) + "}";
}

inline firmware::shape to_firmware(const tensor_shape& s) noexcept { return {s.channels, s.height, s.width}; }

inline firmware::window to_firmware(const window_2d& w) noexcept {
    return {w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.padding_h, w.padding_w, w.dilation_h, w.dilation_w};
}

namespace detail {

[[noreturn]] inline void reject(std::size_t index, const integer_op& op, const std::string& problem) {
    throw std::invalid_argument("versatil::codegen: op " + std::to_string(index) + " '" + op.module + "' (" +
                                op_kind_name(op.kind) + "): " + problem);
}

[[noreturn]] inline void reject_graph(const std::string& problem) {
    throw std::invalid_argument("versatil::codegen: " + problem);
}

inline bool same_quantization(const activation_tensor& a, const activation_tensor& b) noexcept {
    return a.scale == b.scale && a.zero_point == b.zero_point;
}

inline void check_weighted(std::size_t index, const integer_op& op, int out_channels, std::size_t per_channel,
                           std::size_t taps) {
    const std::size_t expected = static_cast<std::size_t>(out_channels) * per_channel;
    if (op.weights.size() != expected)
        reject(index, op, std::to_string(op.weights.size()) + " weights, expected " + std::to_string(expected));
    if (op.weight_scales.size() != static_cast<std::size_t>(out_channels))
        reject(index, op, std::to_string(op.weight_scales.size()) + " weight scales for " +
                              std::to_string(out_channels) + " output channels");
    for (double scale : op.weight_scales)
        if (!(scale > 0.0) || !std::isfinite(scale)) reject(index, op, "a weight scale is not positive and finite");
    if (!op.bias.empty() && op.bias.size() != static_cast<std::size_t>(out_channels))
        reject(index, op, std::to_string(op.bias.size()) + " biases for " + std::to_string(out_channels) +
                              " output channels");
    for (float b : op.bias)
        if (!std::isfinite(b)) reject(index, op, "a bias is not finite");
    if (taps > static_cast<std::size_t>(firmware::max_taps_per_output))
        reject(index, op, std::to_string(taps) + " taps per output: at most " +
                              std::to_string(firmware::max_taps_per_output) + " keep the int32 accumulator exact");
}

inline void check_window(std::size_t index, const integer_op& op, const tensor_shape& in, const tensor_shape& out,
                         int out_channels) {
    const firmware::window w = to_firmware(op.window);
    if (!firmware::well_formed(w))
        reject(index, op, "window needs kernel, stride and dilation of at least 1 and padding of at least 0");
    const firmware::shape expected = firmware::output_shape(to_firmware(in), w, out_channels);
    if (!(to_firmware(out) == expected) || expected.elements() <= 0)
        reject(index, op, "output shape " + describe(out) + " does not follow from input " + describe(in) +
                              " and the window (expected " + describe({expected.channels, expected.height, expected.width}) +
                              "; ceil mode is not supported)");
}

}  // namespace detail

inline void validate(const integer_graph& graph) {
    using detail::reject;
    const auto tensor_count = graph.tensors.size();
    const auto valid = [&](int t) { return t >= 0 && static_cast<std::size_t>(t) < tensor_count; };
    if (!valid(graph.input)) detail::reject_graph("the graph's input tensor " + std::to_string(graph.input) + " does not exist");
    if (!valid(graph.output)) detail::reject_graph("the graph's output tensor " + std::to_string(graph.output) + " does not exist");
    for (std::size_t t = 0; t < tensor_count; ++t) {
        const activation_tensor& a = graph.tensors[t];
        if (a.shape.channels <= 0 || a.shape.height <= 0 || a.shape.width <= 0)
            detail::reject_graph("tensor " + std::to_string(t) + " has shape " + describe(a.shape));
        if (!(a.scale > 0.0) || !std::isfinite(a.scale))
            detail::reject_graph("tensor " + std::to_string(t) + " has scale " + std::to_string(a.scale));
        if (a.zero_point < -128 || a.zero_point > 127)
            detail::reject_graph("tensor " + std::to_string(t) + " has zero point " + std::to_string(a.zero_point) +
                                 ", outside int8");
    }
    if (graph.ops.empty()) detail::reject_graph("the graph has no op");
    std::vector<bool> written(tensor_count, false);
    written[static_cast<std::size_t>(graph.input)] = true;
    for (std::size_t i = 0; i < graph.ops.size(); ++i) {
        const integer_op& op = graph.ops[i];
        if (op.kind == op_kind::concat) {
            if (op.inputs.empty() || op.inputs.size() > static_cast<std::size_t>(firmware::max_concat_parts))
                reject(i, op, std::to_string(op.inputs.size()) + " inputs, expected 1 to " +
                                  std::to_string(firmware::max_concat_parts));
        } else if (const std::size_t arity = op.kind == op_kind::add || op.kind == op_kind::mul ? 2 : 1;
                   op.inputs.size() != arity) {
            reject(i, op, std::to_string(op.inputs.size()) + " inputs, expected " + std::to_string(arity));
        }
        for (int t : op.inputs) {
            if (!valid(t)) reject(i, op, "input tensor " + std::to_string(t) + " does not exist");
            if (!written[static_cast<std::size_t>(t)])
                reject(i, op, "input tensor " + std::to_string(t) + " is read before any op writes it");
        }
        if (!valid(op.output)) reject(i, op, "output tensor " + std::to_string(op.output) + " does not exist");
        if (written[static_cast<std::size_t>(op.output)])
            reject(i, op, "output tensor " + std::to_string(op.output) + " is written twice (or is the graph's input)");
        written[static_cast<std::size_t>(op.output)] = true;

        const activation_tensor& in = graph.tensors[static_cast<std::size_t>(op.inputs[0])];
        const activation_tensor& out = graph.tensors[static_cast<std::size_t>(op.output)];
        const bool has_range = op.kind == op_kind::conv2d || op.kind == op_kind::linear || op.kind == op_kind::add ||
                               op.kind == op_kind::mul || op.kind == op_kind::max_pool2d ||
                               op.kind == op_kind::avg_pool2d || op.kind == op_kind::global_avg_pool2d;
        if (op.relu && !has_range) reject(i, op, "a fused relu on an op without an output range");
        switch (op.kind) {
            case op_kind::conv2d: {
                if (op.groups < 1 || in.shape.channels % op.groups != 0 || out.shape.channels % op.groups != 0)
                    reject(i, op, std::to_string(op.groups) + " groups do not divide " +
                                      std::to_string(in.shape.channels) + " input and " +
                                      std::to_string(out.shape.channels) + " output channels");
                detail::check_window(i, op, in.shape, out.shape, out.shape.channels);
                const std::size_t per_channel = static_cast<std::size_t>(in.shape.channels / op.groups) *
                                                static_cast<std::size_t>(op.window.kernel_h) *
                                                static_cast<std::size_t>(op.window.kernel_w);
                detail::check_weighted(i, op, out.shape.channels, per_channel, per_channel);
                break;
            }
            case op_kind::linear:
                if (in.shape.height != 1 || in.shape.width != 1 || out.shape.height != 1 || out.shape.width != 1)
                    reject(i, op, "input " + describe(in.shape) + " and output " + describe(out.shape) +
                                      " must be vectors {features, 1, 1} (flatten first)");
                detail::check_weighted(i, op, out.shape.channels, static_cast<std::size_t>(in.shape.channels),
                                       static_cast<std::size_t>(in.shape.channels));
                break;
            case op_kind::add: {
                const activation_tensor& other = graph.tensors[static_cast<std::size_t>(op.inputs[1])];
                if (!(in.shape == out.shape) || !(other.shape == out.shape))
                    reject(i, op, "inputs " + describe(in.shape) + " and " + describe(other.shape) + " and output " +
                                      describe(out.shape) + " differ (no broadcasting)");
                break;
            }
            case op_kind::clamp:
                if (!(in.shape == out.shape)) reject(i, op, "input " + describe(in.shape) + " and output " + describe(out.shape) + " differ");
                if (std::isnan(op.clamp_min) || std::isnan(op.clamp_max) || op.clamp_min > op.clamp_max)
                    reject(i, op, "clamp bounds [" + std::to_string(op.clamp_min) + ", " + std::to_string(op.clamp_max) + "]");
                break;
            case op_kind::max_pool2d:
            case op_kind::avg_pool2d:
                if (op.kind == op_kind::avg_pool2d && (op.window.dilation_h != 1 || op.window.dilation_w != 1))
                    reject(i, op, "average pooling has no dilation");
                if (op.window.padding_h * 2 > op.window.kernel_h || op.window.padding_w * 2 > op.window.kernel_w)
                    reject(i, op, "padding larger than half the kernel (PyTorch refuses it too)");
                detail::check_window(i, op, in.shape, out.shape, in.shape.channels);
                break;
            case op_kind::global_avg_pool2d:
                if (!(out.shape == tensor_shape{in.shape.channels, 1, 1}))
                    reject(i, op, "output " + describe(out.shape) + " is not {" + std::to_string(in.shape.channels) + ", 1, 1}");
                break;
            case op_kind::flatten:
                if (out.shape.elements() != in.shape.elements())
                    reject(i, op, "output " + describe(out.shape) + " does not hold the " +
                                      std::to_string(in.shape.elements()) + " levels of input " + describe(in.shape));
                break;
            case op_kind::lookup:
                if (!(in.shape == out.shape)) reject(i, op, "input " + describe(in.shape) + " and output " + describe(out.shape) + " differ");
                if (op.table.size() != static_cast<std::size_t>(firmware::lookup_table_size))
                    reject(i, op, std::to_string(op.table.size()) + " table entries, expected 256");
                break;
            case op_kind::mul: {
                const activation_tensor& other = graph.tensors[static_cast<std::size_t>(op.inputs[1])];
                // Either operand may be the broadcast one: lower() puts the output-shaped one first.
                firmware::mul_params shapes;
                shapes.output = to_firmware(out.shape);
                shapes.input2 = to_firmware(in.shape == out.shape ? other.shape : in.shape);
                if (!(in.shape == out.shape || other.shape == out.shape) || !firmware::broadcastable(shapes))
                    reject(i, op, "inputs " + describe(in.shape) + " and " + describe(other.shape) + " and output " +
                                      describe(out.shape) + ": one must be the output's shape, the other that, one "
                                      "value per channel or one value");
                break;
            }
            case op_kind::softmax:
                if (!(in.shape == out.shape)) reject(i, op, "input " + describe(in.shape) + " and output " + describe(out.shape) + " differ");
                if (out.scale != firmware::softmax_output_scale || out.zero_point != firmware::softmax_output_zero_point)
                    reject(i, op, "output quantization is not scale 1/256, zero point -128");
                break;
            case op_kind::concat: {
                if (op.axis < 0 || op.axis > 2) reject(i, op, "axis " + std::to_string(op.axis) + " (0, 1 or 2: channels, height, width)");
                if (op.part_tables.size() != op.inputs.size()) reject(i, op, "one table (or none) per input is needed");
                int along = 0;
                for (std::size_t k = 0; k < op.inputs.size(); ++k) {
                    const tensor_shape& part = graph.tensors[static_cast<std::size_t>(op.inputs[k])].shape;
                    const int extents[] = {part.channels, part.height, part.width};
                    const int out_extents[] = {out.shape.channels, out.shape.height, out.shape.width};
                    for (int a = 0; a < 3; ++a)
                        if (a != op.axis && extents[a] != out_extents[a])
                            reject(i, op, "input " + describe(part) + " does not fit output " + describe(out.shape));
                    along += extents[op.axis];
                    if (!op.part_tables[k].empty() && op.part_tables[k].size() != static_cast<std::size_t>(firmware::lookup_table_size))
                        reject(i, op, "input " + std::to_string(k) + "'s table has " + std::to_string(op.part_tables[k].size()) + " entries, expected 256");
                }
                const int out_extents[] = {out.shape.channels, out.shape.height, out.shape.width};
                if (along != out_extents[op.axis]) reject(i, op, "the inputs do not add up to output " + describe(out.shape));
                break;
            }
            case op_kind::pad: {
                const firmware::pad_params p{to_firmware(in.shape), to_firmware(out.shape),
                                             {op.before[0], op.before[1], op.before[2]}, 0};
                if (!firmware::padding_fits(p) || op.pad_level < -128 || op.pad_level > 127)
                    reject(i, op, "padding does not take " + describe(in.shape) + " to " + describe(out.shape) +
                                      " with an int8 pad level");
                break;
            }
            case op_kind::permute: {
                const firmware::permute_params p{to_firmware(in.shape), to_firmware(out.shape), {op.axes[0], op.axes[1], op.axes[2]}};
                if (!firmware::axes_match(p))
                    reject(i, op, "axes {" + std::to_string(op.axes[0]) + ", " + std::to_string(op.axes[1]) + ", " +
                                      std::to_string(op.axes[2]) + "} do not take " + describe(in.shape) + " to " + describe(out.shape));
                break;
            }
        }
        const bool keeps_quantization = op.kind == op_kind::max_pool2d || op.kind == op_kind::avg_pool2d ||
                                        op.kind == op_kind::global_avg_pool2d || op.kind == op_kind::flatten ||
                                        op.kind == op_kind::permute || op.kind == op_kind::pad;
        if (keeps_quantization && !detail::same_quantization(in, out))
            reject(i, op, "output quantization differs from the input's (LibTorch's quantized pooling and views keep it)");
    }
    if (!written[static_cast<std::size_t>(graph.output)])
        detail::reject_graph("no op writes the graph's output tensor " + std::to_string(graph.output));
}

}  // namespace versatil::codegen

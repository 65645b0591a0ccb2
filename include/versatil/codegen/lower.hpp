// Lowers a validated integer graph to the firmware's integer parameters: the one place where
// real quantities become integers, each as LibTorch's engine (QNNPACK) computes it so that the
// runtime rounds where LibTorch rounds: conv and linear biases become int32 at input_scale *
// weight_scale[c] (ATen's quantize_val), their rescale QNNPACK's float requantization scale held
// as a fixed-point multiplier and shift, adds take QNNPACK's parameters, and clamps
// (relu, relu6, hardtanh) fold into the output range of the op that produces their input when
// that op has one, the clamp is its only reader and both sides share their quantization;
// otherwise the clamp stays a layer of its own. Each convolution gets the fastest kernel for
// its shape and rescales (firmware/kernel_choice.hpp), its weights in that kernel's order and,
// where the kernel needs one, a scratch tensor alive during the layer only; likewise linear
// layers (linear_blocked reads the reference layout). With input_layout::hwc the model's input
// comes channel-last, and the convolutions reading it gather it so (conv2d_params::
// input_channels_last): no copy; any other layer reading a spatial input is refused. The result
// is what both header_for and run_on_host use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "versatil/codegen/integer_graph.hpp"
#include "versatil/codegen/validate.hpp"
#include "versatil/firmware/kernel_choice.hpp"
#include "versatil/firmware/layer.hpp"
#include "versatil/math/quantize.hpp"
#include "versatil/math/requantize.hpp"
#include "versatil/math/rounding.hpp"

namespace versatil::codegen {

// A reshape (flatten, view, squeeze): the same bytes under another shape, no kernel.
struct view_params {};

using layer_params = std::variant<firmware::conv2d_params, firmware::linear_params, firmware::add_params,
                                  firmware::clamp_params, firmware::max_pool2d_params, firmware::avg_pool2d_params,
                                  view_params, firmware::lookup_params, firmware::mul_params,
                                  firmware::softmax_params, firmware::concat_params, firmware::permute_params,
                                  firmware::pad_params>;

// The order of the model input's levels: channels, height, width (TorchScript's own) or height,
// width, channels (as cameras and audio front ends deliver them).
enum class input_layout : unsigned char { chw, hwc };

struct lowered_layer {
    std::string module;            // the op's module, for messages and the header's comments
    op_kind source = op_kind::conv2d;
    std::vector<std::string> fused;  // modules of the clamps folded into this layer's range
    std::vector<int> inputs;       // indices into lowered_graph::tensors
    int output = -1;
    layer_params params;           // the arrays below are not bound yet: see bound()
    firmware::conv2d_kernel kernel = firmware::conv2d_kernel::conv2d;  // conv2d: the kernel that runs it
    firmware::linear_kernel linear_kernel = firmware::linear_kernel::linear;  // linear: likewise
    int scratch = -1;              // the tensor its kernel works in, or none
    std::vector<std::int8_t> weights;  // in the kernel's order
    std::vector<std::int32_t> bias;
    std::vector<math::fixed_point_multiplier> multipliers;
    std::vector<std::int8_t> table;                     // lookup
    std::vector<std::vector<std::int8_t>> part_tables;  // concat: per input, empty when copied
    std::vector<std::uint32_t> exp_table;               // softmax
};

struct lowered_graph {
    std::vector<firmware::shape> tensors;
    std::vector<lowered_layer> layers;
    int input = -1, output = -1;
    double input_scale = 1.0, output_scale = 1.0;
    std::int32_t input_zero_point = 0, output_zero_point = 0;
    input_layout layout = input_layout::chw;
};

// The layer's params with its arrays' addresses filled in (valid while `layer` lives unmoved).
inline layer_params bound(const lowered_layer& layer) {
    layer_params params = layer.params;
    const std::int32_t* bias = layer.bias.empty() ? nullptr : layer.bias.data();
    if (auto* conv = std::get_if<firmware::conv2d_params>(&params)) {
        conv->weights = layer.weights.data();
        conv->bias = bias;
        conv->multipliers = layer.multipliers.data();
    } else if (auto* fc = std::get_if<firmware::linear_params>(&params)) {
        fc->weights = layer.weights.data();
        fc->bias = bias;
        fc->multipliers = layer.multipliers.data();
    } else if (auto* lookup = std::get_if<firmware::lookup_params>(&params)) {
        lookup->table = layer.table.data();
    } else if (auto* softmax = std::get_if<firmware::softmax_params>(&params)) {
        softmax->exp_table = layer.exp_table.data();
    } else if (auto* concat = std::get_if<firmware::concat_params>(&params)) {
        for (std::size_t k = 0; k < layer.part_tables.size(); ++k)
            concat->tables[k] = layer.part_tables[k].empty() ? nullptr : layer.part_tables[k].data();
    }
    return params;
}

// The planner's view of a lowered layer (shapes, tensors, aliasing).
inline firmware::layer planner_layer(const lowered_layer& l, const lowered_graph& g) {
    const int in = l.inputs[0];
    return std::visit(
        [&](const auto& p) -> firmware::layer {
            using P = std::decay_t<decltype(p)>;
            const firmware::shape out = g.tensors[static_cast<std::size_t>(l.output)];
            if constexpr (std::is_same_v<P, firmware::add_params>)
                return firmware::layer_of(p, out, in, l.inputs[1], l.output);
            else if constexpr (std::is_same_v<P, firmware::mul_params>)
                return firmware::layer_of(p, in, l.inputs[1], l.output);
            else if constexpr (std::is_same_v<P, firmware::clamp_params> || std::is_same_v<P, firmware::lookup_params>)
                return firmware::layer_of(p, out, in, l.output);
            else if constexpr (std::is_same_v<P, firmware::concat_params>)
                return firmware::layer_of(p, g.tensors.data(), l.inputs.data(), l.output);
            else if constexpr (std::is_same_v<P, view_params>)
                return firmware::reshape_layer(g.tensors[static_cast<std::size_t>(in)], out, in, l.output);
            else if constexpr (std::is_same_v<P, firmware::conv2d_params>)
                return l.scratch < 0 ? firmware::layer_of(p, in, l.output)
                                     : firmware::with_scratch(firmware::layer_of(p, in, l.output), l.scratch,
                                                              firmware::scratch_bytes(l.kernel, p));
            else
                return firmware::layer_of(p, in, l.output);
        },
        l.params);
}

inline std::vector<firmware::layer> planner_layers(const lowered_graph& g) {
    std::vector<firmware::layer> layers;
    for (const lowered_layer& l : g.layers) layers.push_back(planner_layer(l, g));
    return layers;
}

namespace detail {

// A real value's level in an int8 tensor, as ATen's quantize_val computes it.
inline std::int32_t level_of(double value, const activation_tensor& t) {
    return math::quantize(static_cast<float>(value), {static_cast<float>(t.scale), t.zero_point}, {-128, 127});
}

inline firmware::activation_range intersect(firmware::activation_range a, firmware::activation_range b) {
    return {std::max(a.min, b.min), std::min(a.max, b.max)};
}

inline firmware::activation_range fused_relu(const integer_op& op, const activation_tensor& out) {
    return op.relu ? firmware::activation_range{out.zero_point, 127} : firmware::activation_range{};
}

// The bias at input_scale * weight_scale (a double, as ATen multiplies the two), quantized as
// LibTorch's engine quantizes it before a quantized conv or linear runs (ATen's quantize_val:
// the float product bias * (1 / float scale), rounded half to even). Rounding the exact quotient
// instead put one bias in a hundred a level off, and the outputs near a rounding boundary with it.
inline std::int32_t quantized_bias(float bias, double scale) {
    return math::quantize(bias, {static_cast<float>(scale), 0},
                          {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()});
}

// QNNPACK's requantization scale, computed as LibTorch 1.13 computes it before a quantized conv
// or linear (generate_requantization_scales): in float, (weight_scale * input_scale) * (1 /
// output_scale). Its 24-bit mantissa fits a Q31 multiplier exactly, so the output stage rescales
// by the very number QNNPACK multiplies with; from the exact double quotient instead, the
// multiplier differed from it in the last bits, enough to round some outputs the other way.
inline double qnnpack_requantization_scale(double input_scale, double weight_scale, double output_scale) {
    const float inverse_output_scale = 1.0F / static_cast<float>(output_scale);
    return static_cast<double>((static_cast<float>(weight_scale) * static_cast<float>(input_scale)) * inverse_output_scale);
}

// Bias and multipliers of a conv or linear op, per output channel.
inline void lower_weighted(const integer_op& op, const activation_tensor& in, const activation_tensor& out,
                           lowered_layer& layer) {
    layer.weights = op.weights;
    for (std::size_t c = 0; c < op.weight_scales.size(); ++c) {
        layer.multipliers.push_back(
            math::quantize_multiplier(qnnpack_requantization_scale(in.scale, op.weight_scales[c], out.scale)));
        if (!op.bias.empty()) layer.bias.push_back(quantized_bias(op.bias[c], in.scale * op.weight_scales[c]));
    }
}

// An add's integer parameters as QNNPACK derives them for LibTorch's quantized add: the ratios
// scale / output scale in float, the larger one's power of two 2^e setting shift = 21 - e, each
// ratio times 2^shift rounded half to even. QNNPACK refuses ratios outside [2^-14, 2^8); so
// does the export, as LibTorch could not have run such an add.
inline firmware::add_params add_parameters(const activation_tensor& a, const activation_tensor& b,
                                           const activation_tensor& out, firmware::activation_range range) {
    const float output_scale = static_cast<float>(out.scale);
    const float ratio1 = static_cast<float>(a.scale) / output_scale, ratio2 = static_cast<float>(b.scale) / output_scale;
    constexpr float lowest = 1.0F / 16384.0F, highest = 256.0F;  // 2^-14, 2^8
    for (const float ratio : {ratio1, ratio2})
        if (!(ratio >= lowest && ratio < highest))
            throw std::invalid_argument("versatil::codegen: an add's input to output scale ratio " + std::to_string(ratio) +
                                        " is outside QNNPACK's [2^-14, 2^8)");
    // split_power_of_two gives a mantissa in [0.5, 1): the ratio's power of two is one less.
    const int power = math::split_power_of_two(std::max(ratio1, ratio2)).exponent - 1;
    const int shift = 21 - power;
    const double scale = static_cast<double>(std::int64_t{1} << shift);
    const auto multiplier = [&](float ratio) { return static_cast<std::int32_t>(math::round_half_even(ratio * scale)); };
    return {out.shape.elements(), -a.zero_point, -b.zero_point, out.zero_point, multiplier(ratio1), multiplier(ratio2),
            shift, range};
}

// mul's operands with the output-shaped one first (the product commutes; the kernel broadcasts
// the second).
inline firmware::mul_params mul_parameters(std::vector<int>& inputs, const integer_graph& graph,
                                           const activation_tensor& out, firmware::activation_range range) {
    if (!(graph.tensors[static_cast<std::size_t>(inputs[0])].shape == out.shape)) std::swap(inputs[0], inputs[1]);
    const activation_tensor& a = graph.tensors[static_cast<std::size_t>(inputs[0])];
    const activation_tensor& b = graph.tensors[static_cast<std::size_t>(inputs[1])];
    return {to_firmware(out.shape), to_firmware(b.shape), -a.zero_point, -b.zero_point, out.zero_point,
            math::quantize_multiplier(a.scale * b.scale / out.scale), range};
}

// exp(scale * (x - max)) for the 256 differences max - x, in units of 1/softmax_table_one.
inline std::vector<std::uint32_t> softmax_exp_table(const activation_tensor& in) {
    const double one = firmware::softmax_table_one(in.shape.channels);
    std::vector<std::uint32_t> table;
    for (int difference = 0; difference < firmware::lookup_table_size; ++difference)
        table.push_back(static_cast<std::uint32_t>(std::lround(std::exp(-in.scale * difference) * one)));
    return table;
}

// A concat's runs: along channels one per part, along height one per channel, along width one
// per row (firmware/data_movement/concat.hpp).
inline firmware::concat_params concat_parameters(const integer_op& op, const integer_graph& graph) {
    const tensor_shape& out = graph.tensors[static_cast<std::size_t>(op.output)].shape;
    firmware::concat_params p;
    p.parts = static_cast<int>(op.inputs.size());
    p.outer = op.axis == 0 ? 1 : (op.axis == 1 ? out.channels : out.channels * out.height);
    for (std::size_t k = 0; k < op.inputs.size(); ++k)
        p.run[k] = graph.tensors[static_cast<std::size_t>(op.inputs[k])].shape.elements() / p.outer;
    return p;
}

inline firmware::activation_range* range_of(layer_params& params) {
    return std::visit(
        [](auto& p) -> firmware::activation_range* {
            if constexpr (requires { p.range; }) return &p.range;
            else return nullptr;
        },
        params);
}

// A channel-last input read by `layer`: a convolution gathers it in place; nothing else can.
inline void read_channel_last(lowered_layer& layer) {
    auto* conv = std::get_if<firmware::conv2d_params>(&layer.params);
    if (conv == nullptr)
        throw std::invalid_argument(
            "versatil::codegen::lower: a channel-last input (--export-input-layout hwc) is read by layer " +
            (layer.module.empty() ? "in the model's own forward" : "'" + layer.module + "'") + " (" +
            std::string(op_kind_name(layer.source)) +
                                    "), which is not a convolution: only a convolution reads that layout in place "
                                    "(export with the channel-first input, or start the model with a conv2d)");
    conv->input_channels_last = true;
}

}  // namespace detail

inline lowered_graph lower(const integer_graph& graph, input_layout layout = input_layout::chw) {
    validate(graph);
    const std::size_t tensor_count = graph.tensors.size();
    std::vector<int> readers(tensor_count, 0);
    for (const integer_op& op : graph.ops)
        for (int t : op.inputs) ++readers[static_cast<std::size_t>(t)];

    const int input_plane = to_firmware(graph.tensors[static_cast<std::size_t>(graph.input)].shape).plane();
    // Lowered layers still in the graph's tensor indices; fused clamps leave no layer.
    std::vector<lowered_layer> layers;
    std::vector<int> producer(tensor_count, -1);  // the lowered layer writing each tensor
    for (std::size_t i = 0; i < graph.ops.size(); ++i) {
        const integer_op& op = graph.ops[i];
        const activation_tensor& in = graph.tensors[static_cast<std::size_t>(op.inputs[0])];
        const activation_tensor& out = graph.tensors[static_cast<std::size_t>(op.output)];
        const firmware::shape in_shape = to_firmware(in.shape), out_shape = to_firmware(out.shape);
        lowered_layer layer;
        layer.module = op.module;
        layer.source = op.kind;
        layer.inputs = op.inputs;
        layer.output = op.output;
        layer.params = view_params{};  // a reshape's; the other kinds set their own
        switch (op.kind) {
            case op_kind::conv2d:
                detail::lower_weighted(op, in, out, layer);
                layer.params = firmware::conv2d_params{in_shape, out_shape, to_firmware(op.window), op.groups,
                                                       -in.zero_point, out.zero_point, detail::fused_relu(op, out)};
                break;
            case op_kind::linear:
                detail::lower_weighted(op, in, out, layer);
                layer.params = firmware::linear_params{in.shape.channels, out.shape.channels, -in.zero_point,
                                                       out.zero_point, detail::fused_relu(op, out)};
                break;
            case op_kind::add:
                layer.params = detail::add_parameters(in, graph.tensors[static_cast<std::size_t>(op.inputs[1])], out,
                                                      detail::fused_relu(op, out));
                break;
            case op_kind::clamp: {
                const firmware::activation_range range{detail::level_of(op.clamp_min, out), detail::level_of(op.clamp_max, out)};
                const int from = producer[static_cast<std::size_t>(op.inputs[0])];
                firmware::activation_range* target = from >= 0 ? detail::range_of(layers[static_cast<std::size_t>(from)].params) : nullptr;
                if (target != nullptr && readers[static_cast<std::size_t>(op.inputs[0])] == 1 &&
                    op.inputs[0] != graph.output && detail::same_quantization(in, out)) {
                    lowered_layer& fused_into = layers[static_cast<std::size_t>(from)];
                    *target = detail::intersect(*target, range);
                    fused_into.output = op.output;
                    fused_into.fused.push_back(op.module);
                    producer[static_cast<std::size_t>(op.output)] = from;
                    continue;
                }
                layer.params = firmware::clamp_params{out.shape.elements(), -in.zero_point, out.zero_point,
                                                      math::quantize_multiplier(in.scale / out.scale), range};
                break;
            }
            case op_kind::max_pool2d:
                layer.params = firmware::max_pool2d_params{in_shape, out_shape, to_firmware(op.window), detail::fused_relu(op, out)};
                break;
            case op_kind::avg_pool2d:
                layer.params = firmware::avg_pool2d_params{in_shape, out_shape, to_firmware(op.window),
                                                           op.count_include_pad, in.zero_point, detail::fused_relu(op, out)};
                break;
            case op_kind::global_avg_pool2d:
                layer.params = firmware::global_avg_pool2d(in_shape, in.zero_point, detail::fused_relu(op, out));
                break;
            case op_kind::flatten:
                break;
            case op_kind::lookup:
                layer.table = op.table;
                layer.params = firmware::lookup_params{out.shape.elements()};
                break;
            case op_kind::mul:
                layer.params = detail::mul_parameters(layer.inputs, graph, out, detail::fused_relu(op, out));
                break;
            case op_kind::softmax:
                layer.exp_table = detail::softmax_exp_table(in);
                layer.params = firmware::softmax_params{in_shape};
                break;
            case op_kind::concat:
                layer.part_tables = op.part_tables;
                layer.params = detail::concat_parameters(op, graph);
                break;
            case op_kind::permute:
                layer.params = firmware::permute_params{in_shape, out_shape, {op.axes[0], op.axes[1], op.axes[2]}};
                break;
            case op_kind::pad:
                layer.params = firmware::pad_params{in_shape, out_shape, {op.before[0], op.before[1], op.before[2]},
                                                    static_cast<std::int8_t>(op.pad_level)};
                break;
        }
        // Channel-last and channel-first are the same bytes when the input has no plane.
        if (layout == input_layout::hwc && input_plane > 1 &&
            std::find(op.inputs.begin(), op.inputs.end(), graph.input) != op.inputs.end())
            detail::read_channel_last(layer);
        producer[static_cast<std::size_t>(op.output)] = static_cast<int>(layers.size());
        layers.push_back(std::move(layer));
    }

    // Renumber: the tensors the layers use, the input and the output, in first-use order.
    lowered_graph lowered;
    std::vector<int> renumbered(tensor_count, -1);
    const auto use = [&](int t) {
        int& n = renumbered[static_cast<std::size_t>(t)];
        if (n < 0) {
            n = static_cast<int>(lowered.tensors.size());
            lowered.tensors.push_back(to_firmware(graph.tensors[static_cast<std::size_t>(t)].shape));
        }
        return n;
    };
    lowered.input = use(graph.input);
    for (lowered_layer& layer : layers) {
        for (int& t : layer.inputs) t = use(t);
        layer.output = use(layer.output);
    }
    lowered.output = use(graph.output);
    // Kernels, their weight order and scratch: after the renumbering, so scratch tensors come
    // last in the table.
    for (lowered_layer& layer : layers) {
        const layer_params params = bound(layer);
        if (const auto* fc = std::get_if<firmware::linear_params>(&params)) layer.linear_kernel = firmware::fastest_linear_kernel(*fc);
        const auto* conv = std::get_if<firmware::conv2d_params>(&params);
        if (conv == nullptr) continue;
        layer.kernel = firmware::fastest_conv2d_kernel(*conv);
        if (layer.kernel == firmware::conv2d_kernel::conv2d_im2col) {
            const std::vector<std::int8_t> reference = layer.weights;
            firmware::conv2d_im2col_pack_weights(*conv, reference.data(), layer.weights.data());
        }
        if (const std::size_t bytes = firmware::scratch_bytes(layer.kernel, *conv); bytes > 0) {
            layer.scratch = static_cast<int>(lowered.tensors.size());
            lowered.tensors.push_back({static_cast<int>(bytes), 1, 1});
        }
    }
    lowered.layers = std::move(layers);
    const activation_tensor& in = graph.tensors[static_cast<std::size_t>(graph.input)];
    const activation_tensor& out = graph.tensors[static_cast<std::size_t>(graph.output)];
    lowered.input_scale = in.scale;
    lowered.input_zero_point = in.zero_point;
    lowered.output_scale = out.scale;
    lowered.output_zero_point = out.zero_point;
    lowered.layout = layout;
    return lowered;
}

// Bytes of the parameter arrays a header holds: int8 weights, int32 biases, one
// multiplier-and-shift pair (8 bytes) per output channel, and the ops' tables.
inline std::size_t parameter_bytes(const lowered_graph& g) noexcept {
    std::size_t bytes = 0;
    for (const lowered_layer& l : g.layers) {
        bytes += l.weights.size() + 4 * l.bias.size() + sizeof(math::fixed_point_multiplier) * l.multipliers.size() +
                 l.table.size() + 4 * l.exp_table.size();
        for (const std::vector<std::int8_t>& table : l.part_tables) bytes += table.size();
    }
    return bytes;
}

}  // namespace versatil::codegen

// A synthetic integer graph with seeded random weights that uses every op and option the
// firmware runtime has: convolutions with stride, padding, dilation and groups (depthwise
// too), a residual add with relu, clamps folded into their producers and one left standing
// (other output quantization), max, average (with and without count_include_pad) and global
// average pooling, flatten and linear. Input {1, 28, 28} like Fashion-MNIST, so the firmware
// example can classify real images with it. Scales follow a rough calibration: each output
// scale makes the accumulators' expected spread about 40 levels.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "versatil/codegen/integer_graph.hpp"

namespace synthetic {

using namespace versatil::codegen;

class builder {
public:
    explicit builder(unsigned seed) : random_(seed) {}

    int tensor(tensor_shape shape, double scale, int zero_point) {
        graph.tensors.push_back({shape, scale, zero_point});
        return static_cast<int>(graph.tensors.size()) - 1;
    }

    // A conv2d whose output scale comes from its input's and its weights'.
    int conv(std::string module, int input, int out_channels, window_2d w, int groups, bool relu, bool bias = true) {
        const activation_tensor in = graph.tensors[static_cast<std::size_t>(input)];
        const int per_channel = in.shape.channels / groups * w.kernel_h * w.kernel_w;
        tensor_shape out_shape{out_channels, extent(in.shape.height, w.kernel_h, w.stride_h, w.padding_h, w.dilation_h),
                               extent(in.shape.width, w.kernel_w, w.stride_w, w.padding_w, w.dilation_w)};
        integer_op op = make_op(op_kind::conv2d, std::move(module), {input});
        op.window = w;
        op.groups = groups;
        op.relu = relu;
        fill_weights(op, out_channels, per_channel, in.scale, bias);
        op.output = tensor(out_shape, output_scale(in.scale, op, per_channel), relu ? -128 : level(-20, 20));
        graph.ops.push_back(std::move(op));
        return graph.ops.back().output;
    }

    int linear(std::string module, int input, int out_features) {
        const activation_tensor in = graph.tensors[static_cast<std::size_t>(input)];
        integer_op op = make_op(op_kind::linear, std::move(module), {input});
        fill_weights(op, out_features, in.shape.channels, in.scale, true);
        op.output = tensor({out_features, 1, 1}, output_scale(in.scale, op, in.shape.channels), level(-10, 10));
        graph.ops.push_back(std::move(op));
        return graph.ops.back().output;
    }

    int add(std::string module, int a, int b, bool relu) {
        const activation_tensor& x = graph.tensors[static_cast<std::size_t>(a)];
        const double scale = (x.scale + graph.tensors[static_cast<std::size_t>(b)].scale) * 0.8;
        integer_op op = make_op(op_kind::add, std::move(module), {a, b});
        op.relu = relu;
        op.output = tensor(x.shape, scale, relu ? -128 : level(-10, 10));
        graph.ops.push_back(std::move(op));
        return graph.ops.back().output;
    }

    // A clamp to [lo, hi] real; same quantization as its input unless `scale` is given.
    int clamp(std::string module, int input, double lo, double hi, double scale = 0.0, int zero_point = 0) {
        const activation_tensor in = graph.tensors[static_cast<std::size_t>(input)];
        integer_op op = make_op(op_kind::clamp, std::move(module), {input});
        op.clamp_min = lo;
        op.clamp_max = hi;
        op.output = scale > 0 ? tensor(in.shape, scale, zero_point) : tensor(in.shape, in.scale, in.zero_point);
        graph.ops.push_back(std::move(op));
        return graph.ops.back().output;
    }

    int pool(op_kind kind, std::string module, int input, window_2d w, bool count_include_pad = true) {
        const activation_tensor in = graph.tensors[static_cast<std::size_t>(input)];
        integer_op op = make_op(kind, std::move(module), {input});
        op.window = w;
        op.count_include_pad = count_include_pad;
        tensor_shape out{in.shape.channels, 1, 1};
        if (kind != op_kind::global_avg_pool2d)
            out = {in.shape.channels, extent(in.shape.height, w.kernel_h, w.stride_h, w.padding_h, w.dilation_h),
                   extent(in.shape.width, w.kernel_w, w.stride_w, w.padding_w, w.dilation_w)};
        if (kind == op_kind::flatten) out = {in.shape.elements(), 1, 1};
        op.output = tensor(out, in.scale, in.zero_point);
        graph.ops.push_back(std::move(op));
        return graph.ops.back().output;
    }

    integer_graph graph;

private:
    static integer_op make_op(op_kind kind, std::string module, std::vector<int> inputs) {
        integer_op op;
        op.kind = kind;
        op.module = std::move(module);
        op.inputs = std::move(inputs);
        return op;
    }

    static int extent(int size, int kernel, int stride, int padding, int dilation) {
        return (size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
    }
    int level(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random_); }

    void fill_weights(integer_op& op, int out_channels, int per_channel, double input_scale, bool bias) {
        std::uniform_int_distribution<int> weight(-127, 127);
        std::uniform_real_distribution<double> scale(0.002, 0.02);
        std::normal_distribution<float> bias_value(0.0F, 1.0F);
        for (int i = 0; i < out_channels * per_channel; ++i)
            op.weights.push_back(static_cast<std::int8_t>(weight(random_)));
        for (int c = 0; c < out_channels; ++c) {
            op.weight_scales.push_back(scale(random_));
            // Biases of the size of a few accumulator steps, so they matter.
            if (bias)
                op.bias.push_back(bias_value(random_) *
                                  static_cast<float>(input_scale * op.weight_scales.back() * 2000.0));
        }
    }

    static double output_scale(double input_scale, const integer_op& op, int per_channel) {
        double mean_scale = 0;
        for (double s : op.weight_scales) mean_scale += s;
        mean_scale /= static_cast<double>(op.weight_scales.size());
        return input_scale * mean_scale * std::sqrt(static_cast<double>(per_channel)) * 50.0 * 73.0 / 40.0;
    }

    std::mt19937 random_;
};

// `input_channels` other than 1: the same graph on a colour image (the channel-last input tests).
inline integer_graph graph(unsigned seed, int input_channels = 1) {
    builder b(seed);
    // Fashion-MNIST's normalised pixels, (p / 255 - 0.2860) / 0.3530, span about [-0.81, 2.02].
    const int input = b.tensor({input_channels, 28, 28}, 2.83 / 255.0, -57);
    b.graph.input = input;
    int x = b.conv("features.0", input, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 1, true);
    x = b.pool(op_kind::max_pool2d, "features.2", x, {2, 2, 2, 2, 0, 0, 1, 1});                    // {8, 14, 14}
    int y = b.conv("features.3.depthwise", x, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 8, false);
    const auto& dw = b.graph.tensors[static_cast<std::size_t>(y)];
    y = b.clamp("features.3.relu6", y, 0.0, 6.0 * dw.scale * 20);                                   // folded
    y = b.conv("features.3.pointwise", y, 8, {1, 1, 1, 1, 0, 0, 1, 1}, 1, false);
    x = b.add("features.3.add", y, x, true);                                                         // residual
    x = b.conv("features.4", x, 16, {3, 3, 2, 2, 1, 1, 1, 1}, 1, false);                            // {16, 7, 7}
    x = b.clamp("features.4.relu", x, 0.0, INFINITY);                                                // folded
    int z = b.conv("features.5.dilated", x, 16, {3, 3, 1, 1, 2, 2, 2, 2}, 16, true);     // depthwise, dilation 2
    z = b.conv("features.5.grouped", z, 16, {3, 1, 1, 1, 1, 0, 1, 1}, 4, false, false);  // groups 4, no bias
    const auto& g = b.graph.tensors[static_cast<std::size_t>(z)];
    const int standing = b.clamp("features.5.hardtanh", z, -30 * g.scale, 50 * g.scale, g.scale * 0.7, 5);  // rescales
    x = b.add("features.5.add", standing, x, false);
    x = b.pool(op_kind::avg_pool2d, "features.6", x, {3, 3, 1, 1, 1, 1, 1, 1}, false);               // {16, 7, 7}
    x = b.pool(op_kind::avg_pool2d, "features.7", x, {2, 2, 2, 2, 1, 1, 1, 1}, true);                // {16, 4, 4}
    x = b.pool(op_kind::max_pool2d, "features.8", x, {3, 3, 1, 1, 1, 1, 1, 1});                      // in place
    const int wide = b.pool(op_kind::flatten, "classifier.flatten0", x, {});                         // {256, 1, 1}
    x = b.pool(op_kind::global_avg_pool2d, "features.9", x, {});                                     // {16, 1, 1}
    x = b.pool(op_kind::flatten, "classifier.flatten", x, {});
    x = b.linear("classifier.fc1", x, 12);
    const int w = b.linear("classifier.wide", wide, 12);
    x = b.add("classifier.add", x, w, true);
    b.graph.output = b.linear("classifier.fc2", x, 10);
    return b.graph;
}

}  // namespace synthetic

// A quantized model as an integer graph: the hand-off between the LibTorch layer, which
// reads it out of a converted TorchScript module, and the firmware code generator, which
// turns it into a compile-time C++ model (versatil/firmware/). Hosted C++ (it owns vectors
// and names); nothing here depends on LibTorch.
//
// The graph holds the model's real quantities only: int8 levels, scales and zero points,
// float biases. Every integer decision (bias at input_scale * weight_scale, fixed-point
// multipliers and shifts, fused clamps) is made once, by the code generator, from these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace versatil::codegen {

// One activation tensor of batch 1, in the TorchScript model's own element order: channels,
// height, width. A vector of features is {features, 1, 1}.
struct tensor_shape {
    int channels = 0, height = 1, width = 1;

    constexpr int elements() const noexcept { return channels * height * width; }
    friend constexpr bool operator==(const tensor_shape&, const tensor_shape&) = default;
};

// Activations are int8 asymmetric: real = scale * (level - zero_point), level in [-128, 127].
// (LibTorch's engines use quint8; its zero point minus 128 is the same quantization.)
struct activation_tensor {
    tensor_shape shape;
    double scale = 1.0;
    std::int32_t zero_point = 0;
};

enum class op_kind {
    conv2d,             // weights [out][in / groups][kh][kw]; groups == in == out is depthwise
    linear,             // weights [out][in]; input {in, 1, 1}
    add,                // two inputs, each with its own scale and zero point
    clamp,              // relu, relu6, hardtanh: clamp_min / clamp_max in real values
    max_pool2d,
    avg_pool2d,         // count_include_pad as the TorchScript op says
    global_avg_pool2d,  // adaptive average pooling to 1x1
    flatten,            // any reshape ({c, h, w} -> {c*h*w, 1, 1}, ...): the same bytes
    lookup,             // elementwise, one input: table[level + 128] (sigmoid, hardswish, ...)
    mul,                // two inputs; the second output-shaped, per channel {c, 1, 1} or one value
    softmax,            // over channels; output at scale 1/256, zero point -128
    concat,             // up to four inputs along `axis`; each requantized to the output by its table
    permute,            // output axis i is input axis axes[i]
    pad,                // constant: `before` levels before each axis, pad_level around the input
};

struct window_2d {
    int kernel_h = 1, kernel_w = 1;
    int stride_h = 1, stride_w = 1;
    int padding_h = 0, padding_w = 0;
    int dilation_h = 1, dilation_w = 1;
};

struct integer_op {
    op_kind kind{};
    std::string module;       // where it came from ("features.3.conv"), for errors and comments
    std::vector<int> inputs;  // indices into integer_graph::tensors (add, mul: two; concat: up to four)
    int output = -1;

    window_2d window{};       // conv2d and pooling
    int groups = 1;           // conv2d
    bool count_include_pad = true;  // avg_pool2d
    int axis = 0;                   // concat: 0 channels, 1 height, 2 width
    int axes[3] = {0, 1, 2};        // permute
    int before[3] = {0, 0, 0};      // pad
    std::int32_t pad_level = 0;     // pad: the pad value's level (the zero point for 0.0)

    // lookup: the output level of every input level, table[level + 128] (256 entries). concat:
    // one table per input (empty: the input shares the output's quantization and is copied).
    std::vector<std::int8_t> table;
    std::vector<std::vector<std::int8_t>> part_tables;

    // conv2d and linear: int8 symmetric weights (zero point 0), one scale per output
    // channel (a per-tensor scale repeated), and the float bias (empty: none).
    std::vector<std::int8_t> weights;
    std::vector<double> weight_scales;
    std::vector<float> bias;

    // A clamp fused by the model itself (quantized::conv2d_relu, linear_relu, add_relu):
    // the lower bound in real values; the clamp op's own bounds are these two.
    bool relu = false;
    double clamp_min = 0.0, clamp_max = 0.0;  // clamp only
};

// Ops in an order where every input is produced before it is read.
struct integer_graph {
    std::vector<activation_tensor> tensors;
    std::vector<integer_op> ops;
    int input = -1;   // the tensor the model's float input is quantized into
    int output = -1;  // the tensor the model's output is dequantized from
};

}  // namespace versatil::codegen

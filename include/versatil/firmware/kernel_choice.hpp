// Which kernel a convolution or linear layer runs, chosen once where the shapes and the
// rescales are known (the code generator, at export), and the scratch it needs in the arena.
// Every choice gives the reference kernel's bytes (tests/firmware/kernel_sweep.cpp); the
// choice is about speed:
//   depthwise_conv2d_3x3  groups == channels, 3x3, dilation 1, horizontal stride 1 or 2
//   conv2d_im2col         every other convolution (its weights in conv2d_im2col_weight_position's order)
//   linear_blocked        every linear layer (the reference layout)
// and the fast kernels take multipliers below 0.25 only (prepared_output_applies): a layer
// with a larger one keeps the reference kernel (conv2d, linear).
#pragma once

#include <cstddef>

#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/convolution/conv2d_im2col.hpp"
#include "versatil/firmware/convolution/depthwise_conv2d_3x3.hpp"
#include "versatil/firmware/fully_connected/linear.hpp"
#include "versatil/firmware/fully_connected/linear_blocked.hpp"
#include "versatil/firmware/output_stage.hpp"

namespace versatil::firmware {

enum class conv2d_kernel : unsigned char { conv2d, conv2d_im2col, depthwise_conv2d_3x3 };
enum class linear_kernel : unsigned char { linear, linear_blocked };

// `p` with its multipliers bound.
constexpr conv2d_kernel fastest_conv2d_kernel(const conv2d_params& p) noexcept {
    if (!prepared_output_applies(p.multipliers, p.output.channels)) return conv2d_kernel::conv2d;
    return depthwise_conv2d_3x3_applies(p) ? conv2d_kernel::depthwise_conv2d_3x3 : conv2d_kernel::conv2d_im2col;
}

constexpr linear_kernel fastest_linear_kernel(const linear_params& p) noexcept {
    return prepared_output_applies(p.multipliers, p.out_features) ? linear_kernel::linear_blocked : linear_kernel::linear;
}

constexpr std::size_t scratch_bytes(conv2d_kernel kernel, const conv2d_params& p) noexcept {
    switch (kernel) {
        case conv2d_kernel::conv2d_im2col: return conv2d_im2col_scratch_bytes(p);
        case conv2d_kernel::depthwise_conv2d_3x3: return depthwise_conv2d_3x3_scratch_bytes(p);
        case conv2d_kernel::conv2d: return 0;
    }
    return 0;
}

constexpr const char* name(conv2d_kernel kernel) noexcept {
    switch (kernel) {
        case conv2d_kernel::conv2d_im2col: return "conv2d_im2col";
        case conv2d_kernel::depthwise_conv2d_3x3: return "depthwise_conv2d_3x3";
        case conv2d_kernel::conv2d: return "conv2d";
    }
    return "";
}

constexpr const char* name(linear_kernel kernel) noexcept {
    return kernel == linear_kernel::linear_blocked ? "linear_blocked" : "linear";
}

// Runs the chosen kernel (the host runner's dispatch; an exported header calls the kernel by
// name). `scratch`: scratch_bytes(kernel, p) bytes.
inline void run(conv2d_kernel kernel, const conv2d_params& p, const std::int8_t* input, std::int8_t* output,
                std::int8_t* scratch) noexcept {
    switch (kernel) {
        case conv2d_kernel::conv2d_im2col: conv2d_im2col(p, input, output, scratch); return;
        case conv2d_kernel::depthwise_conv2d_3x3: depthwise_conv2d_3x3(p, input, output, scratch); return;
        case conv2d_kernel::conv2d: conv2d(p, input, output); return;
    }
}

inline void run(linear_kernel kernel, const linear_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    if (kernel == linear_kernel::linear_blocked) linear_blocked(p, input, output);
    else linear(p, input, output);
}

}  // namespace versatil::firmware

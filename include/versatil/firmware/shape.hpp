// Shapes of the firmware runtime: an activation of batch 1 in the TorchScript model's own
// element order (channels, height, width: a plane per channel), and a 2-D window (kernel,
// stride, padding, dilation) with the output extent and the valid taps it implies.
// Freestanding: no hosted header.
#pragma once

#include <cstddef>

namespace versatil::firmware {

struct shape {
    int channels = 0, height = 1, width = 1;

    constexpr int plane() const noexcept { return height * width; }
    constexpr int elements() const noexcept { return channels * height * width; }
    constexpr std::size_t bytes() const noexcept { return static_cast<std::size_t>(elements()); }  // int8
    friend constexpr bool operator==(const shape&, const shape&) = default;
};

struct window {
    int kernel_h = 1, kernel_w = 1;
    int stride_h = 1, stride_w = 1;
    int padding_h = 0, padding_w = 0;
    int dilation_h = 1, dilation_w = 1;

    friend constexpr bool operator==(const window&, const window&) = default;
};

// Output extent along one axis (PyTorch's floor mode); 0 when the window does not fit.
constexpr int output_extent(int input, int kernel, int stride, int padding, int dilation) noexcept {
    const int span = input + 2 * padding - dilation * (kernel - 1) - 1;
    return span < 0 || stride <= 0 ? 0 : span / stride + 1;
}

// The output shape of a windowed op with `channels` output channels.
constexpr shape output_shape(shape input, window w, int channels) noexcept {
    return {channels, output_extent(input.height, w.kernel_h, w.stride_h, w.padding_h, w.dilation_h),
            output_extent(input.width, w.kernel_w, w.stride_w, w.padding_w, w.dilation_w)};
}

constexpr bool well_formed(window w) noexcept {
    return w.kernel_h >= 1 && w.kernel_w >= 1 && w.stride_h >= 1 && w.stride_w >= 1 && w.padding_h >= 0 &&
           w.padding_w >= 0 && w.dilation_h >= 1 && w.dilation_w >= 1;
}

// The taps k in [begin, end) whose input coordinate first + k * dilation lies in [0, size):
// the others read padding.
struct tap_range {
    int begin = 0, end = 0;
};

constexpr tap_range valid_taps(int first, int kernel, int dilation, int size) noexcept {
    const int begin = first < 0 ? (-first + dilation - 1) / dilation : 0;
    const int last_inside = size - 1 - first;  // the largest k * dilation that stays inside
    const int end = last_inside < 0 ? 0 : (last_inside / dilation + 1 < kernel ? last_inside / dilation + 1 : kernel);
    return {begin, end < begin ? begin : end};
}

}  // namespace versatil::firmware

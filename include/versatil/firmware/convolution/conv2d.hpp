// 2-D convolution, int8 (TFLite's reference per-channel kernel, on planes: channels,
// height, width): stride, padding (padded taps read the input zero point, so they add
// nothing and are skipped), dilation and groups, depthwise included (groups == input
// channels == output channels). Weights [out][in / groups][kernel_h][kernel_w], one
// fixed-point multiplier per output channel, bias at input_scale * weight_scale[c].
//
// Work goes output channel by channel, row by row, and in each row by chunks of up to 32
// columns accumulated in int32 on the stack: tap by tap (kx), two input rows at a time, so
// the innermost loop runs along a row with the weights fixed. The in-place rule
// (in_place.hpp) holds for this order: each output level is written once all its taps are
// read (its chunk's taps are all read before the chunk is written), levels are written in
// order, and output channel c reads only the input channels of its group.
//
// The input may also come channel-last (height, width, channels: input_channels_last, a
// model's first layer exported with --export-input-layout hwc, as cameras and audio front
// ends deliver it): the kernels then read it in place with other strides (input_strides),
// the output stays channel-first.
#pragma once

#include <cstdint>

#include "versatil/firmware/dot.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct conv2d_params {
    shape input, output;
    window win;
    int groups = 1;
    std::int32_t input_offset = 0;   // minus the input zero point
    std::int32_t output_offset = 0;  // the output zero point
    activation_range range;
    const std::int8_t* weights = nullptr;
    const std::int32_t* bias = nullptr;  // one per output channel, or none
    const math::fixed_point_multiplier* multipliers = nullptr;  // one per output channel
    bool input_channels_last = false;  // the input in (height, width, channels) order
};

// Where input level (c, y, x) is: c * channel + y * row + x * column.
struct input_strides {
    int channel, row, column;
};

constexpr input_strides strides_of(const conv2d_params& p) noexcept {
    return p.input_channels_last ? input_strides{1, p.input.width * p.input.channels, p.input.channels}
                                 : input_strides{p.input.plane(), p.input.width, 1};
}

inline void conv2d(const conv2d_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    constexpr int chunk = 32;  // output columns accumulated at once: 128 bytes of stack
    std::int32_t acc[chunk];
    const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
    const int kernel_h = p.win.kernel_h, kernel_w = p.win.kernel_w;
    const int in_w = p.input.width;
    const input_strides step = strides_of(p);
    for (int oc = 0; oc < p.output.channels; ++oc) {
        const std::int8_t* group_input = input + (oc / out_per_group) * in_per_group * step.channel;
        const std::int8_t* filter = p.weights + oc * in_per_group * kernel_h * kernel_w;
        const std::int32_t bias = p.bias != nullptr ? p.bias[oc] : 0;
        for (int oy = 0; oy < p.output.height; ++oy) {
            // The input rows this output row reads: (channel, ky) for every valid ky of every
            // input channel of the group, taken two at a time (accumulate_pair).
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range ky = valid_taps(iy0, kernel_h, p.win.dilation_h, p.input.height);
            const int rows_per_channel = ky.end - ky.begin, rows = in_per_group * rows_per_channel;
            const auto row = [&](int r, int kx, const std::int8_t*& at, std::int32_t& weight) {
                const int ic = r / rows_per_channel, k = ky.begin + r % rows_per_channel;
                at = group_input + ic * step.channel + (iy0 + k * p.win.dilation_h) * step.row;
                weight = filter[(ic * kernel_h + k) * kernel_w + kx];
            };
            for (int ox0 = 0; ox0 < p.output.width; ox0 += chunk) {
                const int n = p.output.width - ox0 < chunk ? p.output.width - ox0 : chunk;
                for (int i = 0; i < n; ++i) acc[i] = 0;
                for (int kx = 0; kx < kernel_w; ++kx) {
                    // Output columns whose input column ox * stride - padding + kx * dilation is inside.
                    const int column0 = kx * p.win.dilation_w - p.win.padding_w;
                    const tap_range ox = valid_taps(column0 + ox0 * p.win.stride_w, n, p.win.stride_w, in_w);
                    if (ox.begin >= ox.end) continue;
                    const int first_column = (column0 + (ox0 + ox.begin) * p.win.stride_w) * step.column;
                    const int column_step = p.win.stride_w * step.column;
                    int r = 0;
                    for (; r + 1 < rows; r += 2) {
                        const std::int8_t *a, *b;
                        std::int32_t wa, wb;
                        row(r, kx, a, wa);
                        row(r + 1, kx, b, wb);
                        accumulate_pair(acc + ox.begin, ox.end - ox.begin, a + first_column, b + first_column,
                                        column_step, wa, wb, p.input_offset);
                    }
                    if (r < rows) {
                        const std::int8_t* a;
                        std::int32_t wa;
                        row(r, kx, a, wa);
                        accumulate(acc + ox.begin, ox.end - ox.begin, a + first_column, column_step, wa,
                                   p.input_offset);
                    }
                }
                std::int8_t* out = output + (oc * p.output.height + oy) * p.output.width + ox0;
                for (int i = 0; i < n; ++i)
                    out[i] = requantize_output(acc[i], bias, p.multipliers[oc], p.output_offset, p.range);
            }
        }
    }
}

}  // namespace versatil::firmware

// 2-D convolution, int8 (TFLite's reference per-channel kernel, on planes: channels,
// height, width): stride, padding (padded taps read the input zero point, so they add
// nothing and are skipped), dilation and groups, depthwise included (groups == input
// channels == output channels). Weights [out][in / groups][kernel_h][kernel_w], one
// fixed-point multiplier per output channel, bias at input_scale * weight_scale[c].
//
// Order of work, which in-place execution relies on (in_place.hpp): output channel by
// channel, row by row, column by column; each output level is written once all its taps are
// read, and output channel c reads only the input channels of its group.
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
};

inline void conv2d(const conv2d_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
    const int kernel_h = p.win.kernel_h, kernel_w = p.win.kernel_w;
    const int filter_size = in_per_group * kernel_h * kernel_w;
    const int in_w = p.input.width, in_plane = p.input.plane();
    for (int oc = 0; oc < p.output.channels; ++oc) {
        const std::int8_t* group_input = input + (oc / out_per_group) * in_per_group * in_plane;
        const std::int8_t* filter = p.weights + oc * filter_size;
        const std::int32_t bias = p.bias != nullptr ? p.bias[oc] : 0;
        for (int oy = 0; oy < p.output.height; ++oy) {
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range rows = valid_taps(iy0, kernel_h, p.win.dilation_h, p.input.height);
            for (int ox = 0; ox < p.output.width; ++ox) {
                const int ix0 = ox * p.win.stride_w - p.win.padding_w;
                const tap_range cols = valid_taps(ix0, kernel_w, p.win.dilation_w, in_w);
                std::int32_t sum = 0;
                for (int ic = 0; ic < in_per_group; ++ic) {
                    const std::int8_t* plane = group_input + ic * in_plane;
                    const std::int8_t* taps = filter + ic * kernel_h * kernel_w;
                    for (int ky = rows.begin; ky < rows.end; ++ky) {
                        const std::int8_t* row = plane + (iy0 + ky * p.win.dilation_h) * in_w + ix0;
                        const std::int8_t* row_taps = taps + ky * kernel_w;
                        if (p.win.dilation_w == 1) {
                            sum += dot(row + cols.begin, row_taps + cols.begin, cols.end - cols.begin, p.input_offset);
                        } else {
                            for (int kx = cols.begin; kx < cols.end; ++kx)
                                sum += (row[kx * p.win.dilation_w] + p.input_offset) * row_taps[kx];
                        }
                    }
                }
                output[(oc * p.output.height + oy) * p.output.width + ox] =
                    requantize_output(sum, bias, p.multipliers[oc], p.output_offset, p.range);
            }
        }
    }
}

}  // namespace versatil::firmware

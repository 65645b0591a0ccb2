// Average pooling, int8, and global average pooling as its window over the whole plane.
// The sum of (level - zero point) over the valid taps is divided by PyTorch's divisor (with
// count_include_pad, the window clipped to the padded input; without, the valid taps),
// rounded to the nearest, ties to even, and moved back to the zero point. Ties go LibTorch's
// way (nearbyint of the mean), not TFLite's (half away from zero): with an even window (2x2: a
// quarter of all sums) half away from zero put one output in eight a level off LibTorch's.
// Input and output share their quantization, as LibTorch's quantized pooling keeps it. Same
// order of work as conv2d.hpp: in place is safe where in_place.hpp says so.
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

struct avg_pool2d_params {
    shape input, output;
    window win;  // dilation 1, as PyTorch's average pooling has none
    bool count_include_pad = true;
    std::int32_t zero_point = 0;
    activation_range range;
};

// Global average pooling: {c, h, w} -> {c, 1, 1}.
constexpr avg_pool2d_params global_avg_pool2d(shape input, std::int32_t zero_point, activation_range range) noexcept {
    return {input, {input.channels, 1, 1}, {input.height, input.width}, true, zero_point, range};
}

// sum / count rounded to the nearest integer, ties to even (nearbyint, as LibTorch's quantized
// average pooling rounds its mean); 0 for an empty window.
constexpr std::int32_t divide_half_even(std::int32_t sum, std::int32_t count) noexcept {
    if (count <= 0) return 0;
    const std::int32_t quotient = sum / count, remainder = sum - quotient * count;  // truncated toward zero
    const std::int32_t twice = 2 * (remainder < 0 ? -remainder : remainder);
    const bool up = twice > count || (twice == count && (quotient & 1) != 0);
    return quotient + (up ? (sum < 0 ? -1 : 1) : 0);
}

inline void avg_pool2d(const avg_pool2d_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int c = 0; c < p.output.channels; ++c) {
        const std::int8_t* plane = input + c * p.input.plane();
        for (int oy = 0; oy < p.output.height; ++oy) {
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range rows = valid_taps(iy0, p.win.kernel_h, 1, p.input.height);
            const int padded_rows = (iy0 + p.win.kernel_h < p.input.height + p.win.padding_h
                                         ? p.win.kernel_h : p.input.height + p.win.padding_h - iy0);
            for (int ox = 0; ox < p.output.width; ++ox) {
                const int ix0 = ox * p.win.stride_w - p.win.padding_w;
                const tap_range cols = valid_taps(ix0, p.win.kernel_w, 1, p.input.width);
                const int padded_cols = (ix0 + p.win.kernel_w < p.input.width + p.win.padding_w
                                             ? p.win.kernel_w : p.input.width + p.win.padding_w - ix0);
                std::int32_t sum = 0;
                for (int ky = rows.begin; ky < rows.end; ++ky) {
                    const int row = (iy0 + ky) * p.input.width + ix0;  // ix0 may be negative
                    for (int kx = cols.begin; kx < cols.end; ++kx) sum += plane[row + kx] - p.zero_point;
                }
                const std::int32_t count = p.count_include_pad ? padded_rows * padded_cols
                                                               : (rows.end - rows.begin) * (cols.end - cols.begin);
                output[(c * p.output.height + oy) * p.output.width + ox] = clamp_to(divide_half_even(sum, count) + p.zero_point, p.range);
            }
        }
    }
}

}  // namespace versatil::firmware

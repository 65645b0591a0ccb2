// Depthwise 3x3 convolution, int8, on planes: the fast kernel for groups == input channels ==
// output channels with a 3x3 window, dilation 1, horizontal stride 1 or 2 (any vertical
// stride, any padding). Same params and result as the reference conv2d, byte for byte.
//
// Along a row the three taps of a window are adjacent bytes, so one unaligned word load
// holds them: bytes (b0, b2) and (b1, b3) widened with the input offset (SXTAB16) meet the
// row's weights held as the pair (w0, w2) and w1. With stride 1 the same word serves two
// outputs: b0 w0 + b2 w2 (SMLAD) + b1 w1 (SMLABB) for the first, b1 w0 + b3 w2 (SMLAD) +
// b2 w1 (SMLATB) for the second; with stride 2 one output a word. Six products in seven
// instructions, or three in five, where the reference kernel spends about twenty an output.
// Outputs whose window crosses the plane's left or right edge, or whose word would reach
// past the row, take the reference's tap-by-tap path.
//
// Order of work: channel by channel, row by row, left to right, each output written once
// all its taps are read, so the in-place rule of in_place.hpp holds as for conv2d.
#pragma once

#include <cstdint>

#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

constexpr bool depthwise_conv2d_3x3_applies(const conv2d_params& p) noexcept {
    return p.groups == p.input.channels && p.groups == p.output.channels && p.win.kernel_h == 3 &&
           p.win.kernel_w == 3 && p.win.dilation_h == 1 && p.win.dilation_w == 1 &&
           (p.win.stride_w == 1 || p.win.stride_w == 2);
}

inline void depthwise_conv2d_3x3(const conv2d_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    const int in_w = p.input.width, out_w = p.output.width, stride_w = p.win.stride_w;
    const simd::pair offsets = simd::make_pair(p.input_offset, p.input_offset);
    // The outputs whose window lies inside the row and whose word load stays in it:
    // ix0 = ox * stride - padding >= 0 and ix0 + 3 < in_w.
    const int first_inside = (p.win.padding_w + stride_w - 1) / stride_w;
    const int last_inside = in_w - 4 + p.win.padding_w < 0 ? -1 : (in_w - 4 + p.win.padding_w) / stride_w;
    const int inside_end = last_inside + 1 < out_w ? last_inside + 1 : out_w;  // one past
    for (int c = 0; c < p.output.channels; ++c) {
        const std::int8_t* plane = input + c * p.input.plane();
        const std::int8_t* filter = p.weights + c * 9;
        const simd::pair outer[3] = {simd::make_pair(filter[0], filter[2]), simd::make_pair(filter[3], filter[5]),
                                     simd::make_pair(filter[6], filter[8])};
        const simd::pair middle[3] = {filter[1], filter[4], filter[7]};
        const std::int32_t bias = p.bias != nullptr ? p.bias[c] : 0;
        const math::fixed_point_multiplier m = p.multipliers[c];
        std::int8_t* out = output + c * p.output.plane();
        for (int oy = 0; oy < p.output.height; ++oy, out += out_w) {
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range ky = valid_taps(iy0, 3, 1, p.input.height);
            const int row0 = iy0 * in_w - p.win.padding_w;  // the index of row iy0, column -padding (may be negative)
            // Tap by tap, for the outputs at the edges.
            const auto edge = [&](int ox) {
                const int ix0 = ox * stride_w - p.win.padding_w;
                const tap_range kx = valid_taps(ix0, 3, 1, in_w);
                std::int32_t sum = 0;
                for (int y = ky.begin; y < ky.end; ++y)
                    for (int x = kx.begin; x < kx.end; ++x)
                        sum += (plane[(iy0 + y) * in_w + ix0 + x] + p.input_offset) * filter[y * 3 + x];
                out[ox] = requantize_output_32bit(sum, bias, m, p.output_offset, p.range);
            };
            int ox = 0;
            for (; ox < first_inside && ox < out_w; ++ox) edge(ox);
            if (stride_w == 1) {
                for (; ox + 1 < inside_end; ox += 2) {
                    std::int32_t first = 0, second = 0;
                    for (int y = ky.begin; y < ky.end; ++y) {
                        const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ox));
                        const simd::pair even = simd::even_bytes_plus(offsets, word);  // b0, b2
                        const simd::pair odd = simd::odd_bytes_plus(offsets, word);    // b1, b3
                        first = simd::dual_multiply_add(even, outer[y], first);
                        first = simd::multiply_add_low(odd, middle[y], first);
                        second = simd::dual_multiply_add(odd, outer[y], second);
                        second = simd::multiply_add_high_low(even, middle[y], second);
                    }
                    out[ox] = requantize_output_32bit(first, bias, m, p.output_offset, p.range);
                    out[ox + 1] = requantize_output_32bit(second, bias, m, p.output_offset, p.range);
                }
            }
            for (; ox < inside_end; ++ox) {
                std::int32_t sum = 0;
                for (int y = ky.begin; y < ky.end; ++y) {
                    const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ox * stride_w));
                    sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, word), outer[y], sum);
                    sum = simd::multiply_add_low(simd::odd_bytes_plus(offsets, word), middle[y], sum);
                }
                out[ox] = requantize_output_32bit(sum, bias, m, p.output_offset, p.range);
            }
            for (; ox < out_w; ++ox) edge(ox);
        }
    }
}

}  // namespace versatil::firmware

// Depthwise 3x3 convolution, int8, on planes: the fast kernel for groups == input channels ==
// output channels with a 3x3 window, dilation 1, horizontal stride 1 or 2 (any vertical
// stride, any padding) whose multipliers are below 0.25 (prepared_output_applies). Same params
// and result as the reference conv2d, byte for byte.
//
// Along a row the three taps of a window are adjacent bytes, so one unaligned word load
// holds them: bytes (b0, b2) and (b1, b3) widened with the input offset (SXTAB16) meet the
// row's weights held as the pair (w0, w2) and w1. With stride 1 the same word serves two
// outputs: b0 w0 + b2 w2 (SMLAD) + b1 w1 (SMLABB) for the first, b1 w0 + b3 w2 (SMLAD) +
// b2 w1 (SMLATB) for the second; with stride 2 one output a word. Six products in seven
// instructions, or three in five, where the reference kernel spends about twenty an output.
// Each channel's plane is first copied with its padding (the input zero point, whose
// product is nothing once offset), so no window crosses an edge.
//
// Order of work: channel by channel, each plane copied before any output of its channel is
// written, so the in-place rule of in_place.hpp holds as for conv2d.
#pragma once

#include <cstddef>
#include <cstdint>

#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

constexpr bool depthwise_conv2d_3x3_applies(const conv2d_params& p) noexcept {
    // A channel-last input (a model's first layer) is left to conv2d_im2col, which gathers it.
    return !p.input_channels_last && p.groups == p.input.channels && p.groups == p.output.channels &&
           p.win.kernel_h == 3 && p.win.kernel_w == 3 && p.win.dilation_h == 1 && p.win.dilation_w == 1 &&
           (p.win.stride_w == 1 || p.win.stride_w == 2);
}

// Each channel's plane is copied, with its padding, into the scratch first: there every
// window lies inside, and one loop with no edge case and little state runs every output.
// The copy costs about a tenth of an instruction per multiply-accumulate and saves the edge
// paths, which on keyword spotting's 5-level rows are three outputs in five.
constexpr std::size_t depthwise_conv2d_3x3_scratch_bytes(const conv2d_params& p) noexcept {
    const auto padded_w = static_cast<std::size_t>(p.input.width + 2 * p.win.padding_w);
    const auto padded_h = static_cast<std::size_t>(p.input.height + 2 * p.win.padding_h);
    return padded_w * padded_h + 1;  // and one level after the last row, where a word may reach
}

namespace detail {

// One plane whose every window lies inside it, rows readable one level past their end (the
// padded copy): no edge, no clipped row, the least state a loop can carry.
VERSATIL_FIRMWARE_INLINE void depthwise_conv2d_3x3_inside(const std::int8_t* plane, int width, shape output,
                                                             int stride_h, int stride_w, const std::int8_t* filter,
                                                             const prepared_output& stage, simd::pair offsets,
                                                             activation_range range, std::int8_t* out) noexcept {
    const simd::pair outer0 = simd::make_pair(filter[0], filter[2]), outer1 = simd::make_pair(filter[3], filter[5]),
                     outer2 = simd::make_pair(filter[6], filter[8]);
    const simd::pair middle0 = filter[1], middle1 = filter[4], middle2 = filter[7];
    for (int oy = 0; oy < output.height; ++oy, out += output.width) {
        const std::int8_t* at = plane + oy * stride_h * width;
        int ox = 0;
        if (stride_w == 1) {
            for (; ox + 1 < output.width; ox += 2, at += 2) {
                std::int32_t first = 0, second = 0;
                const auto row = [&](const std::int8_t* word_at, simd::pair o, simd::pair mid) {
                    const std::int32_t word = simd::load4(word_at);
                    const simd::pair even = simd::even_bytes_plus(offsets, word);  // b0, b2
                    const simd::pair odd = simd::odd_bytes_plus(offsets, word);    // b1, b3
                    first = simd::dual_multiply_add(even, o, first);
                    first = simd::multiply_add_low(odd, mid, first);
                    second = simd::dual_multiply_add(odd, o, second);
                    second = simd::multiply_add_high_low(even, mid, second);
                };
                row(at, outer0, middle0);
                row(at + width, outer1, middle1);
                row(at + 2 * width, outer2, middle2);
                out[ox] = requantize_prepared(first, stage, range);
                out[ox + 1] = requantize_prepared(second, stage, range);
            }
        }
        for (; ox < output.width; ++ox, at += stride_w) {
            std::int32_t sum = 0;
            const auto row = [&](const std::int8_t* word_at, simd::pair o, simd::pair mid) {
                const std::int32_t word = simd::load4(word_at);
                sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, word), o, sum);
                sum = simd::multiply_add_low(simd::odd_bytes_plus(offsets, word), mid, sum);
            };
            row(at, outer0, middle0);
            row(at + width, outer1, middle1);
            row(at + 2 * width, outer2, middle2);
            out[ox] = requantize_prepared(sum, stage, range);
        }
    }
}

}  // namespace detail

// `scratch`: depthwise_conv2d_3x3_scratch_bytes(p) bytes, any alignment.
VERSATIL_FIRMWARE_HOT inline void depthwise_conv2d_3x3(const conv2d_params& p, const std::int8_t* input,
                                                      std::int8_t* output, std::int8_t* scratch) noexcept {
    // One channel at a time: its plane, padded with the input zero point (the level whose
    // product is nothing once offset), then a window without padding over it. Channel c is
    // copied before any of its outputs is written, so the in-place rule still holds.
    const int pad_h = p.win.padding_h, pad_w = p.win.padding_w, in_w = p.input.width;
    const int padded_w = in_w + 2 * pad_w;
    const auto zero_point = static_cast<std::int8_t>(-p.input_offset);
    const simd::pair offsets = simd::make_pair(p.input_offset, p.input_offset);
    for (int c = 0; c < p.output.channels; ++c) {
        const std::int8_t* plane = input + c * p.input.plane();
        std::int8_t* to = scratch;
        for (int i = 0; i < pad_h * padded_w; ++i) *to++ = zero_point;
        for (int y = 0; y < p.input.height; ++y, plane += in_w) {
            for (int i = 0; i < pad_w; ++i) *to++ = zero_point;
            int x = 0;
            for (; x + 4 <= in_w; x += 4, to += 4) simd::store4(to, simd::load4(plane + x));
            for (; x < in_w; ++x) *to++ = plane[x];
            for (int i = 0; i < pad_w; ++i) *to++ = zero_point;
        }
        for (int i = 0; i < pad_h * padded_w; ++i) *to++ = zero_point;
        const prepared_output stage = prepare_output(p.bias != nullptr ? p.bias[c] : 0, p.multipliers[c], p.output_offset);
        detail::depthwise_conv2d_3x3_inside(scratch, padded_w, p.output, p.win.stride_h, p.win.stride_w, p.weights + 9 * c,
                                            stage, offsets, p.range, output + c * p.output.plane());
    }
}

}  // namespace versatil::firmware

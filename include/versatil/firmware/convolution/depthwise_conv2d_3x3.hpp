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
// Near the row's ends a word from the row's first or last four levels, or one level earlier,
// serves with other halves of the same pairs (SMLABT, SMLATT); rows under four levels wide,
// and paddings other than 1 at the edges, go tap by tap.
//
// Order of work: channel by channel, row by row, left to right, each output written once
// all its taps are read, so the in-place rule of in_place.hpp holds as for conv2d.
#pragma once

#include <cstddef>
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

// Narrow padded planes are copied, padding included, into the scratch first: there a row's
// edges are few and every window lies inside. The copy costs a byte moved per input level,
// under a tenth of an instruction per multiply-accumulate, and saves the edge paths, which
// on a 5-level row (keyword spotting) are three outputs in five.
constexpr int depthwise_conv2d_3x3_widest_padded_copy = 32;

constexpr std::size_t depthwise_conv2d_3x3_scratch_bytes(const conv2d_params& p) noexcept {
    const int padded_w = p.input.width + 2 * p.win.padding_w, padded_h = p.input.height + 2 * p.win.padding_h;
    const bool padded = p.win.padding_w > 0 || p.win.padding_h > 0;
    return padded && padded_w <= depthwise_conv2d_3x3_widest_padded_copy
               ? static_cast<std::size_t>(padded_w) * static_cast<std::size_t>(padded_h)
               + 1  // the slack after the last row
            : 0;
}

namespace detail {

// The planes of p.input, read as p's window says, into p.output's planes.
VERSATIL_FIRMWARE_HOT inline void depthwise_conv2d_3x3_planes(const conv2d_params& p, const std::int8_t* input,
                                                             std::int8_t* output) noexcept {
    const int in_w = p.input.width, out_w = p.output.width, stride_w = p.win.stride_w, padding_w = p.win.padding_w;
    const std::int32_t input_offset = p.input_offset, output_offset = p.output_offset;
    const activation_range range = p.range;
    const simd::pair offsets = simd::make_pair(input_offset, input_offset);
    // Where an output's word comes from: its window's own three levels and one more
    // (inside), or, at a plane's edge with padding 1, the row's first or last four levels;
    // near the right edge the word one level earlier (shifted). Rows under four levels wide,
    // and other paddings at the edges, go tap by tap.
    enum class word_at : unsigned char { inside, shifted, left_edge, right_edge, tap_by_tap };
    const auto kind_of = [&](int ox) {
        const int ix0 = ox * stride_w - padding_w;
        if (in_w < 4) return word_at::tap_by_tap;
        if (ix0 >= 0 && ix0 + 3 < in_w) return word_at::inside;
        if (ix0 >= 1 && ix0 + 2 < in_w) return word_at::shifted;
        if (ix0 == -1) return word_at::left_edge;
        if (ix0 == in_w - 2) return word_at::right_edge;
        return word_at::tap_by_tap;
    };
    // The outputs of a row from first_inside on that pair up at stride 1.
    int first_inside = 0;
    while (first_inside < out_w && kind_of(first_inside) != word_at::inside) ++first_inside;
    int inside_end = first_inside;
    while (inside_end < out_w && kind_of(inside_end) == word_at::inside) ++inside_end;
    for (int c = 0; c < p.output.channels; ++c) {
        const std::int8_t* plane = input + c * p.input.plane();
        const std::int8_t* filter = p.weights + c * 9;
        const simd::pair outer[3] = {simd::make_pair(filter[0], filter[2]), simd::make_pair(filter[3], filter[5]),
                                     simd::make_pair(filter[6], filter[8])};
        const simd::pair middle[3] = {filter[1], filter[4], filter[7]};
        const prepared_output stage = prepare_output(p.bias != nullptr ? p.bias[c] : 0, p.multipliers[c], output_offset);
        std::int8_t* out = output + c * p.output.plane();
        for (int oy = 0; oy < p.output.height; ++oy, out += out_w) {
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range ky = valid_taps(iy0, 3, 1, p.input.height);
            const int row0 = iy0 * in_w;  // the index of row iy0 (negative above the plane)
            const auto one = [&](int ox) {  // out of line: a few outputs a row
                const int ix0 = ox * stride_w - padding_w;
                std::int32_t sum = 0;
                switch (kind_of(ox)) {
                    case word_at::inside:
                        for (int y = ky.begin; y < ky.end; ++y) {
                            const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ix0));
                            sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, word), outer[y], sum);
                            sum = simd::multiply_add_low(simd::odd_bytes_plus(offsets, word), middle[y], sum);
                        }
                        break;
                    case word_at::shifted:  // levels ix0 - 1 .. ix0 + 2: b1 w0 + b2 w1 + b3 w2
                        for (int y = ky.begin; y < ky.end; ++y) {
                            const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ix0 - 1));
                            const simd::pair even = simd::even_bytes_plus(offsets, word), odd = simd::odd_bytes_plus(offsets, word);
                            sum = simd::multiply_add_low(odd, outer[y], sum);
                            sum = simd::multiply_add_high_low(even, middle[y], sum);
                            sum = simd::multiply_add_high(odd, outer[y], sum);
                        }
                        break;
                    case word_at::left_edge:  // levels 0 .. 3: b0 w1 + b1 w2
                        for (int y = ky.begin; y < ky.end; ++y) {
                            const std::int32_t word = simd::load4(plane + (row0 + y * in_w));
                            sum = simd::multiply_add_low(simd::even_bytes_plus(offsets, word), middle[y], sum);
                            sum = simd::multiply_add_low_high(simd::odd_bytes_plus(offsets, word), outer[y], sum);
                        }
                        break;
                    case word_at::right_edge:  // levels w - 4 .. w - 1: b2 w0 + b3 w1
                        for (int y = ky.begin; y < ky.end; ++y) {
                            const std::int32_t word = simd::load4(plane + (row0 + y * in_w + in_w - 4));
                            sum = simd::multiply_add_high_low(simd::even_bytes_plus(offsets, word), outer[y], sum);
                            sum = simd::multiply_add_high_low(simd::odd_bytes_plus(offsets, word), middle[y], sum);
                        }
                        break;
                    case word_at::tap_by_tap: {
                        const tap_range kx = valid_taps(ix0, 3, 1, in_w);
                        for (int y = ky.begin; y < ky.end; ++y)
                            for (int x = kx.begin; x < kx.end; ++x)
                                sum += (plane[row0 + y * in_w + ix0 + x] + input_offset) * filter[y * 3 + x];
                        break;
                    }
                }
                out[ox] = requantize_prepared(sum, stage, range);
            };
            int ox = 0;
            for (; ox < first_inside; ++ox) one(ox);
            if (ky.begin == 0 && ky.end == 3 && first_inside < inside_end) {
                // All three rows inside the plane (most rows): unrolled, the weights in registers.
                const simd::pair outer0 = outer[0], outer1 = outer[1], outer2 = outer[2];
                const simd::pair middle0 = middle[0], middle1 = middle[1], middle2 = middle[2];
                const std::int8_t* at = plane + (row0 + first_inside * stride_w - padding_w);
                if (stride_w == 1) {
                    for (; ox + 1 < inside_end; ox += 2, at += 2) {
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
                        row(at + in_w, outer1, middle1);
                        row(at + 2 * in_w, outer2, middle2);
                        out[ox] = requantize_prepared(first, stage, range);
                        out[ox + 1] = requantize_prepared(second, stage, range);
                    }
                }
                for (; ox < inside_end; ++ox, at += stride_w) {
                    std::int32_t sum = 0;
                    const auto row = [&](const std::int8_t* word_at, simd::pair o, simd::pair mid) {
                        const std::int32_t word = simd::load4(word_at);
                        sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, word), o, sum);
                        sum = simd::multiply_add_low(simd::odd_bytes_plus(offsets, word), mid, sum);
                    };
                    row(at, outer0, middle0);
                    row(at + in_w, outer1, middle1);
                    row(at + 2 * in_w, outer2, middle2);
                    out[ox] = requantize_prepared(sum, stage, range);
                }
            }
            if (stride_w == 1) {
                for (; ox + 1 < inside_end; ox += 2) {
                    std::int32_t first = 0, second = 0;
                    for (int y = ky.begin; y < ky.end; ++y) {
                        const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ox - padding_w));
                        const simd::pair even = simd::even_bytes_plus(offsets, word);  // b0, b2
                        const simd::pair odd = simd::odd_bytes_plus(offsets, word);    // b1, b3
                        first = simd::dual_multiply_add(even, outer[y], first);
                        first = simd::multiply_add_low(odd, middle[y], first);
                        second = simd::dual_multiply_add(odd, outer[y], second);
                        second = simd::multiply_add_high_low(even, middle[y], second);
                    }
                    out[ox] = requantize_prepared(first, stage, range);
                    out[ox + 1] = requantize_prepared(second, stage, range);
                }
            }
            for (; ox < inside_end; ++ox) {
                std::int32_t sum = 0;
                for (int y = ky.begin; y < ky.end; ++y) {
                    const std::int32_t word = simd::load4(plane + (row0 + y * in_w + ox * stride_w - padding_w));
                    sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, word), outer[y], sum);
                    sum = simd::multiply_add_low(simd::odd_bytes_plus(offsets, word), middle[y], sum);
                }
                out[ox] = requantize_prepared(sum, stage, range);
            }
            for (; ox < out_w; ++ox) one(ox);
        }
    }
}

// One plane whose every window lies inside it, rows readable one level past their end (the
// padded copy): no edge, no clipped row, the least state a loop can carry.
VERSATIL_FIRMWARE_HOT inline void depthwise_conv2d_3x3_inside(const std::int8_t* plane, int width, shape output,
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

// `scratch`: depthwise_conv2d_3x3_scratch_bytes(p) bytes, any alignment (none when 0).
VERSATIL_FIRMWARE_HOT inline void depthwise_conv2d_3x3(const conv2d_params& p, const std::int8_t* input,
                                                      std::int8_t* output, std::int8_t* scratch) noexcept {
    if (depthwise_conv2d_3x3_scratch_bytes(p) == 0) {
        detail::depthwise_conv2d_3x3_planes(p, input, output);
        return;
    }
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

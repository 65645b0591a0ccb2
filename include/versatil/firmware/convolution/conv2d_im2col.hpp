// 2-D convolution, int8, as a matrix product: the fast kernel for every convolution that is
// not a 3x3 depthwise one (pointwise, dense, grouped; any window). Same params as the
// reference conv2d (conv2d.hpp) but for the weights' order (below), and the same bytes out.
//
// For a block of output pixels it writes their input patches (im2col) into the scratch as
// 16-bit values with the input offset added (padded taps 0; a channel-last input is gathered
// with its own strides, input_strides), tap by tap (ky, kx) and in each
// tap the group's input channels, which the exporter gives the weights too: with a channel
// count divisible by four (most layers) a tap's channels fill whole groups of four, gathered
// four at a time. The patches are interleaved by groups of four taps (A's four, B's four, ...; then A's and
// B's last length % 4 each at their own eight bytes), so one pointer walks both. Then two output channels by the two pixels are four accumulators held in
// registers: four patch values are two word loads, the pairs (0, 1) and (2, 3), and four
// weights of a row one load widened by two SXTB16, which give bytes (0, 2) and (1, 3); so the
// exporter stores each whole group of four weights of a row as w0 w2 w1 w3
// (conv2d_im2col_weight_order), and SXTB16 yields (w0, w1) and (w2, w3). Each pair of
// products is one SMLAD; a load of patch values serves two channels and a load of weights
// two pixels.
//
// Takes multipliers below 0.25 (prepared_output_applies). Scratch:
// conv2d_im2col_scratch_bytes(p), any alignment (a part of the arena). Never in
// place: every output reads a whole patch across channels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

// Taps per output: the length of one patch, and of one row of weights.
constexpr int conv2d_patch_length(const conv2d_params& p) noexcept {
    return p.input.channels / p.groups * p.win.kernel_h * p.win.kernel_w;
}

// Bytes of one pair of patches: 16-bit values, and room for the second one's tail at eight
// bytes from the first's.
constexpr std::size_t conv2d_im2col_pair_bytes(const conv2d_params& p) noexcept {
    return 4 * static_cast<std::size_t>(conv2d_patch_length(p)) + 8;
}

// Pixel pairs whose patches the kernel writes at once (at most eight, within 1 KiB, at least
// one, at most the plane's): then it walks the output channels once per block, not once per
// pair, so a channel's rescale is prepared once for several pixels. Short patches (pointwise
// layers) get blocks of eight pairs, a 3x3 patch over 32 channels one pair. Eight already
// spread the per-block work thin; more would only grow the arena.
inline constexpr std::size_t conv2d_im2col_block_budget = 1024;
inline constexpr int conv2d_im2col_most_block_pairs = 8;

constexpr int conv2d_im2col_block_pairs(const conv2d_params& p) noexcept {
    const int budget = static_cast<int>(conv2d_im2col_block_budget / conv2d_im2col_pair_bytes(p));
    const int fit = budget < conv2d_im2col_most_block_pairs ? budget : conv2d_im2col_most_block_pairs;
    const int pairs = (p.output.plane() + 1) / 2;
    return fit < 1 ? 1 : (fit > pairs ? pairs : fit);
}

constexpr std::size_t conv2d_im2col_scratch_bytes(const conv2d_params& p) noexcept {
    return static_cast<std::size_t>(conv2d_im2col_block_pairs(p)) * conv2d_im2col_pair_bytes(p);
}

// The version of the order below: an exported header asserts the one it was written for, so a
// header from another version of the exporter fails to compile instead of computing garbage.
inline constexpr int conv2d_im2col_weight_layout = 2;

// Where weight k of output channel oc goes in the kernel's order. The taps of a row go
// (ky, kx, input channel) where the reference has (input channel, ky, kx); within a group of
// convolution channels, rows pair up (oc, oc + 1) as the kernel reads them: for each whole
// group of four taps, four bytes of the first row then four of the second, each four as
// w0 w2 w1 w3; then the last length % 4 taps of the first row and of the second. A group's
// last row, when its count is odd, keeps its own bytes, whole groups as w0 w2 w1 w3. Every
// row still starts at oc * length.
constexpr int conv2d_im2col_weight_position(const conv2d_params& p, int oc, int reference_k) noexcept {
    const int length = conv2d_patch_length(p), grouped = length & ~3, tail = length - grouped;
    const int taps = p.win.kernel_h * p.win.kernel_w, channels = length / taps;
    const int k = reference_k % taps * channels + reference_k / taps;  // (ic, tap) -> (tap, ic)
    const int per_group = p.output.channels / p.groups, local = oc % per_group;
    const int lane = k & 3, swapped = (k & ~3) | (lane == 1 ? 2 : (lane == 2 ? 1 : lane));
    const bool second = (local & 1) == 1, single = !second && local + 1 == per_group;
    if (single) return oc * length + (k < grouped ? swapped : k);
    const int base = (second ? oc - 1 : oc) * length, row = second ? 1 : 0;
    if (k < grouped) return base + (k & ~3) * 2 + row * 4 + (swapped & 3);
    return base + grouped * 2 + row * tail + (k - grouped);
}

// The reference layout's weights ([out][in / groups][kh][kw]) in the kernel's order.
constexpr void conv2d_im2col_pack_weights(const conv2d_params& p, const std::int8_t* weights, std::int8_t* packed) noexcept {
    const int length = conv2d_patch_length(p);
    for (int oc = 0; oc < p.output.channels; ++oc)
        for (int k = 0; k < length; ++k) packed[conv2d_im2col_weight_position(p, oc, k)] = weights[oc * length + k];
}

namespace detail {

// Writes one patch into the interleaved scratch: after each four values, past the other's four.
struct patch_writer {
    std::int8_t* at;
    int left = 4;

    VERSATIL_FIRMWARE_INLINE void put(std::int32_t value) noexcept {
        const auto half = static_cast<std::int16_t>(value);
        __builtin_memcpy(at, &half, 2);
        at += 2;
        if (--left == 0) {
            left = 4;
            at += 8;
        }
    }
};

VERSATIL_FIRMWARE_INLINE std::int32_t get_halfword(const std::int8_t* at) noexcept {
    std::int16_t half;
    __builtin_memcpy(&half, at, 2);
    return half;
}

// Writes the patch of output pixel (oy, ox), tap by tap and in each tap the group's input
// channels, as patch `which` (0, 1).
VERSATIL_FIRMWARE_HOT inline void fill_patch(const conv2d_params& p, std::int8_t* scratch, int which,
                                            const std::int8_t* group_input, int oy, int ox) noexcept {
    const int channels = p.input.channels / p.groups, in_w = p.input.width;
    const input_strides step = strides_of(p);
    const std::int32_t offset = p.input_offset;
    const int iy0 = oy * p.win.stride_h - p.win.padding_h, ix0 = ox * p.win.stride_w - p.win.padding_w;
    const tap_range rows = valid_taps(iy0, p.win.kernel_h, p.win.dilation_h, p.input.height);
    const tap_range cols = valid_taps(ix0, p.win.kernel_w, p.win.dilation_w, in_w);
    if ((channels & 3) == 0) {
        // Whole groups: four channels a step, two pairs of 16-bit values stored, the other
        // patch's group skipped.
        const simd::pair offsets = simd::make_pair(offset, offset);
        std::int8_t* at = scratch + 8 * which;
        for (int ky = 0; ky < p.win.kernel_h; ++ky) {
            for (int kx = 0; kx < p.win.kernel_w; ++kx) {
                if (ky < rows.begin || ky >= rows.end || kx < cols.begin || kx >= cols.end) {
                    for (int c = 0; c < channels; c += 4, at += 16) {
                        simd::store4(at, 0);
                        simd::store4(at + 4, 0);
                    }
                    continue;
                }
                const std::int8_t* x = group_input + ((iy0 + ky * p.win.dilation_h) * step.row +
                                                      (ix0 + kx * p.win.dilation_w) * step.column);
                const int s = step.channel;
                for (int c = 0; c < channels; c += 4, at += 16, x += 4 * s) {
                    const std::int32_t x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s];
                    simd::store4(at, simd::add_pairs(simd::make_pair(x0, x1), offsets));
                    simd::store4(at + 4, simd::add_pairs(simd::make_pair(x2, x3), offsets));
                }
            }
        }
        return;
    }
    patch_writer out{scratch + 8 * which};
    for (int ky = 0; ky < p.win.kernel_h; ++ky) {
        for (int kx = 0; kx < p.win.kernel_w; ++kx) {
            if (ky < rows.begin || ky >= rows.end || kx < cols.begin || kx >= cols.end) {
                for (int c = 0; c < channels; ++c) out.put(0);
                continue;
            }
            const std::int8_t* x = group_input + ((iy0 + ky * p.win.dilation_h) * step.row +
                                                  (ix0 + kx * p.win.dilation_w) * step.column);
            for (int c = 0; c < channels; ++c, x += step.channel) out.put(*x + offset);
        }
    }
}

// Two output channels (the row pair at w) by both patches.
VERSATIL_FIRMWARE_INLINE void two_channels_two_pixels(const std::int8_t* x, const std::int8_t* w, int length,
                                                      std::int32_t (&acc)[4]) noexcept {
    std::int32_t c0a = 0, c0b = 0, c1a = 0, c1b = 0;
#if VERSATIL_FIRMWARE_DSP
    // The loop below as the Cortex-M4 runs it best: 20 instructions for 16 multiply-accumulates
    // (GCC's own schedule takes 22: it cannot fold the patch pointer's step into a load).
    // Word loads at any alignment; the same operations, in the same order per accumulator, as
    // the C++ loop, which the other targets run and the kernel sweep compares byte for byte.
    if (int groups = length >> 2; groups > 0) {
        std::int32_t weights0, weights1, a, b, pair;
        __asm__(
            "1:\n\t"
            "ldr    %[weights0], [%[w]], #4\n\t"
            "ldr    %[weights1], [%[w]], #4\n\t"
            "ldr    %[a], [%[x]], #16\n\t"
            "ldr    %[b], [%[x], #-8]\n\t"
            "sxtb16 %[pair], %[weights0]\n\t"
            "smlad  %[c0a], %[a], %[pair], %[c0a]\n\t"
            "smlad  %[c0b], %[b], %[pair], %[c0b]\n\t"
            "sxtb16 %[pair], %[weights1]\n\t"
            "smlad  %[c1a], %[a], %[pair], %[c1a]\n\t"
            "smlad  %[c1b], %[b], %[pair], %[c1b]\n\t"
            "ldr    %[a], [%[x], #-12]\n\t"
            "ldr    %[b], [%[x], #-4]\n\t"
            "sxtb16 %[pair], %[weights0], ror #8\n\t"
            "smlad  %[c0a], %[a], %[pair], %[c0a]\n\t"
            "smlad  %[c0b], %[b], %[pair], %[c0b]\n\t"
            "sxtb16 %[pair], %[weights1], ror #8\n\t"
            "smlad  %[c1a], %[a], %[pair], %[c1a]\n\t"
            "smlad  %[c1b], %[b], %[pair], %[c1b]\n\t"
            "subs   %[groups], %[groups], #1\n\t"
            "bne    1b"
            : [c0a] "+r"(c0a), [c0b] "+r"(c0b), [c1a] "+r"(c1a), [c1b] "+r"(c1b), [x] "+r"(x), [w] "+r"(w),
              [groups] "+r"(groups), [weights0] "=&r"(weights0), [weights1] "=&r"(weights1), [a] "=&r"(a), [b] "=&r"(b),
              [pair] "=&r"(pair)
            :
            : "cc", "memory");
    }
#else
    for (int groups = length >> 2; groups > 0; --groups, x += 16, w += 8) {
        const std::int32_t weights0 = simd::load4(w), weights1 = simd::load4(w + 4);
        const simd::pair w0_low = simd::even_bytes(weights0), w0_high = simd::odd_bytes(weights0);
        const simd::pair w1_low = simd::even_bytes(weights1), w1_high = simd::odd_bytes(weights1);
        const simd::pair a_low = simd::load4(x), a_high = simd::load4(x + 4);
        c0a = simd::dual_multiply_add(a_low, w0_low, c0a);
        c0a = simd::dual_multiply_add(a_high, w0_high, c0a);
        c1a = simd::dual_multiply_add(a_low, w1_low, c1a);
        c1a = simd::dual_multiply_add(a_high, w1_high, c1a);
        const simd::pair b_low = simd::load4(x + 8), b_high = simd::load4(x + 12);
        c0b = simd::dual_multiply_add(b_low, w0_low, c0b);
        c0b = simd::dual_multiply_add(b_high, w0_high, c0b);
        c1b = simd::dual_multiply_add(b_low, w1_low, c1b);
        c1b = simd::dual_multiply_add(b_high, w1_high, c1b);
    }
#endif
    const int tail = length & 3;
    for (int k = 0; k < tail; ++k, x += 2, ++w) {
        const std::int32_t xa = get_halfword(x), xb = get_halfword(x + 8);
        c0a += xa * w[0];
        c0b += xb * w[0];
        c1a += xa * w[tail];
        c1b += xb * w[tail];
    }
    acc[0] = c0a;
    acc[1] = c0b;
    acc[2] = c1a;
    acc[3] = c1b;
}

// One output channel (weight row w, a row of its own) by patch `which`.
VERSATIL_FIRMWARE_INLINE std::int32_t one_channel_one_pixel(const std::int8_t* scratch, int which, const std::int8_t* w,
                                                            int length) noexcept {
    std::int32_t sum = 0;
    const std::int8_t* x = scratch + 8 * which;
    for (int groups = length >> 2; groups > 0; --groups, x += 16, w += 4) {
        const std::int32_t weights = simd::load4(w);
        sum = simd::dual_multiply_add(simd::load4(x), simd::even_bytes(weights), sum);
        sum = simd::dual_multiply_add(simd::load4(x + 4), simd::odd_bytes(weights), sum);
    }
    for (int k = length & 3; k > 0; --k, x += 2, ++w) sum += get_halfword(x) * *w;
    return sum;
}

}  // namespace detail

// `p.weights` in conv2d_im2col_weight_position's order.
VERSATIL_FIRMWARE_HOT inline void conv2d_im2col(const conv2d_params& p, const std::int8_t* input, std::int8_t* output,
                          std::int8_t* scratch) noexcept {
    // Locals, not p's fields: every output store may alias memory, and would reload them.
    const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
    const int length = conv2d_patch_length(p), out_w = p.output.width, pixels = p.output.plane();
    const std::int8_t* const weights = p.weights;
    const std::int32_t* const biases = p.bias;
    const math::fixed_point_multiplier* const multipliers = p.multipliers;
    const std::int32_t output_offset = p.output_offset;
    const activation_range range = p.range;
    const auto channel = [&](int oc) {
        return prepare_output(biases != nullptr ? biases[oc] : 0, multipliers[oc], output_offset);
    };
    const int block_pairs = conv2d_im2col_block_pairs(p);
    const auto pair_bytes = static_cast<int>(conv2d_im2col_pair_bytes(p));
    for (int g = 0; g < p.groups; ++g) {
        const std::int8_t* group_input = input + g * in_per_group * strides_of(p).channel;
        const int first_channel = g * out_per_group, last_channel = first_channel + out_per_group;
        int oy = 0, ox = 0;  // of the next pixel to fill
        for (int first = 0; first < pixels; first += 2 * block_pairs) {
            // The block's patches, a pair at a time; a last pixel alone fills both patches of
            // its pair (the B outputs are not written).
            const int count = pixels - first < 2 * block_pairs ? pixels - first : 2 * block_pairs;
            const int pairs = (count + 1) / 2;
            for (int j = 0; j < pairs; ++j) {
                std::int8_t* at = scratch + j * pair_bytes;
                const bool pair = 2 * j + 1 < count;
                detail::fill_patch(p, at, 0, group_input, oy, ox);
                if (pair && ++ox == out_w) ox = 0, ++oy;
                detail::fill_patch(p, at, 1, group_input, oy, ox);
                if (++ox == out_w) ox = 0, ++oy;
            }
            int oc = first_channel;
            for (; oc + 1 < last_channel; oc += 2) {
                // The block's sums first, then each channel's outputs in a loop of its own: the
                // multiply-accumulate loop and the output stage each keep their values in
                // registers, where together they spilled.
                const std::int8_t* w = weights + oc * length;
                std::int32_t sums[2][2 * conv2d_im2col_most_block_pairs];
                for (int j = 0; j < pairs; ++j) {
                    std::int32_t acc[4];
                    detail::two_channels_two_pixels(scratch + j * pair_bytes, w, length, acc);
                    sums[0][2 * j] = acc[0];
                    sums[0][2 * j + 1] = acc[1];
                    sums[1][2 * j] = acc[2];
                    sums[1][2 * j + 1] = acc[3];
                }
                for (int r = 0; r < 2; ++r) {
                    const prepared_output c = channel(oc + r);
                    std::int8_t* out = output + (oc + r) * pixels + first;
                    for (int i = 0; i < count; ++i) out[i] = requantize_prepared(sums[r][i], c, range);
                }
            }
            if (oc < last_channel) {  // a group's last row when their count is odd
                const prepared_output c = channel(oc);
                const std::int8_t* w = weights + oc * length;
                std::int8_t* out = output + oc * pixels + first;
                for (int i = 0; i < count; ++i)
                    out[i] = requantize_prepared(detail::one_channel_one_pixel(scratch + i / 2 * pair_bytes, i & 1, w, length),
                                                 c, range);
            }
        }
    }
}

}  // namespace versatil::firmware

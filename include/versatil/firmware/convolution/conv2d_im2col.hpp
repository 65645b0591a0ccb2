// 2-D convolution, int8, as a matrix product: the fast kernel for every convolution that is
// not a 3x3 depthwise one (pointwise, dense, grouped; any window). Same params and result as
// the reference conv2d (conv2d.hpp), byte for byte.
//
// For two output pixels at a time it writes their input patches (im2col) into the scratch as
// 16-bit values with the input offset added (padded taps 0), in the weights' own order
// (input channel, ky, kx), so the exported weights keep the reference layout. Then two output
// channels by the two pixels are four accumulators held in registers: four weights of a row
// are one load widened by two SXTB16 (bytes 0, 2 and 1, 3), which is why each group of four
// patch values is stored as the pairs (0, 2) and (1, 3); each pair of products is one SMLAD.
// A load of patch values serves two channels and a load of weights two pixels.
//
// Scratch: conv2d_im2col_scratch_bytes(p), any alignment (a part of the arena). Never in
// place: every output reads a whole patch across channels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

// Taps per output: the length of one patch.
constexpr int conv2d_patch_length(const conv2d_params& p) noexcept {
    return p.input.channels / p.groups * p.win.kernel_h * p.win.kernel_w;
}

// Two patches of 16-bit values.
constexpr std::size_t conv2d_im2col_scratch_bytes(const conv2d_params& p) noexcept {
    return 4 * static_cast<std::size_t>(conv2d_patch_length(p));
}

namespace detail {

// The scratch as two interleaved patches, A and B: for each whole group of four taps 16
// bytes, A's pairs (0, 2) and (1, 3) then B's; after them the last length % 4 taps, A's then
// B's, one halfword each.
struct patch_pair {
    std::int8_t* scratch;
    int length, grouped;  // taps, and taps in whole groups of four

    VERSATIL_FIRMWARE_INLINE std::int8_t* at(int patch, int k) const noexcept {
        if (k < grouped) {
            constexpr int halfword_of[4] = {0, 2, 1, 3};
            return scratch + (k & ~3) * 4 + patch * 8 + halfword_of[k & 3] * 2;
        }
        return scratch + grouped * 4 + (patch * (length - grouped) + (k - grouped)) * 2;
    }
    VERSATIL_FIRMWARE_INLINE void put(int patch, int k, std::int32_t value) const noexcept {
        const auto half = static_cast<std::int16_t>(value);
        __builtin_memcpy(at(patch, k), &half, 2);
    }
    VERSATIL_FIRMWARE_INLINE std::int32_t tail(int patch, int k) const noexcept {
        std::int16_t half;
        __builtin_memcpy(&half, at(patch, k), 2);
        return half;
    }
};

// Writes the patch of output pixel (oy, ox) of the group whose input starts at `group_input`.
inline void fill_patch(const conv2d_params& p, const patch_pair& patches, int patch, const std::int8_t* group_input,
                       int oy, int ox) noexcept {
    const int in_per_group = p.input.channels / p.groups, kernel_h = p.win.kernel_h, kernel_w = p.win.kernel_w;
    const int iy0 = oy * p.win.stride_h - p.win.padding_h, ix0 = ox * p.win.stride_w - p.win.padding_w;
    const tap_range rows = valid_taps(iy0, kernel_h, p.win.dilation_h, p.input.height);
    const tap_range cols = valid_taps(ix0, kernel_w, p.win.dilation_w, p.input.width);
    int k = 0;
    for (int ic = 0; ic < in_per_group; ++ic) {
        const std::int8_t* plane = group_input + ic * p.input.plane();
        for (int ky = 0; ky < kernel_h; ++ky) {
            if (ky < rows.begin || ky >= rows.end) {
                for (int kx = 0; kx < kernel_w; ++kx) patches.put(patch, k++, 0);
                continue;
            }
            const std::int8_t* row = plane + (iy0 + ky * p.win.dilation_h) * p.input.width + ix0;  // ix0 may be negative
            int kx = 0;
            for (; kx < cols.begin; ++kx) patches.put(patch, k++, 0);
            for (; kx < cols.end; ++kx) patches.put(patch, k++, row[kx * p.win.dilation_w] + p.input_offset);
            for (; kx < kernel_w; ++kx) patches.put(patch, k++, 0);
        }
    }
}

// Two output channels (rows w0, w1 of the weights) by both patches.
VERSATIL_FIRMWARE_INLINE void two_channels_two_pixels(const patch_pair& patches, const std::int8_t* w0,
                                                      const std::int8_t* w1, std::int32_t (&acc)[4]) noexcept {
    std::int32_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;  // channel 0 pixel A, channel 0 pixel B, channel 1 A, 1 B
    const std::int8_t* x = patches.scratch;
    const std::int8_t* const end = x + patches.grouped * 4;
    for (; x != end; x += 16, w0 += 4, w1 += 4) {
        const std::int32_t weights0 = simd::load4(w0), weights1 = simd::load4(w1);
        const simd::pair w0_even = simd::even_bytes(weights0), w0_odd = simd::odd_bytes(weights0);
        const simd::pair w1_even = simd::even_bytes(weights1), w1_odd = simd::odd_bytes(weights1);
        const simd::pair a_even = simd::load4(x), a_odd = simd::load4(x + 4);
        a0 = simd::dual_multiply_add(a_even, w0_even, a0);
        a0 = simd::dual_multiply_add(a_odd, w0_odd, a0);
        b0 = simd::dual_multiply_add(a_even, w1_even, b0);
        b0 = simd::dual_multiply_add(a_odd, w1_odd, b0);
        const simd::pair b_even = simd::load4(x + 8), b_odd = simd::load4(x + 12);
        a1 = simd::dual_multiply_add(b_even, w0_even, a1);
        a1 = simd::dual_multiply_add(b_odd, w0_odd, a1);
        b1 = simd::dual_multiply_add(b_even, w1_even, b1);
        b1 = simd::dual_multiply_add(b_odd, w1_odd, b1);
    }
    for (int k = patches.grouped; k < patches.length; ++k, ++w0, ++w1) {
        const std::int32_t xa = patches.tail(0, k), xb = patches.tail(1, k);
        a0 += xa * *w0;
        a1 += xb * *w0;
        b0 += xa * *w1;
        b1 += xb * *w1;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = b0;
    acc[3] = b1;
}

// One output channel by patch `patch` only.
VERSATIL_FIRMWARE_INLINE std::int32_t one_channel_one_pixel(const patch_pair& patches, int patch,
                                                            const std::int8_t* w) noexcept {
    std::int32_t sum = 0;
    const std::int8_t* x = patches.scratch + patch * 8;
    const std::int8_t* const end = x + patches.grouped * 4;
    for (; x != end; x += 16, w += 4) {
        const std::int32_t weights = simd::load4(w);
        sum = simd::dual_multiply_add(simd::load4(x), simd::even_bytes(weights), sum);
        sum = simd::dual_multiply_add(simd::load4(x + 4), simd::odd_bytes(weights), sum);
    }
    for (int k = patches.grouped; k < patches.length; ++k, ++w) sum += patches.tail(patch, k) * *w;
    return sum;
}

}  // namespace detail

inline void conv2d_im2col(const conv2d_params& p, const std::int8_t* input, std::int8_t* output,
                          std::int8_t* scratch) noexcept {
    const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
    const int length = conv2d_patch_length(p), pixels = p.output.plane(), out_plane = p.output.plane();
    const detail::patch_pair patches{scratch, length, length & ~3};
    const auto requantize = [&](std::int32_t sum, int oc) {
        return requantize_output_32bit(sum, p.bias != nullptr ? p.bias[oc] : 0, p.multipliers[oc], p.output_offset,
                                       p.range);
    };
    for (int g = 0; g < p.groups; ++g) {
        const std::int8_t* group_input = input + g * in_per_group * p.input.plane();
        const int first_channel = g * out_per_group, last_channel = first_channel + out_per_group;
        for (int pixel = 0; pixel < pixels; pixel += 2) {
            const bool pair = pixel + 1 < pixels;
            detail::fill_patch(p, patches, 0, group_input, pixel / p.output.width, pixel % p.output.width);
            if (pair) detail::fill_patch(p, patches, 1, group_input, (pixel + 1) / p.output.width, (pixel + 1) % p.output.width);
            std::int8_t* out = output + pixel;
            int oc = first_channel;
            if (pair) {
                for (; oc + 1 < last_channel; oc += 2) {
                    std::int32_t acc[4];
                    const std::int8_t* w0 = p.weights + oc * length;
                    detail::two_channels_two_pixels(patches, w0, w0 + length, acc);
                    out[oc * out_plane] = requantize(acc[0], oc);
                    out[oc * out_plane + 1] = requantize(acc[1], oc);
                    out[(oc + 1) * out_plane] = requantize(acc[2], oc + 1);
                    out[(oc + 1) * out_plane + 1] = requantize(acc[3], oc + 1);
                }
            }
            for (; oc < last_channel; ++oc) {
                const std::int8_t* w = p.weights + oc * length;
                out[oc * out_plane] = requantize(detail::one_channel_one_pixel(patches, 0, w), oc);
                if (pair) out[oc * out_plane + 1] = requantize(detail::one_channel_one_pixel(patches, 1, w), oc);
            }
        }
    }
}

}  // namespace versatil::firmware

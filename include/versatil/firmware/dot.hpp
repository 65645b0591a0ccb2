// The multiply-accumulate primitives of the int8 kernels, on inputs offset by minus their
// zero point (x + x_offset in [-255, 255]) and int8 weights:
//   dot             sum over i of (x[i] + x_offset) * w[i]                  (linear)
//   accumulate      acc[i] += (x[i*step] + x_offset) * w                     (conv2d, one row of taps)
//   accumulate_pair acc[i] += (x[i*step] + x_offset) * wx + (y[i*step] + x_offset) * wy   (two rows)
// Where the target has Arm's DSP extension (__ARM_FEATURE_DSP: Cortex-M4, M7, M33 with DSP)
// two products at a time go through one dual 16-bit multiply-accumulate (SMLAD) on
// sign-extended halfword pairs (SXTB16; SXTAB16 adds the offset to both halves); otherwise,
// or with VERSATIL_FIRMWARE_PORTABLE defined, one product at a time. Both are exact integer
// arithmetic on the same products, so their results are identical while a sum fits int32
// (the code generator bounds the taps per output so that it does). Define the macro alike in
// every translation unit of a program: the two paths are the same inline functions.
#pragma once

#include <cstdint>

#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

// The largest number of taps one accumulator may sum: |x + x_offset| <= 255, |w| <= 128.
inline constexpr int max_taps_per_output = 65535;

constexpr std::int32_t dot_portable(const std::int8_t* x, const std::int8_t* w, int n, std::int32_t x_offset) noexcept {
    std::int32_t sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] + x_offset) * w[i];
    return sum;
}

inline std::int32_t dot(const std::int8_t* x, const std::int8_t* w, int n, std::int32_t x_offset) noexcept {
#if VERSATIL_FIRMWARE_DSP
    const simd::pair offsets = simd::make_pair(x_offset, x_offset);
    std::int32_t sum = 0;
    for (; n >= 4; n -= 4, x += 4, w += 4) {
        const std::int32_t xs = simd::load4(x), ws = simd::load4(w);  // unaligned loads (allowed on Armv7E-M)
        sum = simd::dual_multiply_add(simd::even_bytes_plus(offsets, xs), simd::even_bytes(ws), sum);  // taps 0 and 2
        sum = simd::dual_multiply_add(simd::odd_bytes_plus(offsets, xs), simd::odd_bytes(ws), sum);    // 1 and 3
    }
    return sum + dot_portable(x, w, n, x_offset);
#else
    return dot_portable(x, w, n, x_offset);
#endif
}

inline void accumulate(std::int32_t* acc, int n, const std::int8_t* x, int step, std::int32_t w,
                       std::int32_t x_offset) noexcept {
    for (int i = 0; i < n; ++i, x += step) acc[i] += (*x + x_offset) * w;
}

inline void accumulate_pair(std::int32_t* acc, int n, const std::int8_t* x, const std::int8_t* y, int step,
                            std::int32_t wx, std::int32_t wy, std::int32_t x_offset) noexcept {
#if VERSATIL_FIRMWARE_DSP
    const simd::pair offsets = simd::make_pair(x_offset, x_offset);
    const simd::pair weights = simd::make_pair(wx, wy);
    for (int i = 0; i < n; ++i, x += step, y += step) {
        // bytes x, -, y, -: SXTAB16 takes bytes 0 and 2, sign-extends them and adds the offset.
        const auto both = static_cast<std::int32_t>(static_cast<std::uint8_t>(*x) | (static_cast<std::uint32_t>(static_cast<std::uint8_t>(*y)) << 16));
        acc[i] = simd::dual_multiply_add(simd::even_bytes_plus(offsets, both), weights, acc[i]);
    }
#else
    for (int i = 0; i < n; ++i, x += step, y += step) acc[i] += (*x + x_offset) * wx + (*y + x_offset) * wy;
#endif
}

}  // namespace versatil::firmware

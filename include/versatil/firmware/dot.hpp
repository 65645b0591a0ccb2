// The inner product of the int8 kernels: sum over i of (x[i] + x_offset) * w[i], in int32.
// Where the target has Arm's DSP extension (__ARM_FEATURE_DSP: Cortex-M4, M7, M33 with DSP)
// four taps go through two dual 16-bit multiply-accumulates (SMLAD) on sign-extended pairs
// (SXTB16, SXTAB16 adding the offset to both halves); otherwise, or with
// VERSATIL_FIRMWARE_PORTABLE defined, one tap at a time. Both are exact integer arithmetic
// on the same products, so their results are identical while the sum fits int32 (the code
// generator bounds the taps per output so that it does). Define the macro alike in every
// translation unit of a program (the two paths are one inline function).
#pragma once

#include <cstdint>

#if defined(__ARM_FEATURE_DSP) && !defined(VERSATIL_FIRMWARE_PORTABLE)
#include <arm_acle.h>
#define VERSATIL_FIRMWARE_DSP 1
#else
#define VERSATIL_FIRMWARE_DSP 0
#endif

namespace versatil::firmware {

inline constexpr bool dsp_path = VERSATIL_FIRMWARE_DSP != 0;

// The largest number of taps one accumulator may sum: |x + x_offset| <= 255, |w| <= 128.
inline constexpr int max_taps_per_output = 65535;

constexpr std::int32_t dot_portable(const std::int8_t* x, const std::int8_t* w, int n, std::int32_t x_offset) noexcept {
    std::int32_t sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] + x_offset) * w[i];
    return sum;
}

inline std::int32_t dot(const std::int8_t* x, const std::int8_t* w, int n, std::int32_t x_offset) noexcept {
#if VERSATIL_FIRMWARE_DSP
    // Halfword lanes (x_offset, x_offset); SXTAB16 adds a sign-extended byte to each lane.
    const auto offsets = static_cast<std::int32_t>((static_cast<std::uint32_t>(x_offset) & 0xFFFFU) |
                                                   (static_cast<std::uint32_t>(x_offset) << 16));
    std::int32_t sum = 0;
    for (; n >= 4; n -= 4, x += 4, w += 4) {
        std::int32_t xs, ws;  // four bytes each, unaligned loads (allowed on Armv7E-M)
        __builtin_memcpy(&xs, x, 4);
        __builtin_memcpy(&ws, w, 4);
        const auto x_odd = static_cast<std::int32_t>((static_cast<std::uint32_t>(xs) >> 8) | (static_cast<std::uint32_t>(xs) << 24));
        const auto w_odd = static_cast<std::int32_t>((static_cast<std::uint32_t>(ws) >> 8) | (static_cast<std::uint32_t>(ws) << 24));
        sum = __smlad(__sxtab16(offsets, xs), __sxtb16(ws), sum);        // taps 0 and 2
        sum = __smlad(__sxtab16(offsets, x_odd), __sxtb16(w_odd), sum);  // taps 1 and 3
    }
    return sum + dot_portable(x, w, n, x_offset);
#else
    return dot_portable(x, w, n, x_offset);
#endif
}

}  // namespace versatil::firmware

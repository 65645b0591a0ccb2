// The dual 16-bit arithmetic the fast kernels are written in: Armv7E-M's DSP instructions
// (SXTB16, SXTAB16, SMLAD, SMLABB, SMLATB, SADD16, QADD) where the target has them
// (__ARM_FEATURE_DSP: Cortex-M4, M7, M33 with DSP), and otherwise, or with
// VERSATIL_FIRMWARE_PORTABLE defined, the same operations spelled out in plain C++. Both are
// exact, so a kernel built on them gives the same bytes on every target; the host runs the
// kernels through the plain forms, which is how tests compare them with the reference
// kernels. A pair is a 32-bit word holding two signed halfwords (bits 0-15 and 16-31).
// Every function is forced inline: at -Os GCC would otherwise call them.
#pragma once

#include <cstdint>

#if defined(__ARM_FEATURE_DSP) && !defined(VERSATIL_FIRMWARE_PORTABLE)
#include <arm_acle.h>
#define VERSATIL_FIRMWARE_DSP 1
#else
#define VERSATIL_FIRMWARE_DSP 0
#endif

#define VERSATIL_FIRMWARE_INLINE inline __attribute__((always_inline))

// A fast kernel's body is compiled at -O2 whatever the build's level: firmware is built at
// -Os, where GCC keeps a kernel's accumulators on the stack and spends two to three times
// the instructions. The kernels are a few hundred bytes each; clang has no such attribute.
#if defined(__GNUC__) && !defined(__clang__)
#define VERSATIL_FIRMWARE_HOT __attribute__((optimize("O2")))
#else
#define VERSATIL_FIRMWARE_HOT
#endif

namespace versatil::firmware {

inline constexpr bool dsp_path = VERSATIL_FIRMWARE_DSP != 0;

namespace simd {

using pair = std::int32_t;  // two signed halfwords

VERSATIL_FIRMWARE_INLINE std::int32_t low_half(pair p) noexcept { return static_cast<std::int16_t>(p & 0xFFFF); }
VERSATIL_FIRMWARE_INLINE std::int32_t high_half(pair p) noexcept { return static_cast<std::int16_t>(static_cast<std::uint32_t>(p) >> 16); }

// (low, high) as one pair; each must fit a signed halfword.
VERSATIL_FIRMWARE_INLINE constexpr pair make_pair(std::int32_t low, std::int32_t high) noexcept {
    return static_cast<pair>((static_cast<std::uint32_t>(low) & 0xFFFFU) | (static_cast<std::uint32_t>(high) << 16));
}

// Four bytes from any address (Armv7E-M loads words unaligned; memcpy keeps GCC from
// merging two of them into an LDRD, which faults when unaligned).
VERSATIL_FIRMWARE_INLINE std::int32_t load4(const void* at) noexcept {
    std::int32_t word;
    __builtin_memcpy(&word, at, 4);
    return word;
}

VERSATIL_FIRMWARE_INLINE void store4(void* at, std::int32_t word) noexcept { __builtin_memcpy(at, &word, 4); }

// The word rotated right by one byte.
VERSATIL_FIRMWARE_INLINE std::int32_t rotate_byte(std::int32_t word) noexcept {
    return static_cast<std::int32_t>((static_cast<std::uint32_t>(word) >> 8) | (static_cast<std::uint32_t>(word) << 24));
}

#if VERSATIL_FIRMWARE_DSP
// Bytes 0 and 2 sign-extended: (b0, b2).
VERSATIL_FIRMWARE_INLINE pair even_bytes(std::int32_t word) noexcept { return __sxtb16(word); }
// Bytes 1 and 3 sign-extended: (b1, b3).
// GCC 12 does not fold the rotation into the instruction's ROR #8 (one instruction more a
// call): spelled out.
VERSATIL_FIRMWARE_INLINE pair odd_bytes(std::int32_t word) noexcept {
    pair result;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(result) : "r"(word));
    return result;
}
// (b0 + offset.low, b2 + offset.high) and (b1 + ..., b3 + ...): SXTAB16.
VERSATIL_FIRMWARE_INLINE pair even_bytes_plus(pair offsets, std::int32_t word) noexcept { return __sxtab16(offsets, word); }
VERSATIL_FIRMWARE_INLINE pair odd_bytes_plus(pair offsets, std::int32_t word) noexcept {
    pair result;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(result) : "r"(offsets), "r"(word));
    return result;
}
// acc + a.low * b.low + a.high * b.high (SMLAD).
VERSATIL_FIRMWARE_INLINE std::int32_t dual_multiply_add(pair a, pair b, std::int32_t acc) noexcept { return __smlad(a, b, acc); }
// acc + a.low * b.low (SMLABB) and acc + a.high * b.low (SMLATB).
VERSATIL_FIRMWARE_INLINE std::int32_t multiply_add_low(pair a, pair b, std::int32_t acc) noexcept { return __smlabb(a, b, acc); }
VERSATIL_FIRMWARE_INLINE std::int32_t multiply_add_high_low(pair a, pair b, std::int32_t acc) noexcept { return __smlatb(a, b, acc); }
// a + b saturated to int32 (QADD).
VERSATIL_FIRMWARE_INLINE std::int32_t saturating_add(std::int32_t a, std::int32_t b) noexcept { return __qadd(a, b); }
// Halfword by halfword a + b, each wrapping to 16 bits (SADD16).
VERSATIL_FIRMWARE_INLINE pair add_pairs(pair a, pair b) noexcept { return static_cast<pair>(__sadd16(a, b)); }
#else
VERSATIL_FIRMWARE_INLINE pair even_bytes(std::int32_t word) noexcept {
    return make_pair(static_cast<std::int8_t>(word & 0xFF), static_cast<std::int8_t>((static_cast<std::uint32_t>(word) >> 16) & 0xFF));
}
VERSATIL_FIRMWARE_INLINE pair odd_bytes(std::int32_t word) noexcept { return even_bytes(rotate_byte(word)); }
VERSATIL_FIRMWARE_INLINE pair even_bytes_plus(pair offsets, std::int32_t word) noexcept {
    const pair bytes = even_bytes(word);  // each half wraps to 16 bits, as SXTAB16's adds do
    return make_pair(low_half(offsets) + low_half(bytes), high_half(offsets) + high_half(bytes));
}
VERSATIL_FIRMWARE_INLINE pair odd_bytes_plus(pair offsets, std::int32_t word) noexcept {
    return even_bytes_plus(offsets, rotate_byte(word));
}
// In unsigned arithmetic: SMLAD wraps modulo 2^32 (it only sets the Q flag).
VERSATIL_FIRMWARE_INLINE std::int32_t dual_multiply_add(pair a, pair b, std::int32_t acc) noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(acc) + static_cast<std::uint32_t>(low_half(a) * low_half(b)) +
                                     static_cast<std::uint32_t>(high_half(a) * high_half(b)));
}
VERSATIL_FIRMWARE_INLINE std::int32_t multiply_add_low(pair a, pair b, std::int32_t acc) noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(acc) + static_cast<std::uint32_t>(low_half(a) * low_half(b)));
}
VERSATIL_FIRMWARE_INLINE std::int32_t multiply_add_high_low(pair a, pair b, std::int32_t acc) noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(acc) + static_cast<std::uint32_t>(high_half(a) * low_half(b)));
}
VERSATIL_FIRMWARE_INLINE pair add_pairs(pair a, pair b) noexcept {
    return make_pair(low_half(a) + low_half(b), high_half(a) + high_half(b));
}
VERSATIL_FIRMWARE_INLINE std::int32_t saturating_add(std::int32_t a, std::int32_t b) noexcept {
    std::int32_t sum;
    if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? 2147483647 : -2147483647 - 1;
    return sum;
}
#endif

}  // namespace simd
}  // namespace versatil::firmware

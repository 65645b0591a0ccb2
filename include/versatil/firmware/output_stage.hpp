// The last step of every int8 kernel: an int32 accumulator plus its bias, rescaled by a
// fixed-point multiplier with one rounding (math/requantize.hpp, TFLite Micro's single rounding),
// moved to the output zero point and clamped to the activation range. A relu, relu6 or
// hardtanh after the op is folded into that range by the code generator.
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/firmware/simd.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

// Output levels kept, both ends included: [-128, 127] for no activation.
struct activation_range {
    std::int32_t min = -128, max = 127;

    friend constexpr bool operator==(const activation_range&, const activation_range&) = default;
};

constexpr std::int8_t clamp_to(std::int32_t level, activation_range range) noexcept {
    return static_cast<std::int8_t>(level < range.min ? range.min : (level > range.max ? range.max : level));
}

// accumulator * multiplier rounded once (math::multiply_by_quantized_multiplier_single_rounding,
// TFLite Micro's TFLITE_SINGLE_ROUNDING and CMSIS-NN's CMSIS_NN_USE_SINGLE_ROUNDING). Not
// TFLite's reference double rounding (a doubling high multiply, then a rounding shift): its
// two roundings put a layer up to 0.75 of a level off the real product, and over a network
// those 1-level differences from LibTorch's engine (QNNPACK rounds once) add up to 2 levels.
constexpr std::int32_t rescale(std::int32_t accumulator, math::fixed_point_multiplier m) noexcept {
    return math::multiply_by_quantized_multiplier_single_rounding(accumulator, m);
}

// A rescaled value plus the output zero point (|offset| <= 255), clamped to the range: the
// value is first held within +-2^16, which changes nothing after the int8 clamp and keeps
// the sum in 32 bits.
constexpr std::int8_t to_output(std::int32_t rescaled, std::int32_t output_offset, activation_range range) noexcept {
    constexpr std::int32_t bound = 1 << 16;
    const std::int32_t held = rescaled < -bound ? -bound : (rescaled > bound ? bound : rescaled);
    return clamp_to(held + output_offset, range);
}

// accumulator + bias saturates at the int32 limits (a bias rounded from a tiny weight scale
// can sit near them), then requantizes.
constexpr std::int8_t requantize_output(std::int32_t accumulator, std::int32_t bias, math::fixed_point_multiplier m,
                                        std::int32_t output_offset, activation_range range) noexcept {
    std::int32_t biased = 0;
    if (__builtin_add_overflow(accumulator, bias, &biased))
        biased = bias > 0 ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<std::int32_t>::min();
    return to_output(rescale(biased, m), output_offset, range);
}

// requantize_output's result for every input, in the instructions a 32-bit core has (the fast
// kernels' output stage): QADD for the saturating bias; for a shift of -2 or less (every
// multiplier below 0.25, as a convolution's nearly always is) the high word of the 64-bit
// product (SMULL) shifted to one bit more than wanted, plus one, halved: one rounding, half
// up, as (product + 2^(n-1)) >> n; otherwise the 64-bit form. SSAT #17 holds the value, which
// after the output offset and the int8 range agrees with to_output's +-2^16 hold.
VERSATIL_FIRMWARE_INLINE std::int8_t requantize_output_32bit(std::int32_t accumulator, std::int32_t bias,
                                                            math::fixed_point_multiplier m, std::int32_t output_offset,
                                                            activation_range range) noexcept {
    const std::int64_t product = std::int64_t{simd::saturating_add(accumulator, bias)} * m.multiplier;
    std::int32_t rescaled;
    if (m.shift <= -2) {
        const auto high = static_cast<std::int32_t>(product >> 32);  // |product| < 2^62: high + 1 cannot overflow
        rescaled = ((high >> (-m.shift - 2)) + 1) >> 1;
    } else {
        const std::int64_t rounded = (product + (std::int64_t{1} << (30 - m.shift))) >> (31 - m.shift);
        constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
        rescaled = static_cast<std::int32_t>(rounded < lo ? lo : (rounded > hi ? hi : rounded));
    }
    return clamp_to(simd::saturate17(rescaled) + output_offset, range);
}

// One output channel's stage, prepared once for the many outputs a fast kernel writes with
// it. With a shift of -2 or less, requantize_output_32bit's ((high >> right) + 1) >> 1 plus
// the output offset is ((high >> right) + 1 + 2 * offset) >> 1 (an even number added before
// halving), and the value then needs no hold before the int8 range: |high >> right| < 2^30.
// Five instructions and the clamp, against nine.
struct prepared_output {
    std::int32_t bias = 0;
    math::fixed_point_multiplier m;
    int right = -1;                   // -shift - 2, or -1: requantize_output_32bit's general path
    std::int32_t round_and_offset = 0;  // 1 + 2 * output offset
};

VERSATIL_FIRMWARE_INLINE prepared_output prepare_output(std::int32_t bias, math::fixed_point_multiplier m,
                                                        std::int32_t output_offset) noexcept {
    return {bias, m, m.shift <= -2 ? -m.shift - 2 : -1, 1 + 2 * output_offset};
}

// requantize_output(accumulator, bias, m, output_offset, range) for the prepared channel.
VERSATIL_FIRMWARE_INLINE std::int8_t requantize_prepared(std::int32_t accumulator, const prepared_output& c,
                                                         std::int32_t output_offset, activation_range range) noexcept {
    if (c.right < 0) return requantize_output_32bit(accumulator, c.bias, c.m, output_offset, range);
    const std::int64_t product = std::int64_t{simd::saturating_add(accumulator, c.bias)} * c.m.multiplier;
    const auto high = static_cast<std::int32_t>(product >> 32);
    return clamp_to(((high >> c.right) + c.round_and_offset) >> 1, range);
}

}  // namespace versatil::firmware

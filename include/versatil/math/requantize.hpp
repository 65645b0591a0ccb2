// Integer-only requantization (gemmlowp / TFLite): a real multiplier such as
// input_scale * weight_scale / output_scale becomes a Q31 fixed-point multiplier and a
// power-of-two shift, so an int32 accumulator is rescaled without floating point.
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/math/rounding.hpp"

namespace versatil::math {

// real ≈ multiplier * 2^(shift - 31), multiplier in [2^30, 2^31) unless real is 0.
struct fixed_point_multiplier {
    std::int32_t multiplier = 0;
    int shift = 0;

    friend constexpr bool operator==(const fixed_point_multiplier&, const fixed_point_multiplier&) = default;
};

struct mantissa_exponent {
    double mantissa;  // in [0.5, 1) in magnitude
    int exponent;
};

// std::frexp, constexpr (scaling by two is exact for normal doubles).
constexpr mantissa_exponent split_power_of_two(double value) noexcept {
    if (value == 0.0 || is_nan(value)) return {value, 0};
    const bool negative = value < 0.0;
    double magnitude = negative ? -value : value;
    int exponent = 0;
    while (magnitude >= 1.0) {
        magnitude *= 0.5;
        ++exponent;
    }
    while (magnitude < 0.5) {
        magnitude *= 2.0;
        --exponent;
    }
    return {negative ? -magnitude : magnitude, exponent};
}

// TFLite's QuantizeMultiplier, with the out-of-range cases made explicit: multipliers
// below 2^-31 flush to zero, multipliers of 2^30 and above saturate.
constexpr fixed_point_multiplier quantize_multiplier(double real_multiplier) noexcept {
    if (real_multiplier == 0.0 || is_nan(real_multiplier)) return {0, 0};
    auto [mantissa, shift] = split_power_of_two(real_multiplier);
    constexpr double q31_one = 2147483648.0;  // 2^31
    auto fixed = static_cast<std::int64_t>(round_half_away(mantissa * q31_one));
    if (fixed == (std::int64_t{1} << 31)) {
        fixed /= 2;
        ++shift;
    }
    if (shift < -31) return {0, 0};
    if (shift > 30) return {fixed < 0 ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<std::int32_t>::max(), 30};
    return {static_cast<std::int32_t>(fixed), shift};
}

// gemmlowp's SaturatingRoundingDoublingHighMul: round(a * b / 2^31), saturating the one
// overflowing case (INT32_MIN * INT32_MIN).
constexpr std::int32_t saturating_rounding_doubling_high_mul(std::int32_t a, std::int32_t b) noexcept {
    if (a == b && a == std::numeric_limits<std::int32_t>::min()) return std::numeric_limits<std::int32_t>::max();
    const std::int64_t product = std::int64_t{a} * std::int64_t{b};
    const std::int64_t nudge = product >= 0 ? (std::int64_t{1} << 30) : (1 - (std::int64_t{1} << 30));
    return static_cast<std::int32_t>((product + nudge) / (std::int64_t{1} << 31));
}

// gemmlowp's RoundingDivideByPOT: x / 2^exponent rounded half away from zero. In 32 bits, as
// gemmlowp computes it, so a 32-bit microcontroller runs it without 64-bit arithmetic.
constexpr std::int32_t rounding_divide_by_power_of_two(std::int32_t x, int exponent) noexcept {
    if (exponent <= 0) return x;
    if (exponent > 31) exponent = 31;
    const std::uint32_t mask = (std::uint32_t{1} << exponent) - 1U;
    const std::uint32_t remainder = static_cast<std::uint32_t>(x) & mask;
    const std::uint32_t threshold = (mask >> 1) + (x < 0 ? 1U : 0U);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

// x * real_multiplier in integer arithmetic (TFLite's reference MultiplyByQuantizedMultiplier,
// double rounding; the firmware runtime uses the single-rounding form below). For
// multipliers below one it rounds twice exactly as TFLite does; for multipliers of one and
// above TFLite shifts x left first and can overflow, so the product is formed in 64 bits,
// rounded once (the same value whenever TFLite's does not overflow) and saturated.
constexpr std::int32_t multiply_by_quantized_multiplier(std::int32_t x, fixed_point_multiplier m) noexcept {
    if (m.shift <= 0)
        return rounding_divide_by_power_of_two(saturating_rounding_doubling_high_mul(x, m.multiplier), -m.shift);
    const std::int64_t product = std::int64_t{x} * m.multiplier;  // |product| < 2^62
    const int exponent = 31 - m.shift;                             // 1..30
    const std::int64_t half = std::int64_t{1} << (exponent - 1);
    // (product + nudge) / 2^exponent, truncating toward zero, with shifts: a division by a
    // variable power of two would be a library call (__aeabi_ldivmod) on a 32-bit target.
    const std::int64_t nudged = product + (product >= 0 ? half : 1 - half);
    const std::int64_t floor = nudged >> exponent;
    const std::int64_t rounded = floor + (nudged < 0 && (nudged & ((half << 1) - 1)) != 0 ? 1 : 0);
    constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
    return static_cast<std::int32_t>(rounded < lo ? lo : (rounded > hi ? hi : rounded));
}

// x * real_multiplier rounded once: TFLite Micro's MultiplyByQuantizedMultiplier under
// TFLITE_SINGLE_ROUNDING, CMSIS-NN's arm_nn_requantize under CMSIS_NN_USE_SINGLE_ROUNDING.
// The 64-bit product x * multiplier is divided by 2^(31 - shift) with one rounding, half
// toward +infinity ((product + 2^(total_shift - 1)) >> total_shift, an arithmetic shift),
// and saturated to int32. It is the exact rational x * multiplier * 2^(shift - 31) rounded
// to the nearest integer, so it is off the real product by at most half a level plus the
// Q31 multiplier's own error, where multiply_by_quantized_multiplier's two roundings reach
// 0.75 of a level. Engines that rescale in float (QNNPACK) also round once, so a runtime
// on this arithmetic stays within one level of them end to end. The firmware runtime uses
// it (firmware/output_stage.hpp). Requires shift in [-31, 30], the range
// quantize_multiplier produces; 64-bit multiply, add and shift only, no division, so a
// 32-bit microcontroller runs it without a library call.
constexpr std::int32_t multiply_by_quantized_multiplier_single_rounding(std::int32_t x, fixed_point_multiplier m) noexcept {
    const int total_shift = 31 - m.shift;  // 1..62
    const std::int64_t round = std::int64_t{1} << (total_shift - 1);
    // |x * multiplier| <= 2^62 and round <= 2^61: no overflow.
    const std::int64_t rounded = (std::int64_t{x} * m.multiplier + round) >> total_shift;
    constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
    return static_cast<std::int32_t>(rounded < lo ? lo : (rounded > hi ? hi : rounded));
}

// An int32 accumulator to the output's quantized level as the firmware runtime computes it:
// rescale with one rounding, add the output zero point, clamp to the output range.
constexpr std::int32_t requantize(std::int32_t accumulator, fixed_point_multiplier m, std::int32_t output_zero_point,
                                  std::int32_t quant_min, std::int32_t quant_max) noexcept {
    const std::int64_t level = std::int64_t{multiply_by_quantized_multiplier_single_rounding(accumulator, m)} + output_zero_point;
    return static_cast<std::int32_t>(level < quant_min ? quant_min : (level > quant_max ? quant_max : level));
}

}  // namespace versatil::math

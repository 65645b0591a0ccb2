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

// One output channel's stage, prepared once for the many outputs a fast kernel writes with
// it, for multipliers below 0.25 (a shift of -2 or less: what a convolution's or a linear
// layer's input_scale * weight_scale / output_scale nearly always is; the code generator
// keeps the reference kernel for a layer with a larger one, see prepared_output_applies).
// Then requantize_output's 64-bit product rounded once, (product + 2^(n-1)) >> n with
// n = 31 - shift >= 33, is the product's high word (SMULL) shifted to one bit more than
// wanted, plus one, halved; and the output offset joins before the halving as an even
// number, ((high >> right) + 1 + 2 * offset) >> 1. The value needs no hold before the int8
// range (|high >> right| < 2^30). Five instructions and the clamp, where the reference
// output stage spends about twenty.
struct prepared_output {
    std::int32_t bias = 0, multiplier = 0;
    int right = 0;                      // -shift - 2
    std::int32_t round_and_offset = 0;  // 1 + 2 * output offset
};

// Every multiplier of a layer can be prepared.
constexpr bool prepared_output_applies(const math::fixed_point_multiplier* multipliers, int channels) noexcept {
    for (int c = 0; c < channels; ++c)
        if (multipliers[c].shift > -2 || multipliers[c].shift < -31) return false;
    return true;
}

VERSATIL_FIRMWARE_INLINE prepared_output prepare_output(std::int32_t bias, math::fixed_point_multiplier m,
                                                        std::int32_t output_offset) noexcept {
    return {bias, m.multiplier, -m.shift - 2, 1 + 2 * output_offset};
}

// requantize_output(accumulator, bias, m, output_offset, range) for the prepared channel.
VERSATIL_FIRMWARE_INLINE std::int8_t requantize_prepared(std::int32_t accumulator, const prepared_output& c,
                                                         activation_range range) noexcept {
    const std::int64_t product = std::int64_t{simd::saturating_add(accumulator, c.bias)} * c.multiplier;
    const auto high = static_cast<std::int32_t>(product >> 32);  // |product| < 2^62: no overflow below
    return clamp_to(((high >> c.right) + c.round_and_offset) >> 1, range);
}

}  // namespace versatil::firmware

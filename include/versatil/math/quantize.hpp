// Affine quantization of one value and back, as ATen's quantize_val does it:
// q = clamp(zero_point + nearbyint(x * (1 / scale)), quant_min, quant_max).
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/math/qparams.hpp"
#include "versatil/math/rounding.hpp"

namespace versatil::math {

constexpr std::int32_t quantize(float value, quantization_params params, quant_range range) noexcept {
    if (is_nan(value)) return params.zero_point < range.min ? range.min
                              : (params.zero_point > range.max ? range.max : params.zero_point);
    const float inverse_scale = 1.0F / params.scale;
    // The product of two floats is exact in double; rounded to float it is ATen's float
    // product, unless that would overflow float (undefined, and rejected in constant
    // expressions): then the exact value, which clamps below all the same.
    const double exact = static_cast<double>(value) * static_cast<double>(inverse_scale);
    constexpr double largest = std::numeric_limits<float>::max();
    const double product = exact > largest || exact < -largest ? exact : static_cast<double>(static_cast<float>(exact));
    // Clamp before converting: a float beyond int64 would make the cast undefined.
    const double level = params.zero_point + round_half_even(product);
    if (level <= range.min) return range.min;
    if (level >= range.max) return range.max;
    return static_cast<std::int32_t>(level);
}

constexpr float dequantize(std::int32_t level, quantization_params params) noexcept {
    return static_cast<float>(level - params.zero_point) * params.scale;
}

// The value a quantize-dequantize round trip gives (what fake-quantize computes).
constexpr float fake_quantize(float value, quantization_params params, quant_range range) noexcept {
    return dequantize(quantize(value, params, range), params);
}

}  // namespace versatil::math

// Scale and zero point from an observed range, as PyTorch's observers compute them
// (ObserverBase._calculate_qparams): the range always includes 0, symmetric schemes centre
// it, the scale never drops below eps. Computed in float32 like PyTorch, except that a
// range too large for float32 gives the largest finite scale instead of infinity.
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/core/quantization_spec.hpp"
#include "versatil/math/rounding.hpp"

namespace versatil::math {

struct quantization_params {
    float scale = 1.0F;
    std::int32_t zero_point = 0;

    friend constexpr bool operator==(const quantization_params&, const quantization_params&) = default;
};

struct quant_range {
    std::int32_t min;
    std::int32_t max;

    friend constexpr bool operator==(const quant_range&, const quant_range&) = default;
};

// max - min in 64 bits: a 32-bit destination's range (a bias's, up to 2^32 - 1 wide) does
// not fit the int32 it is stored in.
constexpr std::int64_t level_span(quant_range range) noexcept { return std::int64_t{range.max} - range.min; }

// reduce_range drops one bit, as PyTorch does for customised ranges (quant_min // 2,
// quant_max // 2): 0..255 becomes 0..127, -128..127 becomes -64..63.
constexpr quant_range effective_range(std::int32_t quant_min, std::int32_t quant_max, bool reduce_range) noexcept {
    if (!reduce_range) return {quant_min, quant_max};
    return {static_cast<std::int32_t>(floor_div(quant_min, 2)), static_cast<std::int32_t>(floor_div(quant_max, 2))};
}

constexpr quantization_params choose_qparams(float min_val, float max_val, quant_range range, bool symmetric,
                                             bool unsigned_dtype, float eps = default_eps) noexcept {
    // Nothing observed (min > max) or a NaN: PyTorch's fallback of scale 1, zero point 0.
    if (is_nan(min_val) || is_nan(max_val) || min_val > max_val) return {1.0F, 0};
    const float min_neg = min_val < 0.0F ? min_val : 0.0F;
    const float max_pos = max_val > 0.0F ? max_val : 0.0F;
    constexpr double largest = std::numeric_limits<float>::max();
    const auto finite_scale = [eps](double scale) {
        const float clamped = static_cast<float>(scale > largest ? largest : scale);
        return clamped > eps ? clamped : eps;
    };

    if (symmetric) {
        const float bound = -min_neg > max_pos ? -min_neg : max_pos;
        const float half_levels = static_cast<float>(level_span(range)) / 2.0F;
        const float scale = finite_scale(static_cast<double>(bound) / static_cast<double>(half_levels));
        const std::int32_t zero_point =
            unsigned_dtype ? static_cast<std::int32_t>(floor_div(std::int64_t{range.min} + range.max, 2)) : 0;
        return {scale, zero_point};
    }

    const float levels = static_cast<float>(level_span(range));
    // The difference in double: for ranges near float's limits it would overflow in float.
    const double width = static_cast<double>(max_pos) - static_cast<double>(min_neg);
    const double width_f = width > largest ? width : static_cast<double>(static_cast<float>(width));
    const float scale = finite_scale(width_f / static_cast<double>(levels));
    const double shifted = range.min - round_half_even(static_cast<double>(static_cast<float>(min_neg / scale)));
    const double clamped = shifted < range.min ? range.min : (shifted > range.max ? range.max : shifted);
    return {scale, static_cast<std::int32_t>(clamped)};
}

// The same for a spec (its range, scheme and eps), honouring reduce_range.
constexpr quantization_params choose_qparams(float min_val, float max_val, const quantization_spec& spec,
                                             bool reduce_range = false) noexcept {
    return choose_qparams(min_val, max_val, effective_range(spec.quant_min, spec.quant_max, reduce_range),
                          is_symmetric(spec.qscheme), spec.dtype == dtype::uint8, spec.eps);
}

}  // namespace versatil::math

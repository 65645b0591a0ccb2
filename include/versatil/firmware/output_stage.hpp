// The last step of every int8 kernel: an int32 accumulator plus its bias, rescaled by a
// fixed-point multiplier (math/requantize.hpp, TFLite's MultiplyByQuantizedMultiplier),
// moved to the output zero point and clamped to the activation range. A relu, relu6 or
// hardtanh after the op is folded into that range by the code generator.
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

// Output levels kept, both ends included: [-128, 127] for no activation.
struct activation_range {
    std::int32_t min = -128, max = 127;

    friend constexpr bool operator==(const activation_range&, const activation_range&) = default;
};

constexpr std::int8_t clamp_to(std::int64_t level, activation_range range) noexcept {
    return static_cast<std::int8_t>(level < range.min ? range.min : (level > range.max ? range.max : level));
}

// accumulator + bias saturates at the int32 limits (a bias rounded from a tiny weight scale
// can sit near them), then requantizes.
constexpr std::int8_t requantize_output(std::int32_t accumulator, std::int32_t bias, math::fixed_point_multiplier m,
                                        std::int32_t output_offset, activation_range range) noexcept {
    constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
    const std::int64_t sum = std::int64_t{accumulator} + bias;
    const auto biased = static_cast<std::int32_t>(sum < lo ? lo : (sum > hi ? hi : sum));
    return clamp_to(std::int64_t{math::multiply_by_quantized_multiplier(biased, m)} + output_offset, range);
}

}  // namespace versatil::firmware

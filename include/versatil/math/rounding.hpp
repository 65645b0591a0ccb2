// constexpr rounding that matches the run-time functions the kernels use: std::nearbyint
// (half to even, the default rounding mode) and std::round (half away from zero).
#pragma once

#include <cstdint>

namespace versatil::math {

inline constexpr double two_to_52 = 4503599627370496.0;  // above this every double is integral

constexpr bool is_nan(double x) noexcept { return x != x; }

constexpr double truncate(double x) noexcept {
    if (is_nan(x) || x >= two_to_52 || x <= -two_to_52) return x;
    return static_cast<double>(static_cast<std::int64_t>(x));
}

// Round half to even, as std::nearbyint and torch.round do.
constexpr double round_half_even(double x) noexcept {
    const double whole = truncate(x);
    if (whole == x) return x;
    const double fraction = x - whole;
    const bool odd = static_cast<std::int64_t>(whole) % 2 != 0;
    if (fraction > 0.5 || (fraction == 0.5 && odd)) return whole + 1.0;
    if (fraction < -0.5 || (fraction == -0.5 && odd)) return whole - 1.0;
    return whole;
}

// Round half away from zero, as std::round (TFLite's TfLiteRound) does.
constexpr double round_half_away(double x) noexcept {
    const double whole = truncate(x);
    if (whole == x) return x;
    const double fraction = x - whole;
    if (fraction >= 0.5) return whole + 1.0;
    if (fraction <= -0.5) return whole - 1.0;
    return whole;
}

// Python's floor division for the small integers of quantization ranges.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
    const std::int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace versatil::math

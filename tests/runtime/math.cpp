// The constexpr math against straightforward run-time references over many values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "versatil/math/qparams.hpp"
#include "versatil/math/quantize.hpp"
#include "versatil/math/requantize.hpp"

using namespace versatil::math;

TEST_CASE("quantize matches ATen's quantize_val reference (nearbyint, then clamp)") {
    std::mt19937 random(7);
    std::uniform_real_distribution<float> value(-10.0F, 10.0F), scale(1e-3F, 0.5F);
    std::uniform_int_distribution<int> zero_point(-128, 127);
    const quant_range range{-128, 127};
    for (int i = 0; i < 20000; ++i) {
        const quantization_params params{scale(random), zero_point(random)};
        const float x = value(random);
        const float inverse = 1.0F / params.scale;
        const auto reference = static_cast<std::int32_t>(std::clamp<std::int64_t>(
            params.zero_point + static_cast<std::int64_t>(std::nearbyint(x * inverse)), range.min, range.max));
        REQUIRE(quantize(x, params, range) == reference);
    }
}

TEST_CASE("a quantize-dequantize round trip is within half a step inside the range") {
    std::mt19937 random(11);
    std::uniform_real_distribution<float> low(-50.0F, 0.0F), high(0.0F, 50.0F), unit(0.0F, 1.0F);
    for (int i = 0; i < 5000; ++i) {
        const float min = low(random), max = high(random);
        const quantization_params params = choose_qparams(min, max, {0, 255}, false, true);
        const float x = min + (max - min) * unit(random);
        CHECK(std::abs(fake_quantize(x, params, {0, 255}) - x) <= params.scale * 0.5F + 1e-5F);
    }
}

TEST_CASE("affine qparams represent zero exactly and cover the observed range") {
    std::mt19937 random(3);
    std::uniform_real_distribution<float> low(-100.0F, 1.0F), width(0.0F, 200.0F);
    for (int i = 0; i < 5000; ++i) {
        const float min = low(random), max = min + width(random);
        for (const quant_range range : {quant_range{0, 255}, quant_range{-128, 127}, quant_range{0, 127}}) {
            const quantization_params p = choose_qparams(min, max, range, false, range.min == 0);
            REQUIRE(p.zero_point >= range.min);
            REQUIRE(p.zero_point <= range.max);
            CHECK(dequantize(quantize(0.0F, p, range), p) == 0.0F);
            CHECK(std::isfinite(p.scale));
            CHECK(p.scale >= versatil::default_eps);
        }
    }
}

TEST_CASE(
    "fixed-point requantization, rounded twice or once, is off the real product by no more than its roundings allow") {
    std::mt19937 random(5);
    // Log-uniform multipliers from 2^-20 to 8: every shift from -20 to 3, both code paths.
    std::uniform_real_distribution<double> log2_multiplier(-20.0, 3.0);
    std::uniform_int_distribution<std::int32_t> accumulator(-(1 << 22), 1 << 22);
    double worst_margin = 1.0, worst_single_margin = 1.0;
    for (int i = 0; i < 20000; ++i) {
        const double real = std::exp2(log2_multiplier(random));
        const std::int32_t x = accumulator(random);
        const fixed_point_multiplier fixed = quantize_multiplier(real);
        const double exact = static_cast<double>(x) * real;
        // The bound correct code meets, term by term: the final rounding to an integer (half a
        // level); for shift < 0, TFLite's first rounding (of x * multiplier / 2^31) is half a unit
        // of 2^shift levels; the Q31 multiplier is within 2^-31 of the real one relative to it.
        // A single correct rounding gives 0.5 (plus the tiny third term), TFLite's double rounding
        // up to 0.75 at shift -1; an off-by-one or a wrong rounding direction exceeds it.
        const double bound =
            0.5 + (fixed.shift < 0 ? std::ldexp(0.5, fixed.shift) : 0.0) + std::abs(exact) * 0x1p-31 + 1e-9;
        const double error = std::abs(multiply_by_quantized_multiplier(x, fixed) - exact);
        REQUIRE(error <= bound);
        worst_margin = std::min(worst_margin, bound - error);
        // Single rounding (the firmware runtime's): half a level plus the multiplier's error, at every shift.
        const double single_bound = 0.5 + std::abs(exact) * 0x1p-31 + 1e-9;
        const double single_error = std::abs(multiply_by_quantized_multiplier_single_rounding(x, fixed) - exact);
        REQUIRE(single_error <= single_bound);
        worst_single_margin = std::min(worst_single_margin, single_bound - single_error);
    }
    // The bounds are reached, not just respected: the closest case comes within 0.001 of each
    // (measured: 7e-5 for the double rounding), so they are not looser than the arithmetic.
    CHECK(worst_margin < 1e-3);
    CHECK(worst_single_margin < 1e-3);
}

TEST_CASE("single-rounding requantization is the exact rational product rounded once") {
    // The reference: x * multiplier / 2^(31 - shift) as a quotient and a remainder (floor
    // division), rounded up when the remainder is half the divisor or more, saturated.
    const auto exact_rounding = [](std::int32_t x, fixed_point_multiplier m) {
        const std::int64_t product = std::int64_t{x} * m.multiplier;
        const std::int64_t divisor = std::int64_t{1} << (31 - m.shift);
        std::int64_t quotient = product / divisor, remainder = product % divisor;
        if (remainder < 0) {
            --quotient;
            remainder += divisor;
        }
        const std::int64_t rounded = quotient + (2 * remainder >= divisor ? 1 : 0);
        return static_cast<std::int32_t>(std::clamp<std::int64_t>(rounded, INT32_MIN, INT32_MAX));
    };
    std::mt19937 random(6);
    std::vector<std::int32_t> values{0, 1, -1, 2, -2, 3, -3, INT32_MAX, INT32_MIN, INT32_MIN + 1, 1 << 30, -(1 << 30)};
    for (int i = 0; i < 4000; ++i) values.push_back(static_cast<std::int32_t>(random()) >> (random() % 31));
    const std::int32_t edges[] = {0, 1, -1, 1 << 30, INT32_MAX, INT32_MIN, -(1 << 30)};
    for (std::int32_t x : values)
        for (int shift = -31; shift <= 30; ++shift) {
            const auto normalised = static_cast<std::int32_t>((1U << 30) + (random() >> 2));  // [2^30, 2^31)
            for (std::int32_t multiplier : {edges[random() % 7], normalised, -normalised})
                REQUIRE(multiply_by_quantized_multiplier_single_rounding(x, {multiplier, shift}) ==
                        exact_rounding(x, {multiplier, shift}));
        }
}

TEST_CASE("requantization saturates instead of overflowing") {
    const fixed_point_multiplier big = quantize_multiplier(1000.0);
    CHECK(multiply_by_quantized_multiplier(std::numeric_limits<std::int32_t>::max(), big) ==
          std::numeric_limits<std::int32_t>::max());
    CHECK(multiply_by_quantized_multiplier(std::numeric_limits<std::int32_t>::min(), big) ==
          std::numeric_limits<std::int32_t>::min());
    CHECK(requantize(std::numeric_limits<std::int32_t>::max(), quantize_multiplier(0.5), 0, -128, 127) == 127);
}

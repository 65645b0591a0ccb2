// Quantization math against values worked out by hand and from PyTorch's formulas.
#include <cstdint>

#include "versatil/core/quantization_spec.hpp"
#include "versatil/math/qparams.hpp"
#include "versatil/math/quantize.hpp"
#include "versatil/math/requantize.hpp"
#include "versatil/math/rounding.hpp"

namespace {
using namespace versatil;
using namespace versatil::math;

// Rounding.
static_assert(round_half_even(0.5) == 0.0 && round_half_even(1.5) == 2.0 && round_half_even(2.5) == 2.0);
static_assert(round_half_even(-0.5) == 0.0 && round_half_even(-1.5) == -2.0 && round_half_even(-2.4) == -2.0);
static_assert(round_half_away(0.5) == 1.0 && round_half_away(-2.5) == -3.0 && round_half_away(2.4) == 2.0);
static_assert(floor_div(-127, 2) == -64 && floor_div(255, 2) == 127 && floor_div(-128, 2) == -64);

// Ranges.
static_assert(effective_range(0, 255, true) == quant_range{0, 127});
static_assert(effective_range(-128, 127, true) == quant_range{-64, 63});
static_assert(effective_range(-127, 127, false) == quant_range{-127, 127});

constexpr quant_range u8{0, 255}, s8{-128, 127}, s8_symmetric{-127, 127};

// Affine uint8 over [-1, 3]: scale 4/255, zero point 0 - round(-1 / scale) = round(63.75) = 64.
constexpr quantization_params affine = choose_qparams(-1.0F, 3.0F, u8, false, true);
static_assert(affine.scale == 4.0F / 255.0F && affine.zero_point == 64);
// The range always includes zero: [2, 6] is taken as [0, 6].
static_assert(choose_qparams(2.0F, 6.0F, u8, false, true) == quantization_params{6.0F / 255.0F, 0});
static_assert(choose_qparams(-6.0F, -2.0F, u8, false, true) == quantization_params{6.0F / 255.0F, 255});
// int8 affine over [-1, 1]: scale 2/255; in float32, as PyTorch computes it, -1 / scale is
// -127.49999 (not -127.5), so the zero point is -128 - round(-127.49999) = -1.
static_assert(choose_qparams(-1.0F, 1.0F, s8, false, false) == quantization_params{2.0F / 255.0F, -1});
// Symmetric int8 -127..127: scale max|x| / 127, zero point 0.
static_assert(choose_qparams(-0.5F, 2.54F, s8_symmetric, true, false) == quantization_params{2.54F / 127.0F, 0});
// Symmetric uint8 centres the zero point at (qmin + qmax) // 2.
static_assert(choose_qparams(-1.0F, 1.0F, u8, true, true) == quantization_params{1.0F / 127.5F, 127});

// Edges: min == max == 0, a constant, nothing observed, NaN, a range past float's limit.
constexpr float eps = default_eps;
static_assert(choose_qparams(0.0F, 0.0F, u8, false, true) == quantization_params{eps, 0});
static_assert(choose_qparams(0.0F, 0.0F, s8, false, false) == quantization_params{eps, -128});
static_assert(choose_qparams(0.0F, 0.0F, s8_symmetric, true, false) == quantization_params{eps, 0});
static_assert(choose_qparams(1e-30F, 1e-30F, u8, false, true).scale == eps);  // denormal-small ranges clamp to eps
static_assert(choose_qparams(3.0F, 3.0F, u8, false, true) == quantization_params{3.0F / 255.0F, 0});
static_assert(choose_qparams(1.0F, -1.0F, u8, false, true) == quantization_params{1.0F, 0});  // min > max
static_assert(choose_qparams(__builtin_nanf(""), 1.0F, u8, false, true) == quantization_params{1.0F, 0});
constexpr quantization_params huge = choose_qparams(-3.0e38F, 3.0e38F, u8, false, true);
static_assert(huge.scale > 0.0F && huge.scale <= 3.4028235e38F && huge.zero_point >= 0 && huge.zero_point <= 255);
// 32-bit destinations (a bias's range): max - min passes int32, and constant evaluation
// rejects the overflow, so these compile only if the span is taken in 64 bits.
static_assert(choose_qparams(-0x1p20F, 0x1p20F, quant_range{-(1 << 30), 1 << 30}, true, false) ==
              quantization_params{0x1p-10F, 0});
static_assert(choose_qparams(-0x1p20F, 0x1p20F, quant_range{INT32_MIN, INT32_MAX}, false, false) ==
              quantization_params{0x1p-11F, 0});

// Through a spec, honouring reduce_range.
constexpr quantization_spec x86_activation{};  // uint8 0..255 affine
static_assert(choose_qparams(0.0F, 1.0F, x86_activation, true) == quantization_params{1.0F / 127.0F, 0});
static_assert(choose_qparams(0.0F, 1.0F, x86_activation) == quantization_params{1.0F / 255.0F, 0});

// quantize / dequantize.
constexpr quantization_params p{0.1F, 10};
static_assert(quantize(0.0F, p, u8) == 10 && quantize(1.0F, p, u8) == 20 && quantize(-1.0F, p, u8) == 0);
static_assert(quantize(0.25F, p, u8) == 12);  // 2.5 rounds to even
static_assert(quantize(1e30F, p, u8) == 255 && quantize(-1e30F, p, u8) == 0);
static_assert(quantize(__builtin_inff(), p, u8) == 255 && quantize(__builtin_nanf(""), p, u8) == 10);
static_assert(dequantize(20, p) == 1.0F && dequantize(10, p) == 0.0F);
static_assert(fake_quantize(0.123F, quantization_params{0.05F, 0}, s8) == 0.1F);

// Requantization multipliers (TFLite's QuantizeMultiplier).
static_assert(quantize_multiplier(0.5) == fixed_point_multiplier{1 << 30, 0});
static_assert(quantize_multiplier(0.25) == fixed_point_multiplier{1 << 30, -1});
static_assert(quantize_multiplier(1.0) == fixed_point_multiplier{1 << 30, 1});
static_assert(quantize_multiplier(0.0) == fixed_point_multiplier{0, 0});
static_assert(quantize_multiplier(1e-12) == fixed_point_multiplier{0, 0});  // below 2^-31 flushes to zero
static_assert(quantize_multiplier(0.75) == fixed_point_multiplier{1610612736, 0});
// A multiplier whose mantissa rounds up to 1.0 renormalises.
static_assert(quantize_multiplier(0.99999999999) == fixed_point_multiplier{1 << 30, 1});
static_assert(split_power_of_two(12.0).mantissa == 0.75 && split_power_of_two(12.0).exponent == 4);

static_assert(saturating_rounding_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX);
static_assert(saturating_rounding_doubling_high_mul(1 << 30, 1 << 30) == 1 << 29);
static_assert(rounding_divide_by_power_of_two(5, 1) == 3 && rounding_divide_by_power_of_two(-5, 1) == -3);
static_assert(rounding_divide_by_power_of_two(4, 1) == 2 && rounding_divide_by_power_of_two(7, 2) == 2);
static_assert(multiply_by_quantized_multiplier(1000, quantize_multiplier(0.5)) == 500);
static_assert(multiply_by_quantized_multiplier(1000, quantize_multiplier(0.001)) == 1);
static_assert(multiply_by_quantized_multiplier(-1000, quantize_multiplier(0.25)) == -250);
static_assert(multiply_by_quantized_multiplier(1 << 30, quantize_multiplier(4.0)) == INT32_MAX);  // saturates
// Single rounding (TFLite Micro's TFLITE_SINGLE_ROUNDING): x * multiplier * 2^(shift - 31)
// rounded once, ties toward +infinity, saturated.
constexpr auto once = [](std::int32_t x, fixed_point_multiplier m) {
    return multiply_by_quantized_multiplier_single_rounding(x, m);
};
static_assert(once(1000, quantize_multiplier(0.5)) == 500 && once(-1000, quantize_multiplier(0.25)) == -250);
static_assert(once(1000, quantize_multiplier(0.001)) == 1 && once(0, quantize_multiplier(0.3)) == 0);
static_assert(once(5, quantize_multiplier(0.5)) == 3 && once(-5, quantize_multiplier(0.5)) == -2);  // ties up
// 6 * 0.375 = 2.25: one rounding gives 2; two roundings give round(round(6 * 0.75) / 2) = round(2.5) = 3.
static_assert(once(6, quantize_multiplier(0.375)) == 2 &&
              multiply_by_quantized_multiplier(6, quantize_multiplier(0.375)) == 3);
static_assert(once(1 << 30, quantize_multiplier(4.0)) == INT32_MAX &&
              once(-(1 << 30), quantize_multiplier(4.0)) == INT32_MIN);
// The ends of the shift range [-31, 30] hold the 64-bit sum without overflow.
static_assert(once(INT32_MIN, {INT32_MIN, 30}) == INT32_MAX);
static_assert(once(INT32_MAX, {INT32_MAX, -31}) == 1 && once(INT32_MIN, {INT32_MAX, -31}) == -1);
static_assert(once(0, {0, 0}) == 0 && once(INT32_MAX, {0, 0}) == 0);
static_assert(requantize(1000, quantize_multiplier(0.1), 5, -128, 127) == 105);
static_assert(requantize(100000, quantize_multiplier(0.1), 5, -128, 127) == 127);
}  // namespace

// Reliability edges: true denormals, the full float range, infinite bounds, a negative
// constant. The scale stays finite and at least eps, the zero point in range, and quantizing
// with the extreme scales divides by nothing smaller than eps.
constexpr float denorm = __FLT_DENORM_MIN__;
static_assert(choose_qparams(-denorm, denorm, u8, false, true) == quantization_params{eps, 0});
static_assert(choose_qparams(-denorm, denorm, s8_symmetric, true, false) == quantization_params{eps, 0});
constexpr quantization_params full_range = choose_qparams(-__FLT_MAX__, __FLT_MAX__, s8_symmetric, true, false);
static_assert(full_range.scale == __FLT_MAX__ / 127.0F && full_range.zero_point == 0);
// Infinite bounds: the scale saturates at FLT_MAX; min / scale is -inf, so the zero point
// clamps to the top of the range (255), and -FLT_MAX / FLT_MAX = -1 puts -FLT_MAX one level
// below it. Exact values: a range check alone holds for any uint8 result.
constexpr quantization_params infinite = choose_qparams(-__builtin_inff(), __builtin_inff(), u8, false, true);
static_assert(infinite == quantization_params{__FLT_MAX__, 255});
static_assert(choose_qparams(-3.0F, -3.0F, u8, false, true) == quantization_params{3.0F / 255.0F, 255});
static_assert(quantize(__FLT_MAX__, quantization_params{eps, 0}, s8) == 127);
static_assert(quantize(-__FLT_MAX__, infinite, u8) == 254 && quantize(denorm, quantization_params{eps, 0}, s8) == 0);

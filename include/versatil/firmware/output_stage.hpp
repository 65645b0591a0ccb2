// The last step of every int8 kernel: an int32 accumulator plus its bias, rescaled, moved to the
// output zero point and clamped to the activation range. A relu, relu6 or hardtanh after the op is
// folded into that range by the code generator.
//
// The rescale is LibTorch's engine's (QNNPACK: the accumulator converted to float, multiplied by
// the float32 requantization scale, rounded to the nearest integer, ties to even), so the runtime
// gives LibTorch's levels exactly, layer after layer (docs/firmware-kernels.md, "Rounding as
// LibTorch rounds"). The scale is the layer's fixed-point multiplier read as a float: the code
// generator derives it from QNNPACK's float32 scale, whose 24-bit mantissa it holds exactly.
// On a core with a single-precision FPU (__ARM_FP) that is VCVT, VMUL and VCVTR; elsewhere, and
// with VERSATIL_FIRMWARE_PORTABLE, the float product is rounded to an integer from its bits, so
// a core without an FPU (soft float, correctly rounded) gives the same bytes, more slowly.
// VERSATIL_FIRMWARE_INTEGER_REQUANTIZATION selects instead the integer stage of TFLite Micro
// (one rounding of the exact product, half up): faster without an FPU, but up to a level off
// LibTorch wherever QNNPACK's float product rounds onto a half, differences that grow with depth
// (MobileNetV2: 20 levels). The host runner must then be built with the same macro.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "versatil/firmware/simd.hpp"
#include "versatil/math/requantize.hpp"

#if defined(VERSATIL_FIRMWARE_INTEGER_REQUANTIZATION)
#define VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION 0
#define VERSATIL_FIRMWARE_FPU 0
#else
#define VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION 1
#if defined(__ARM_FP) && (__ARM_FP & 4) != 0 && !defined(VERSATIL_FIRMWARE_PORTABLE)
#define VERSATIL_FIRMWARE_FPU 1
#else
#define VERSATIL_FIRMWARE_FPU 0
#endif
#endif

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
// TFLite Micro's TFLITE_SINGLE_ROUNDING and CMSIS-NN's CMSIS_NN_USE_SINGLE_ROUNDING): the exact
// product, half up. Not TFLite's reference double rounding (a doubling high multiply, then a
// rounding shift), whose two roundings put a layer up to 0.75 of a level off the real product.
// The integer output stage (VERSATIL_FIRMWARE_INTEGER_REQUANTIZATION) and clamp use it.
constexpr std::int32_t rescale(std::int32_t accumulator, math::fixed_point_multiplier m) noexcept {
    return math::multiply_by_quantized_multiplier_single_rounding(accumulator, m);
}

// The real number a multiplier stands for, multiplier * 2^(shift - 31), as a float: exact when
// the multiplier has 24 significant bits or fewer (the code generator's, from QNNPACK's float32
// scale), else the nearest float. shift in [-31, 30], so the power of two is a normal float.
constexpr float requantization_scale(math::fixed_point_multiplier m) noexcept {
    const float power = std::bit_cast<float>(static_cast<std::uint32_t>(127 + m.shift - 31) << 23);
    return static_cast<float>(m.multiplier) * power;
}

// x rounded to the nearest integer, ties to even (lrintf in the default rounding mode), from the
// float's bits: no FPU and no library needed, and no addition for a compiler to fuse with the
// product before it. Magnitudes of 2^22 and above (and infinities) are held at +-2^22: beyond
// any int8 level once the output offset (|offset| <= 255) is added.
constexpr std::int32_t nearest_integer(float x) noexcept {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    const int exponent = static_cast<int>((bits >> 23) & 0xFFU) - 127;
    const bool negative = (bits >> 31) != 0;
    if (exponent < -1) return 0;  // |x| < 0.5
    if (exponent >= 22) return negative ? -(1 << 22) : (1 << 22);
    const std::uint32_t mantissa = (bits & 0x7FFFFFU) | 0x800000U;  // |x| = mantissa * 2^(exponent - 23)
    const int dropped = 23 - exponent;                               // 2..24 bits below the integer
    const std::uint32_t half = 1U << (dropped - 1), rest = mantissa & ((half << 1) - 1U);
    std::uint32_t whole = mantissa >> dropped;
    if (rest > half || (rest == half && (whole & 1U) != 0)) ++whole;
    return negative ? -static_cast<std::int32_t>(whole) : static_cast<std::int32_t>(whole);
}

// QNNPACK's rescale: (float)accumulator * scale, rounded to float, then to the nearest integer,
// ties to even. With the FPU the conversion rounds in VCVTR (round to nearest even, the reset
// mode of FPSCR); it saturates at the int32 limits, which the callers' clamps absorb.
VERSATIL_FIRMWARE_INLINE constexpr std::int32_t rescale_as_qnnpack(std::int32_t accumulator, float scale) noexcept {
    const float product = static_cast<float>(accumulator) * scale;
#if VERSATIL_FIRMWARE_FPU
    if (!std::is_constant_evaluated()) {
        float rounded;
        __asm__("vcvtr.s32.f32 %0, %1" : "=t"(rounded) : "t"(product));
        return std::bit_cast<std::int32_t>(rounded);
    }
#endif
    return nearest_integer(product);
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
// can sit near them), then requantizes: as QNNPACK (the default), or with the integer stage.
constexpr std::int8_t requantize_output(std::int32_t accumulator, std::int32_t bias, math::fixed_point_multiplier m,
                                        std::int32_t output_offset, activation_range range) noexcept {
    std::int32_t biased = 0;
    if (__builtin_add_overflow(accumulator, bias, &biased))
        biased = bias > 0 ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<std::int32_t>::min();
#if VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION
    return to_output(rescale_as_qnnpack(biased, requantization_scale(m)), output_offset, range);
#else
    return to_output(rescale(biased, m), output_offset, range);
#endif
}

// One output channel's stage, prepared once for the many outputs a fast kernel writes with it:
// requantize_output(accumulator, bias, m, output_offset, range) in fewer instructions. The fast
// kernels take multipliers below 0.25 only (a shift of -2 or less: what a convolution's or a
// linear layer's input_scale * weight_scale / output_scale nearly always is; the code generator
// keeps the reference kernel for a layer with a larger one, see prepared_output_applies), which
// the integer stage needs.
//
// As QNNPACK (the default): the scale as a float, the product converted and rounded as
// rescale_as_qnnpack does (with the FPU: QADD, VMOV, VCVT, VMUL, VCVTR, VMOV, ADD and the clamp).
// The integer stage: for n = 31 - shift >= 33 the 64-bit product rounded once, (product +
// 2^(n-1)) >> n, is the product's high word (SMULL) shifted to one bit more than wanted, plus
// one, halved; the output offset joins before the halving as an even number, ((high >> right) +
// 1 + 2 * offset) >> 1, and the value needs no hold before the int8 range (|high >> right| <
// 2^30): five instructions and the clamp.
struct prepared_output {
    std::int32_t bias = 0;
#if VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION
    float scale = 0.0F;
    std::int32_t output_offset = 0;
#else
    std::int32_t multiplier = 0;
    int right = 0;                      // -shift - 2
    std::int32_t round_and_offset = 0;  // 1 + 2 * output offset
#endif
};

// Every multiplier of a layer can be prepared.
constexpr bool prepared_output_applies(const math::fixed_point_multiplier* multipliers, int channels) noexcept {
    for (int c = 0; c < channels; ++c)
        if (multipliers[c].shift > -2 || multipliers[c].shift < -31) return false;
    return true;
}

VERSATIL_FIRMWARE_INLINE prepared_output prepare_output(std::int32_t bias, math::fixed_point_multiplier m,
                                                        std::int32_t output_offset) noexcept {
#if VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION
    return {bias, requantization_scale(m), output_offset};
#else
    return {bias, m.multiplier, -m.shift - 2, 1 + 2 * output_offset};
#endif
}

// requantize_output(accumulator, bias, m, output_offset, range) for the prepared channel.
VERSATIL_FIRMWARE_INLINE std::int8_t requantize_prepared(std::int32_t accumulator, const prepared_output& c,
                                                         activation_range range) noexcept {
    const std::int32_t biased = simd::saturating_add(accumulator, c.bias);
#if VERSATIL_FIRMWARE_FLOAT_REQUANTIZATION
    // |biased| < 2^31 and scale < 0.25: the level is below 2^29, no hold needed.
    return clamp_to(rescale_as_qnnpack(biased, c.scale) + c.output_offset, range);
#else
    const std::int64_t product = std::int64_t{biased} * c.multiplier;
    const auto high = static_cast<std::int32_t>(product >> 32);  // |product| < 2^62: no overflow below
    return clamp_to(((high >> c.right) + c.round_and_offset) >> 1, range);
#endif
}

}  // namespace versatil::firmware

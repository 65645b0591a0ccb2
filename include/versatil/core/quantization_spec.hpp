// How one tensor is quantized: dtype, range, scheme, observer. Mirrors torchao's
// QuantizationSpec as a literal type, so a backend's configuration is a constant that
// static_assert can compare, and its invariants are checked while compiling.
#pragma once

#include <cstdint>
#include <string_view>

namespace versatil {

enum class dtype : std::uint8_t { uint8, int8, int32, float32 };

enum class qscheme : std::uint8_t {
    per_tensor_affine,
    per_tensor_symmetric,
    per_channel_affine,
    per_channel_symmetric,
};

// The statistics collector behind a spec (torch.ao.quantization.observer names).
enum class observer_kind : std::uint8_t {
    min_max,
    moving_average_min_max,
    per_channel_min_max,
    moving_average_per_channel_min_max,
    histogram,    // MSE-minimising range search over a histogram
    // The same histogram, its range chosen otherwise (calibration.hpp): quantiles, TensorRT's
    // KL divergence, or the lowest quantization error among the candidate ranges.
    histogram_percentile,
    histogram_entropy,
    histogram_auto,
    placeholder,  // dynamic quantization: the range is taken at run time
    derived,      // nothing observed: the scale follows from other tensors' (an int32 bias at
                  // input_scale * weight_scale, per output channel with per-channel weights)
};

constexpr std::string_view to_string(dtype value) noexcept {
    switch (value) {
        case dtype::uint8: return "uint8";
        case dtype::int8: return "int8";
        case dtype::int32: return "int32";
        case dtype::float32: return "float32";
    }
    return "unknown";
}

constexpr std::string_view to_string(qscheme value) noexcept {
    switch (value) {
        case qscheme::per_tensor_affine: return "per_tensor_affine";
        case qscheme::per_tensor_symmetric: return "per_tensor_symmetric";
        case qscheme::per_channel_affine: return "per_channel_affine";
        case qscheme::per_channel_symmetric: return "per_channel_symmetric";
    }
    return "unknown";
}

constexpr std::string_view to_string(observer_kind value) noexcept {
    switch (value) {
        case observer_kind::min_max: return "min_max";
        case observer_kind::moving_average_min_max: return "moving_average_min_max";
        case observer_kind::per_channel_min_max: return "per_channel_min_max";
        case observer_kind::moving_average_per_channel_min_max: return "moving_average_per_channel_min_max";
        case observer_kind::histogram: return "histogram";
        case observer_kind::histogram_percentile: return "histogram_percentile";
        case observer_kind::histogram_entropy: return "histogram_entropy";
        case observer_kind::histogram_auto: return "histogram_auto";
        case observer_kind::placeholder: return "placeholder";
        case observer_kind::derived: return "derived";
    }
    return "unknown";
}

constexpr bool is_per_channel(qscheme scheme) noexcept {
    return scheme == qscheme::per_channel_affine || scheme == qscheme::per_channel_symmetric;
}
constexpr bool is_symmetric(qscheme scheme) noexcept {
    return scheme == qscheme::per_tensor_symmetric || scheme == qscheme::per_channel_symmetric;
}
constexpr bool is_per_channel(observer_kind kind) noexcept {
    return kind == observer_kind::per_channel_min_max || kind == observer_kind::moving_average_per_channel_min_max;
}
// The kinds that keep a histogram of what they see.
constexpr bool is_histogram(observer_kind kind) noexcept {
    return kind == observer_kind::histogram || kind == observer_kind::histogram_percentile ||
           kind == observer_kind::histogram_entropy || kind == observer_kind::histogram_auto;
}
constexpr bool is_moving_average(observer_kind kind) noexcept {
    return kind == observer_kind::moving_average_min_max || kind == observer_kind::moving_average_per_channel_min_max;
}

struct integer_range {
    std::int64_t min;
    std::int64_t max;
};

// The full range a quantized dtype can hold; float32 has none.
constexpr integer_range dtype_range(dtype value) noexcept {
    switch (value) {
        case dtype::uint8: return {0, 255};
        case dtype::int8: return {-128, 127};
        case dtype::int32: return {INT32_MIN, INT32_MAX};
        case dtype::float32: return {0, 0};
    }
    return {0, 0};
}

inline constexpr int no_channel_axis = -1;
inline constexpr float default_eps = 1.0F / 4096.0F;  // torchao's 2**-12
inline constexpr float default_averaging_constant = 0.01F;

struct quantization_spec {
    ::versatil::dtype dtype = ::versatil::dtype::uint8;
    std::int32_t quant_min = 0;
    std::int32_t quant_max = 255;
    ::versatil::qscheme qscheme = ::versatil::qscheme::per_tensor_affine;
    int ch_axis = no_channel_axis;
    observer_kind observer = observer_kind::min_max;
    float eps = default_eps;
    // QAT: observe through a fake-quantize module instead of a plain observer.
    bool is_fake_quantize = false;
    // Moving-average observers: weight of the newest batch.
    float averaging_constant = default_averaging_constant;
    // Activations quantized with a range taken at run time.
    bool is_dynamic = false;

    friend constexpr bool operator==(const quantization_spec&, const quantization_spec&) = default;
};

// The invariants of a spec, each a rule with a name.
enum class spec_rule : std::uint8_t {
    ok,
    quant_min_must_be_below_quant_max,
    range_must_fit_dtype,
    dtype_must_be_quantized,
    ch_axis_only_for_per_channel,
    per_channel_needs_ch_axis,
    observer_must_match_qscheme,
    placeholder_only_for_dynamic,
    eps_must_be_positive,
    averaging_constant_must_be_in_0_1,
    derived_only_for_int32,
};

constexpr std::string_view to_string(spec_rule rule) noexcept {
    switch (rule) {
        case spec_rule::ok: return "ok";
        case spec_rule::quant_min_must_be_below_quant_max: return "quant_min must be below quant_max";
        case spec_rule::range_must_fit_dtype: return "[quant_min, quant_max] must fit the dtype";
        case spec_rule::dtype_must_be_quantized: return "dtype must be an integer type";
        case spec_rule::ch_axis_only_for_per_channel: return "ch_axis is only for per-channel schemes";
        case spec_rule::per_channel_needs_ch_axis: return "a per-channel scheme needs ch_axis >= 0";
        case spec_rule::observer_must_match_qscheme: return "the observer must be per-channel exactly when the qscheme is";
        case spec_rule::placeholder_only_for_dynamic: return "the placeholder observer is for dynamic specs only, and dynamic specs use it or a moving average";
        case spec_rule::eps_must_be_positive: return "eps must be positive";
        case spec_rule::averaging_constant_must_be_in_0_1: return "averaging_constant must be in (0, 1]";
        case spec_rule::derived_only_for_int32: return "the derived observer is for int32 specs (biases) only, and they are not dynamic";
    }
    return "unknown";
}

constexpr spec_rule first_violated_rule(const quantization_spec& spec) noexcept {
    if (spec.dtype == dtype::float32) return spec_rule::dtype_must_be_quantized;
    if (!(spec.quant_min < spec.quant_max)) return spec_rule::quant_min_must_be_below_quant_max;
    const integer_range full = dtype_range(spec.dtype);
    if (spec.quant_min < full.min || spec.quant_max > full.max) return spec_rule::range_must_fit_dtype;
    if (is_per_channel(spec.qscheme) && spec.ch_axis < 0) return spec_rule::per_channel_needs_ch_axis;
    if (!is_per_channel(spec.qscheme) && spec.ch_axis != no_channel_axis) return spec_rule::ch_axis_only_for_per_channel;
    if (spec.observer == observer_kind::derived && (spec.dtype != dtype::int32 || spec.is_dynamic))
        return spec_rule::derived_only_for_int32;
    if (spec.observer != observer_kind::placeholder && spec.observer != observer_kind::derived &&
        is_per_channel(spec.observer) != is_per_channel(spec.qscheme))
        return spec_rule::observer_must_match_qscheme;
    // torchao's dynamic QAT observes through a moving average (averaging_constant 1).
    const bool dynamic_observer = spec.observer == observer_kind::placeholder ||
                                  (spec.is_fake_quantize && spec.observer == observer_kind::moving_average_min_max);
    if (spec.is_dynamic ? !dynamic_observer : spec.observer == observer_kind::placeholder)
        return spec_rule::placeholder_only_for_dynamic;
    if (!(spec.eps > 0.0F)) return spec_rule::eps_must_be_positive;
    if (!(spec.averaging_constant > 0.0F && spec.averaging_constant <= 1.0F))
        return spec_rule::averaging_constant_must_be_in_0_1;
    return spec_rule::ok;
}

constexpr bool is_valid(const quantization_spec& spec) noexcept {
    return first_violated_rule(spec) == spec_rule::ok;
}

// Each rule as a function that is deliberately not constexpr: `checked` calls the one a
// spec breaks, so the compiler's error names the rule ("call to non-constexpr function
// 'versatil::spec_rules::quant_min_must_be_below_quant_max()'").
namespace spec_rules {
void dtype_must_be_quantized();
void quant_min_must_be_below_quant_max();
void range_must_fit_dtype();
void ch_axis_only_for_per_channel();
void per_channel_needs_ch_axis();
void observer_must_match_qscheme();
void placeholder_only_for_dynamic();
void eps_must_be_positive();
void averaging_constant_must_be_in_0_1();
void derived_only_for_int32();
}  // namespace spec_rules

// Returns `spec` unchanged, or fails to compile naming the rule it breaks.
consteval quantization_spec checked(quantization_spec spec) {
    switch (first_violated_rule(spec)) {
        case spec_rule::ok: break;
        case spec_rule::dtype_must_be_quantized: spec_rules::dtype_must_be_quantized(); break;
        case spec_rule::quant_min_must_be_below_quant_max: spec_rules::quant_min_must_be_below_quant_max(); break;
        case spec_rule::range_must_fit_dtype: spec_rules::range_must_fit_dtype(); break;
        case spec_rule::ch_axis_only_for_per_channel: spec_rules::ch_axis_only_for_per_channel(); break;
        case spec_rule::per_channel_needs_ch_axis: spec_rules::per_channel_needs_ch_axis(); break;
        case spec_rule::observer_must_match_qscheme: spec_rules::observer_must_match_qscheme(); break;
        case spec_rule::placeholder_only_for_dynamic: spec_rules::placeholder_only_for_dynamic(); break;
        case spec_rule::eps_must_be_positive: spec_rules::eps_must_be_positive(); break;
        case spec_rule::averaging_constant_must_be_in_0_1: spec_rules::averaging_constant_must_be_in_0_1(); break;
        case spec_rule::derived_only_for_int32: spec_rules::derived_only_for_int32(); break;
    }
    return spec;
}

}  // namespace versatil

// Named backend options: `X86Inductor<dynamic, reduce_range>` instead of a row of bools.
// Options are values of distinct empty types, so their order does not matter, and a policy
// can reject one it does not know or one given twice, naming both itself and the option.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <utility>
#include <string_view>
#include <type_traits>

#include "versatil/core/calibration.hpp"
#include "versatil/core/fixed_string.hpp"

namespace versatil {
inline namespace options {

struct dynamic_t {
    static constexpr std::string_view name = "dynamic";
};
struct qat_t {
    static constexpr std::string_view name = "qat";
};
struct reduce_range_t {
    static constexpr std::string_view name = "reduce_range";
};
struct per_tensor_t {
    static constexpr std::string_view name = "per_tensor";
};
struct cle_t {
    static constexpr std::string_view name = "cle";
};
struct bias_correction_t {
    static constexpr std::string_view name = "bias_correction";
};
struct gptq_t {
    static constexpr std::string_view name = "gptq";
};
struct adaround_t {
    static constexpr std::string_view name = "adaround";
};

// The calibration method of static activations (calibration.hpp), one option per method
// (`calibration<calibration_method::entropy>`, "calibration=entropy" at run time); at most one.
template <calibration_method Method>
struct calibration_t {
    static constexpr calibration_method method = Method;
    static constexpr auto spelled = [] {
        constexpr std::string_view prefix = "calibration=";
        std::array<char, 32> chars{};
        std::size_t size = 0;
        for (char c : prefix) chars[size++] = c;
        for (char c : to_string(Method)) chars[size++] = c;
        return std::pair{chars, size};
    }();
    static constexpr std::string_view name{spelled.first.data(), spelled.second};
};

inline constexpr dynamic_t dynamic{};            // activations quantized at run time
inline constexpr qat_t qat{};                    // fake-quantize for quantization-aware training
inline constexpr reduce_range_t reduce_range{};  // 7-bit activations (x86 without VNNI)
inline constexpr per_tensor_t per_tensor{};      // one weight scale per tensor, not per channel
// Cross-layer equalization (Nagel et al. 2019): conv/linear -> relu -> conv/linear chains
// rescaled, exactly in float, so that paired weight channels have equal ranges.
inline constexpr cle_t cle{};
// Empirical bias correction: each layer's mean output shift under quantization, measured on
// the calibration data, subtracted from its bias. Static post-training quantization only.
inline constexpr bias_correction_t bias_correction{};
// GPTQ weight rounding (Frantar et al. 2022): each layer's weights rounded column by column,
// each column's error moved onto the columns not rounded yet, so the layer's output on the
// calibration data stays close. Static post-training quantization only.
inline constexpr gptq_t gptq{};
// AdaRound weight rounding (Nagel et al. 2020): each weight's up-or-down rounding learned against
// its layer's output error on the calibration data. Static post-training quantization only, and
// not with gptq: both choose the same weights' rounding.
inline constexpr adaround_t adaround{};
template <calibration_method Method>
inline constexpr calibration_t<Method> calibration{};

}  // namespace options

template <class... Options>
struct option_list {};

namespace detail {

template <class Option, auto... Given>
inline constexpr std::size_t option_count = (std::size_t{0} + ... + std::is_same_v<Option, std::remove_cvref_t<decltype(Given)>>);

// Instantiated once per option a policy receives; the instantiation names the policy and
// the option, the assertion names the rule.
template <fixed_string Policy, class Option, class Accepted, std::size_t Count>
struct check_option;

template <fixed_string Policy, class Option, class... Accepted, std::size_t Count>
struct check_option<Policy, Option, option_list<Accepted...>, Count> {
    static_assert((std::is_same_v<Option, Accepted> || ...),
                  "versatil: unknown option for this backend policy (the policy and the option are named in the "
                  "instantiation above)");
    static_assert(Count == 1, "versatil: option given twice to this backend policy (the policy and the option are "
                              "named in the instantiation above)");
    static constexpr bool value = true;
};

}  // namespace detail

// True when every option in `Given` is one of `Accepted` and none repeats; otherwise a
// compile error naming `Policy` and the offending option.
template <fixed_string Policy, class Accepted, auto... Given>
inline constexpr bool options_are_valid =
    (true && ... &&
     detail::check_option<Policy, std::remove_cvref_t<decltype(Given)>, Accepted,
                          detail::option_count<std::remove_cvref_t<decltype(Given)>, Given...>>::value);

template <class Option, auto... Given>
inline constexpr bool has_option = detail::option_count<Option, Given...> > 0;

namespace detail {
template <class Option>
inline constexpr bool is_calibration_option = false;
template <calibration_method Method>
inline constexpr bool is_calibration_option<calibration_t<Method>> = true;

template <auto Option>
constexpr std::optional<calibration_method> calibration_in() {
    if constexpr (is_calibration_option<std::remove_cvref_t<decltype(Option)>>)
        return std::remove_cvref_t<decltype(Option)>::method;
    else
        return std::nullopt;
}
}  // namespace detail

// How many calibration options `Given` holds (a policy takes at most one).
template <auto... Given>
inline constexpr std::size_t calibration_count =
    (std::size_t{0} + ... + detail::is_calibration_option<std::remove_cvref_t<decltype(Given)>>);

// The calibration method `Given` chooses; none for the backend's default.
template <auto... Given>
inline constexpr std::optional<calibration_method> calibration_option = [] {
    std::optional<calibration_method> method;
    ((method = detail::calibration_in<Given>() ? detail::calibration_in<Given>() : method), ...);
    return method;
}();

// The accepted options of a policy that takes a calibration method: `Options...` and one
// calibration_t per method.
template <class... Options>
using with_calibration_options =
    option_list<Options..., calibration_t<calibration_method::minmax>, calibration_t<calibration_method::moving_minmax>,
                calibration_t<calibration_method::histogram>, calibration_t<calibration_method::percentile>,
                calibration_t<calibration_method::entropy>, calibration_t<calibration_method::automatic>,
                calibration_t<calibration_method::output>>;

// Options that exclude each other whatever the backend, with the reason: the run-time spec
// parser reports these; policies reject the same pairs at compile time (options_combine).
struct option_conflict {
    std::string_view option;
    std::string_view other;
    std::string_view reason;
};

inline constexpr std::array option_conflicts{
    option_conflict{"bias_correction", "dynamic",
                    "bias correction is measured on calibration data, and dynamic quantization takes none (its "
                    "activation ranges are taken at run time)"},
    option_conflict{"bias_correction", "qat",
                    "quantization-aware training learns its biases with quantization in the loop; bias correction "
                    "is for post-training quantization"},
    option_conflict{"gptq", "dynamic",
                    "GPTQ rounds weights against the layers' inputs on calibration data, and dynamic quantization "
                    "takes none"},
    option_conflict{"gptq", "qat",
                    "quantization-aware training learns its weights with quantization in the loop; GPTQ rounding is "
                    "for post-training quantization"},
    option_conflict{"adaround", "dynamic",
                    "AdaRound learns weights' rounding against the layers' outputs on calibration data, and dynamic "
                    "quantization takes none"},
    option_conflict{"adaround", "qat",
                    "quantization-aware training learns its weights with quantization in the loop; AdaRound rounding "
                    "is for post-training quantization"},
    option_conflict{"adaround", "gptq",
                    "both choose how the same weights are rounded; take one (docs/accuracy.md compares them)"},
    option_conflict{"calibration", "dynamic",
                    "dynamic quantization takes activation ranges at run time, so there is nothing to calibrate"},
    option_conflict{"calibration", "qat",
                    "quantization-aware training observes activations through its fake-quantize modules' moving "
                    "averages; calibration methods are for post-training quantization"},
};

// True when no two of `Given` conflict; the catalogue enumerates only such combinations.
template <auto... Given>
inline constexpr bool options_combine =
    !(has_option<bias_correction_t, Given...> && (has_option<dynamic_t, Given...> || has_option<qat_t, Given...>)) &&
    !(has_option<gptq_t, Given...> && (has_option<dynamic_t, Given...> || has_option<qat_t, Given...>)) &&
    !(has_option<adaround_t, Given...> &&
      (has_option<dynamic_t, Given...> || has_option<qat_t, Given...> || has_option<gptq_t, Given...>)) &&
    !(calibration_count<Given...> != 0 && (has_option<dynamic_t, Given...> || has_option<qat_t, Given...>)) &&
    calibration_count<Given...> <= 1;

namespace detail {
// Instantiated by a policy with conflicting options; the instantiation names the policy, the
// assertion the rule (option_conflicts holds the same rules as text).
template <fixed_string Policy, bool BiasCorrection, bool Dynamic, bool Qat, std::size_t Calibrations = 0, bool Gptq = false>
struct check_option_combination {
    static_assert(Calibrations <= 1,
                  "versatil: more than one 'calibration' option: a policy calibrates its activations with one "
                  "method (the policy is named in the instantiation above)");
    static_assert(!(Calibrations != 0 && Dynamic),
                  "versatil: options 'calibration' and 'dynamic' do not combine: dynamic quantization takes "
                  "activation ranges at run time, so there is nothing to calibrate (the policy is named in the "
                  "instantiation above)");
    static_assert(!(Calibrations != 0 && Qat),
                  "versatil: options 'calibration' and 'qat' do not combine: quantization-aware training observes "
                  "activations through moving averages; calibration methods are for post-training quantization (the "
                  "policy is named in the instantiation above)");
    static_assert(!(BiasCorrection && Dynamic),
                  "versatil: options 'bias_correction' and 'dynamic' do not combine: bias correction is measured on "
                  "calibration data, and dynamic quantization takes none (the policy is named in the instantiation "
                  "above)");
    static_assert(!(BiasCorrection && Qat),
                  "versatil: options 'bias_correction' and 'qat' do not combine: quantization-aware training learns "
                  "its biases; bias correction is for post-training quantization (the policy is named in the "
                  "instantiation above)");
    static_assert(!(Gptq && Dynamic),
                  "versatil: options 'gptq' and 'dynamic' do not combine: GPTQ rounds weights against the layers' "
                  "inputs on calibration data, and dynamic quantization takes none (the policy is named in the "
                  "instantiation above)");
    static_assert(!(Gptq && Qat),
                  "versatil: options 'gptq' and 'qat' do not combine: quantization-aware training learns its "
                  "weights; GPTQ rounding is for post-training quantization (the policy is named in the "
                  "instantiation above)");
    static constexpr bool value = true;
};

// The same for the adaround option, apart so that the instantiation above keeps its name.
template <fixed_string Policy, bool Adaround, bool Gptq, bool Dynamic, bool Qat>
struct check_adaround_combination {
    static_assert(!(Adaround && Gptq),
                  "versatil: options 'adaround' and 'gptq' do not combine: both choose how the same weights are "
                  "rounded; take one (the policy is named in the instantiation above)");
    static_assert(!(Adaround && Dynamic),
                  "versatil: options 'adaround' and 'dynamic' do not combine: AdaRound learns weights' rounding on "
                  "calibration data, and dynamic quantization takes none (the policy is named in the instantiation "
                  "above)");
    static_assert(!(Adaround && Qat),
                  "versatil: options 'adaround' and 'qat' do not combine: quantization-aware training learns its "
                  "weights; AdaRound rounding is for post-training quantization (the policy is named in the "
                  "instantiation above)");
    static constexpr bool value = true;
};
}  // namespace detail

// True when `Given` combine; otherwise a compile error naming `Policy` and the rule.
template <fixed_string Policy, auto... Given>
inline constexpr bool options_are_compatible =
    detail::check_option_combination<Policy, has_option<bias_correction_t, Given...>, has_option<dynamic_t, Given...>,
                                     has_option<qat_t, Given...>, calibration_count<Given...>,
                                     has_option<gptq_t, Given...>>::value &&
    detail::check_adaround_combination<Policy, has_option<adaround_t, Given...>, has_option<gptq_t, Given...>,
                                       has_option<dynamic_t, Given...>, has_option<qat_t, Given...>>::value;

namespace detail {
template <class Accepted, auto... Given>
struct option_names;

template <class... Accepted, auto... Given>
struct option_names<option_list<Accepted...>, Given...> {
    struct text {
        std::array<char, (std::size_t{1} + ... + (Accepted::name.size() + 1))> chars{};
        std::size_t size = 0;
    };
    static constexpr text storage = [] {
        text result;
        const auto append = [&result](std::string_view name) {
            if (result.size != 0) result.chars[result.size++] = ',';
            for (char c : name) result.chars[result.size++] = c;
        };
        ((has_option<Accepted, Given...> ? append(Accepted::name) : void()), ...);
        return result;
    }();
    static constexpr std::string_view value{storage.chars.data(), storage.size};
};
}  // namespace detail

// The options present in `Given`, in the policy's own order, comma-separated: one spelling
// for `X86Inductor<dynamic, reduce_range>` and `X86Inductor<reduce_range, dynamic>`.
template <class Accepted, auto... Given>
inline constexpr std::string_view option_names = detail::option_names<Accepted, Given...>::value;

}  // namespace versatil

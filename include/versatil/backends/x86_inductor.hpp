// The x86 Inductor backend policy: `X86Inductor<>`, `X86Inductor<dynamic, reduce_range>`.
// Options: dynamic, qat, reduce_range, the accuracy steps cle, bias_correction and gptq, and
// calibration<METHOD> (core/options.hpp). Runs on CPU; while active it hides CUDA devices and turns on Inductor
// freezing, as the original does.
#pragma once

#include <array>
#include <string_view>

#include "versatil/backends/x86_inductor_config.hpp"
#include "versatil/core/backend.hpp"
#include "versatil/core/options.hpp"

namespace versatil {

template <auto... Options>
struct X86Inductor : backend_policy<X86Inductor<Options...>> {
    using accepted_options = with_calibration_options<dynamic_t, qat_t, reduce_range_t, cle_t, bias_correction_t, gptq_t, adaround_t>;
    static_assert(options_are_valid<"X86Inductor", accepted_options, Options...>);
    static_assert(options_are_compatible<"X86Inductor", Options...>);

    static constexpr std::string_view name = "x86_inductor";
    static constexpr bool is_dynamic = has_option<dynamic_t, Options...>;
    static constexpr bool is_qat = has_option<qat_t, Options...>;
    static constexpr bool reduce_range = has_option<reduce_range_t, Options...>;
    static constexpr device_set supported_device_types{device_type::cpu};
    static constexpr std::array environment{
        environment_assignment{"CUDA_VISIBLE_DEVICES", ""},
        environment_assignment{"TORCHINDUCTOR_FREEZING", "1"},
    };
    // The options spelled out, not is_dynamic & co.: clang 14 rejects reading this class's own
    // static members inside a consteval call in their class template (the fuzzers build with it).
    static constexpr quantization_config config =
        with_calibration(with_accuracy_steps(x86_inductor_config(has_option<dynamic_t, Options...>, has_option<qat_t, Options...>,
                                                has_option<reduce_range_t, Options...>),
                            has_option<cle_t, Options...>, has_option<bias_correction_t, Options...>,
                            has_option<gptq_t, Options...>, has_option<adaround_t, Options...>),
                         calibration_option<Options...>);
    static constexpr std::string_view options = option_names<accepted_options, Options...>;
};

}  // namespace versatil

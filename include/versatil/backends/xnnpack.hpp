// The XNNPACK backend policy: `XNNPACK<>`, `XNNPACK<dynamic, per_tensor>`. Options:
// dynamic, qat, per_tensor (weights are per-channel by default), the accuracy steps cle,
// bias_correction and gptq, and calibration<METHOD> (core/options.hpp). Runs on CPU and changes no environment variable.
#pragma once

#include <array>
#include <string_view>

#include "versatil/backends/xnnpack_config.hpp"
#include "versatil/core/backend.hpp"
#include "versatil/core/options.hpp"

namespace versatil {

template <auto... Options>
struct XNNPACK : backend_policy<XNNPACK<Options...>> {
    using accepted_options = with_calibration_options<dynamic_t, qat_t, per_tensor_t, cle_t, bias_correction_t, gptq_t, adaround_t>;
    static_assert(options_are_valid<"XNNPACK", accepted_options, Options...>);
    static_assert(options_are_compatible<"XNNPACK", Options...>);

    static constexpr std::string_view name = "xnnpack";
    static constexpr bool is_dynamic = has_option<dynamic_t, Options...>;
    static constexpr bool is_qat = has_option<qat_t, Options...>;
    static constexpr bool is_per_channel = !has_option<per_tensor_t, Options...>;
    static constexpr device_set supported_device_types{device_type::cpu};
    static constexpr std::array<environment_assignment, 0> environment{};
    // The options spelled out: clang 14 rejects reading is_dynamic & co. here (see X86Inductor).
    static constexpr quantization_config config =
        with_calibration(with_accuracy_steps(xnnpack_config(has_option<dynamic_t, Options...>, has_option<qat_t, Options...>,
                                           !has_option<per_tensor_t, Options...>),
                            has_option<cle_t, Options...>, has_option<bias_correction_t, Options...>,
                            has_option<gptq_t, Options...>, has_option<adaround_t, Options...>),
                         calibration_option<Options...>);
    static constexpr std::string_view options = option_names<accepted_options, Options...>;
};

}  // namespace versatil

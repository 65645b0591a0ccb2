// The Cortex-M backend policy: `CortexM<>`, `CortexM<per_tensor, qat>`. Options: qat,
// per_tensor (weights are per-channel by default), and calibration<METHOD> (core/options.hpp:
// the activation ranges are chosen on the host, so the firmware runs any method's scales
// unchanged). Runs on microcontrollers (device_type::mcu),
// so it composes with no CPU backend; changes no environment variable. The LibTorch layer
// quantizes for it on the host and exports the model as firmware (versatil-quantize --export).
#pragma once

#include <array>
#include <string_view>

#include "versatil/backends/cortex_m_config.hpp"
#include "versatil/core/backend.hpp"
#include "versatil/core/options.hpp"

namespace versatil {

namespace detail {
// The options check, except for `dynamic`, which CortexM rejects with its own reason (one
// error, not two).
template <class Accepted, auto... Options>
consteval bool cortex_m_options_are_valid() {
    if constexpr (has_option<dynamic_t, Options...>)
        return true;
    else
        return options_are_valid<"CortexM", Accepted, Options...>;
}
}  // namespace detail

template <auto... Options>
struct CortexM : backend_policy<CortexM<Options...>> {
    static_assert(!has_option<dynamic_t, Options...>,
                  "versatil::CortexM: no 'dynamic' option: dynamic quantization computes activation scales in float "
                  "at run time, and Cortex-M firmware runs integer arithmetic only; quantize statically (calibrate) "
                  "or with qat");
    using accepted_options = with_calibration_options<qat_t, per_tensor_t>;
    static_assert(detail::cortex_m_options_are_valid<accepted_options, Options...>());
    static_assert(options_are_compatible<"CortexM", Options...>);

    static constexpr std::string_view name = "cortex_m";
    static constexpr bool is_dynamic = false;
    static constexpr bool is_qat = has_option<qat_t, Options...>;
    static constexpr bool is_per_channel = !has_option<per_tensor_t, Options...>;
    static constexpr device_set supported_device_types{device_type::mcu};
    static constexpr std::array<environment_assignment, 0> environment{};
    // The options spelled out: clang 14 rejects reading is_qat & co. here (see X86Inductor).
    static constexpr quantization_config config =
        with_calibration(cortex_m_config(has_option<qat_t, Options...>, !has_option<per_tensor_t, Options...>),
                         calibration_option<Options...>);
    static constexpr std::string_view options = option_names<accepted_options, Options...>;
};

}  // namespace versatil

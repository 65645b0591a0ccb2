// expect-error: versatil::Quantizer: two backends set one environment variable to different values
// expect-error: fixed_string<22>\{"TORCHINDUCTOR_FREEZING"\}
#include "versatil/versatil.hpp"
using namespace versatil;
struct unfrozen : backend_policy<unfrozen> {
    static constexpr std::string_view name = "unfrozen";
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cpu};
    static constexpr std::array environment{environment_assignment{"TORCHINDUCTOR_FREEZING", "0"}};
    static constexpr quantization_config config = X86Inductor<>::config;
    static constexpr std::string_view options{};
};
static_assert(Quantizer<Target<"encoder", X86Inductor<>>, Target<"head", unfrozen>>::needs_calibration);

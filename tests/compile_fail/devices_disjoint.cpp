// expect-error: static assertion failed: versatil::Quantizer: the targets' backends share no device type
// expect-error: composition_violation<versatil::composition_rule::devices_must_intersect, versatil::Target<versatil::fixed_string<7>\{"encoder"\}, versatil::XNNPACK<> >, versatil::Target<versatil::fixed_string<4>\{"head"\}, cuda_backend>
#include "versatil/versatil.hpp"
using namespace versatil;
struct cuda_backend : backend_policy<cuda_backend> {
    static constexpr std::string_view name = "cuda_backend";
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cuda};
    static constexpr std::array<environment_assignment, 0> environment{};
    static constexpr quantization_config config = XNNPACK<>::config;
    static constexpr std::string_view options{};
};
static_assert(Quantizer<Target<"encoder", XNNPACK<>>, Target<"head", cuda_backend>>::needs_calibration);

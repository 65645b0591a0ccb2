// expect-error: versatil::libtorch: a target's backend has no LibTorch lowering
// expect-error: versatil::Target<versatil::fixed_string<0>\{""\}, EdgeTPU<> >
#include "versatil/libtorch/plan/backend_lowering.hpp"
using namespace versatil;
// A policy of the core's kind (a template of options) with no versatil::libtorch::lowering
// specialization: the LibTorch layer cannot lower it, and says so while compiling.
template <auto... Options>
struct EdgeTPU : backend_policy<EdgeTPU<Options...>> {
    static constexpr std::string_view name = "edge_tpu";
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cpu};
    static constexpr std::array<environment_assignment, 0> environment{};
    static constexpr quantization_config config = XNNPACK<>::config;
    static constexpr std::string_view options{};
};
auto quantizer = libtorch::to_runtime(Quantizer<Target<"", EdgeTPU<>>>{});

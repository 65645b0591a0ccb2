// The composition rules as constexpr functions: each rule with a composition that breaks it
// (and which targets it names) and one that keeps it. The same function backs Quantizer<...>
// (compile errors) and runtime_quantizer (composition_error).
#include <array>

#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/composition.hpp"

namespace {
using namespace versatil;
using enum composition_rule;

constexpr const backend_descriptor* x86 = &descriptor_of<X86Inductor<>>;
constexpr const backend_descriptor* x86_dynamic = &descriptor_of<X86Inductor<dynamic>>;
constexpr const backend_descriptor* xnn = &descriptor_of<XNNPACK<>>;
constexpr const backend_descriptor* xnn_qat = &descriptor_of<XNNPACK<qat>>;

struct cuda_only : backend_policy<cuda_only> {
    static constexpr std::string_view name = "cuda_only";
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cuda};
    static constexpr std::array environment{environment_assignment{"TORCHINDUCTOR_FREEZING", "0"}};
    static constexpr quantization_config config = X86Inductor<>::config;
    static constexpr std::string_view options{};
};
constexpr const backend_descriptor* cuda = &descriptor_of<cuda_only>;

template <std::size_t N>
constexpr composition_check check(const std::array<target_info, N>& targets) {
    return check_composition(targets);
}

constexpr std::array<target_info, 3> valid{{{"encoder", xnn}, {"head", x86}, {"encoder.norm", nullptr}}};
static_assert(check(valid));
static_assert(check(std::array<target_info, 1>{{{"", x86}}}));
static_assert(check(std::array<target_info, 2>{{{"", x86}, {"head", nullptr}}}));  // exclude inside the whole model

constexpr composition_check bad_path = check(std::array<target_info, 2>{{{"a", x86}, {"b..c", xnn}}});
static_assert(bad_path.rule == path_must_be_valid && bad_path.first == 1 &&
              bad_path.path_problem == path_rule::component_must_not_be_empty);

static_assert(check(std::array<target_info, 0>{}).rule == needs_a_quantizing_target);
static_assert(check(std::array<target_info, 1>{{{"a", nullptr}}}).rule == needs_a_quantizing_target);

constexpr composition_check nested =
    check(std::array<target_info, 3>{{{"x", xnn}, {"encoder", xnn}, {"encoder.block0", x86}}});
static_assert(nested.rule == targets_must_not_overlap && nested.first == 1 && nested.second == 2);
static_assert(check(std::array<target_info, 2>{{{"a", xnn}, {"a", xnn}}}).rule == targets_must_not_overlap);
static_assert(check(std::array<target_info, 2>{{{"", xnn}, {"a", xnn}}}).rule == targets_must_not_overlap);
// an exclude as wide as, or wider than, the target it overlaps is not "inside" it
static_assert(check(std::array<target_info, 2>{{{"a", xnn}, {"a", nullptr}}}).rule == targets_must_not_overlap);
static_assert(check(std::array<target_info, 2>{{{"a.b", xnn}, {"a", nullptr}}}).rule == targets_must_not_overlap);
static_assert(check(std::array<target_info, 3>{{{"a", xnn}, {"a.b", nullptr}, {"a.b.c", nullptr}}}).rule ==
              targets_must_not_overlap);

constexpr composition_check stray = check(std::array<target_info, 2>{{{"a", xnn}, {"b.c", nullptr}}});
static_assert(stray.rule == exclude_must_sit_inside_a_target && stray.first == 1);

constexpr composition_check mixed = check(std::array<target_info, 3>{{{"a", x86}, {"b", x86}, {"c", x86_dynamic}}});
static_assert(mixed.rule == static_and_dynamic_must_not_mix && mixed.first == 0 && mixed.second == 2);
static_assert(check(std::array<target_info, 2>{{{"a", xnn_qat}, {"b", xnn}}}).rule == qat_and_ptq_must_not_mix);

constexpr composition_check devices = check(std::array<target_info, 2>{{{"a", xnn}, {"b", cuda}}});
static_assert(devices.rule == devices_must_intersect && devices.second == 1);

constexpr composition_check environment = check(std::array<target_info, 2>{{{"a", x86}, {"b", x86}}});
static_assert(environment);  // one backend twice agrees with itself

struct freezing_off : cuda_only {
    static constexpr device_set supported_device_types{device_type::cpu, device_type::cuda};
};
constexpr composition_check conflict =
    check(std::array<target_info, 2>{{{"a", x86}, {"b", &descriptor_of<freezing_off>}}});
static_assert(conflict.rule == environments_must_agree && conflict.variable == "TORCHINDUCTOR_FREEZING");

// Queries.
static_assert(common_devices(valid) == device_set{device_type::cpu});
static_assert(needs_calibration(valid) && !all_dynamic(valid) && !all_qat(valid));
static_assert(!needs_calibration(std::array<target_info, 1>{{{"", x86_dynamic}}}));
static_assert(!needs_calibration(std::array<target_info, 1>{{{"", xnn_qat}}}));
static_assert(find_target(valid, "encoder.0") == 0 && find_target(valid, "encoder.norm.weight") == 2);
static_assert(find_target(valid, "head") == 1 && !find_target(valid, "decoder"));

constexpr int distinct_assignments(auto targets) {
    int count = 0;
    for_each_environment_assignment(targets, [&count](const environment_assignment&) { ++count; });
    return count;
}
static_assert(distinct_assignments(std::array<target_info, 3>{{{"a", x86}, {"b", x86}, {"c", xnn}}}) == 2);
static_assert(distinct_assignments(std::array<target_info, 2>{
                  {{"a", x86}, {"b", &descriptor_of<X86Inductor<reduce_range>>}}}) == 2);
}  // namespace

// Everything a backend policy declares, as one constexpr value. The compile-time Quantizer
// and the run-time composition both work on these, so they share one set of rules, and the
// LibTorch layer reads a backend's config and name without knowing the policy type.
#pragma once

#include <span>
#include <string_view>

#include "versatil/core/backend_family.hpp"
#include "versatil/core/device.hpp"
#include "versatil/core/quantization_config.hpp"
#include "versatil/environment/environment_assignment.hpp"

namespace versatil {

struct backend_descriptor {
    std::string_view name;
    bool is_dynamic = false;
    bool is_qat = false;
    device_set supported_device_types;
    quantization_config config;
    std::span<const environment_assignment> environment;
    // The options the policy was given, by name ("dynamic,per_tensor"): how a run-time
    // spec and a saved model's metadata refer to one configured policy.
    std::string_view options;
    // The policy template it configures (backend_family.hpp); nullptr for a policy that is no
    // template of options.
    const backend_family* family = nullptr;
};

}  // namespace versatil

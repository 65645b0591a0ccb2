// A target as reports, metadata and the command line show it: its backend's name (or "none" for
// an exclude) and how it calibrates. Kept out of target_spec.hpp, which parses that text: showing
// a target needs no catalogue of every configured backend, which costs each translation unit
// that includes it seconds of compile time.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "versatil/core/backend_descriptor.hpp"
#include "versatil/core/calibration.hpp"
#include "versatil/core/runtime_quantizer.hpp"

namespace versatil::libtorch {

// The backend spec of a target that keeps its path float (an Exclude), as targets are written
// on the command line and shown in reports and metadata.
inline constexpr std::string_view exclude_spec = "none";

// A target's backend as reports show it: its serialized name, or exclude_spec.
inline std::string backend_shown(const target_info& target) {
    return std::string(target.is_exclude() ? exclude_spec : target.backend->name);
}

// How a backend calibrates its static activations, as reports show it: "entropy", or
// "histogram (default)" when no calibration option chose it; empty when nothing is calibrated.
inline std::string calibration_shown(const backend_descriptor& backend) {
    const std::optional<calibration_method> method = calibration_of(backend.config);
    if (!method) return {};
    const bool chosen = std::string_view(backend.options).find("calibration=") != std::string_view::npos;
    return std::string(to_string(*method)) + (chosen ? "" : " (default)");
}

}  // namespace versatil::libtorch

// The command line's target syntax, "PATH=BACKEND[:OPT[,OPT]]" or "PATH=none": the one place a
// run-time choice meets the compile-time policies (parse_backend_spec picks the policy type's
// descriptor). No LibTorch header: the CLI and its fuzz target share it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "versatil/backends/catalogue.hpp"
#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/error.hpp"

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

// Throws error(invalid_argument) naming the text and the expected form. The path is checked
// later, with the other targets, by runtime_quantizer::compose.
inline runtime_target parse_target(std::string_view text) {
    const std::size_t equals = text.find('=');
    if (equals == std::string_view::npos)
        throw error(error_kind::invalid_argument, "target '" + std::string(text) +
                                                      "' is not PATH=BACKEND[:OPT[,OPT]] (PATH may be empty for the "
                                                      "whole model; BACKEND none keeps PATH float)");
    const std::string_view path = text.substr(0, equals), spec = text.substr(equals + 1);
    if (spec == exclude_spec) return {std::string(path), nullptr};
    auto backend = parse_backend_spec(spec);
    if (!backend)
        throw error(error_kind::invalid_argument, "target '" + std::string(text) + "': " + backend.error().message);
    return {std::string(path), *backend};
}

}  // namespace versatil::libtorch

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
#include "versatil/libtorch/plan/target_shown.hpp"

namespace versatil::libtorch {

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

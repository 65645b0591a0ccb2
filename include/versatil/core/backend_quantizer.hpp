// What `create_quantizer(module_path)` returns: one backend's configuration aimed at one
// module path, ready to be composed with others (torchao's per-module quantizer).
#pragma once

#include <string_view>

#include "versatil/core/backend_descriptor.hpp"

namespace versatil {

struct backend_quantizer {
    const backend_descriptor* backend = nullptr;
    std::string_view module_path;  // "" = whole model; views storage the caller keeps alive

    constexpr std::string_view backend_name() const noexcept { return backend->name; }
    constexpr const quantization_config& config() const noexcept { return backend->config; }
    constexpr bool is_dynamic() const noexcept { return backend->is_dynamic; }
    constexpr bool is_qat() const noexcept { return backend->is_qat; }

    friend constexpr bool operator==(const backend_quantizer& a, const backend_quantizer& b) noexcept {
        return a.module_path == b.module_path &&
               (a.backend == b.backend || (a.backend && b.backend && a.backend->name == b.backend->name &&
                                           a.backend->config == b.backend->config));
    }
};

}  // namespace versatil

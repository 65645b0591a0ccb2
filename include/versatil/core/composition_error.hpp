// Messages for run-time compositions that break a rule: the rule and the targets by path and
// backend, e.g. "targets 'encoder' (xnnpack) and 'encoder.block0' (x86_inductor) overlap".
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "versatil/core/composition.hpp"

namespace versatil {

struct composition_error {
    composition_rule rule = composition_rule::ok;
    std::string message;
};

// "xnnpack", "xnnpack:dynamic,per_tensor" or "none" for an Exclude: the spelling of a
// run-time target spec.
inline std::string backend_label(const backend_descriptor* backend) {
    if (backend == nullptr) return "none";
    std::string label(backend->name);
    if (!backend->options.empty()) label.append(":").append(backend->options);
    return label;
}

inline std::string describe_target(const target_info& target) {
    const std::string path = target.path.empty() ? "the whole model ''" : "'" + std::string(target.path) + "'";
    return path + " (" + backend_label(target.backend) + ")";
}

inline composition_error describe(const composition_check& check, std::span<const target_info> targets) {
    using enum composition_rule;
    const auto target = [&](std::size_t index) { return describe_target(targets[index]); };
    std::string message;
    switch (check.rule) {
        case ok: break;
        case path_must_be_valid:
            message = "invalid module path '" + std::string(targets[check.first].path) +
                      "': " + std::string(to_string(check.path_problem)) +
                      "; a path is \"\" (whole model) or identifiers and indices joined by '.', as in 'layers.0'";
            break;
        case needs_a_quantizing_target:
            message = "no target quantizes anything: give at least one PATH=BACKEND target";
            break;
        case targets_must_not_overlap:
            message = "targets " + target(check.first) + " and " + target(check.second) +
                      " overlap (same path, the whole model, or one nested in the other); only an exclude may sit "
                      "inside a wider target";
            break;
        case exclude_must_sit_inside_a_target:
            message = "exclude " + target(check.first) +
                      " does not sit strictly inside any quantizing target, so it would change nothing";
            break;
        case static_and_dynamic_must_not_mix:
            message = "targets " + target(check.first) + " and " + target(check.second) +
                      " mix static and dynamic quantization; use one kind for every target";
            break;
        case qat_and_ptq_must_not_mix:
            message = "targets " + target(check.first) + " and " + target(check.second) +
                      " mix quantization-aware training and post-training quantization; use one kind for every target";
            break;
        case devices_must_intersect:
            message = "targets " + target(check.first) + " and " + target(check.second) +
                      " have backends that share no device type";
            break;
        case environments_must_agree:
            message = "targets " + target(check.first) + " and " + target(check.second) +
                      " set environment variable '" + std::string(check.variable) + "' to different values";
            break;
    }
    return {check.rule, std::move(message)};
}

}  // namespace versatil

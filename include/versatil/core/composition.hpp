// The rules that decide whether targets compose, and the queries on a composition. Both are
// constexpr functions over a span of target_info, so `Quantizer<...>` (paths known while
// compiling) and `runtime_quantizer` (paths known at run time) apply the very same rules.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "versatil/core/backend_descriptor.hpp"
#include "versatil/core/device.hpp"
#include "versatil/core/module_path.hpp"

namespace versatil {

// One target of a composition: a module path and the backend that quantizes it, or no
// backend for an Exclude (the module stays float).
struct target_info {
    std::string_view path;
    const backend_descriptor* backend = nullptr;

    constexpr bool is_exclude() const noexcept { return backend == nullptr; }
};

enum class composition_rule : unsigned char {
    ok,
    path_must_be_valid,
    needs_a_quantizing_target,
    targets_must_not_overlap,
    exclude_must_sit_inside_a_target,
    static_and_dynamic_must_not_mix,
    qat_and_ptq_must_not_mix,
    devices_must_intersect,
    environments_must_agree,
};

constexpr std::string_view to_string(composition_rule rule) noexcept {
    switch (rule) {
        case composition_rule::ok: return "ok";
        case composition_rule::path_must_be_valid: return "invalid module path";
        case composition_rule::needs_a_quantizing_target: return "no target quantizes anything";
        case composition_rule::targets_must_not_overlap: return "targets overlap";
        case composition_rule::exclude_must_sit_inside_a_target: return "an Exclude must sit strictly inside a quantizing target";
        case composition_rule::static_and_dynamic_must_not_mix: return "static and dynamic targets do not mix";
        case composition_rule::qat_and_ptq_must_not_mix: return "QAT and post-training targets do not mix";
        case composition_rule::devices_must_intersect: return "the targets' backends share no device type";
        case composition_rule::environments_must_agree: return "two backends set one environment variable to different values";
    }
    return "unknown";
}

// The first rule a composition breaks, with the targets (by index) that break it.
struct composition_check {
    constexpr composition_check() noexcept = default;
    constexpr composition_check(composition_rule broken, std::size_t first_target = 0, std::size_t second_target = 0,
                                std::string_view conflicting_variable = {}, path_rule problem = path_rule::ok) noexcept
        : rule(broken), first(first_target), second(second_target), variable(conflicting_variable),
          path_problem(problem) {}

    composition_rule rule = composition_rule::ok;
    std::size_t first = 0;
    std::size_t second = 0;
    std::string_view variable;            // environments_must_agree: the variable
    path_rule path_problem = path_rule::ok;  // path_must_be_valid: what is wrong with it

    constexpr explicit operator bool() const noexcept { return rule == composition_rule::ok; }
};

namespace detail {
constexpr bool strictly_inside(std::string_view outer, std::string_view inner) noexcept {
    return outer != inner && contains(outer, inner);
}

// An Exclude strictly inside a quantizing target is the one overlap that is allowed.
constexpr bool may_overlap(const target_info& a, const target_info& b) noexcept {
    if (a.is_exclude() == b.is_exclude()) return false;
    const target_info& quantizing = a.is_exclude() ? b : a;
    const target_info& excluded = a.is_exclude() ? a : b;
    return strictly_inside(quantizing.path, excluded.path);
}

constexpr std::optional<std::size_t> first_quantizing(std::span<const target_info> targets) noexcept {
    for (std::size_t i = 0; i < targets.size(); ++i)
        if (!targets[i].is_exclude()) return i;
    return std::nullopt;
}

// The distinct backends of the quantizing targets, with the first target using each: the
// environment rules compare backends, and there are far fewer of those than targets.
struct backend_use {
    const backend_descriptor* backend;
    std::size_t first_target;
};

constexpr std::vector<backend_use> distinct_backends(std::span<const target_info> targets) {
    std::vector<backend_use> uses;
    for (std::size_t i = 0; i < targets.size(); ++i) {
        if (targets[i].is_exclude()) continue;
        bool seen = false;
        for (const backend_use& use : uses) seen = seen || use.backend == targets[i].backend;
        if (!seen) uses.push_back({targets[i].backend, i});
    }
    return uses;
}

constexpr composition_check find_environment_conflict(std::span<const target_info> targets) {
    const std::vector<backend_use> uses = distinct_backends(targets);
    for (std::size_t i = 0; i < uses.size(); ++i)
        for (std::size_t j = i + 1; j < uses.size(); ++j)
            for (const environment_assignment& a : uses[i].backend->environment)
                for (const environment_assignment& b : uses[j].backend->environment)
                    if (a.name == b.name && a.value != b.value)
                        return {composition_rule::environments_must_agree, uses[i].first_target, uses[j].first_target,
                                a.name};
    return {};
}

// Overlaps in O(N log N): in path order a target's descendants follow it directly ('.' sorts
// before every other path character), so one pass with a stack of the paths that contain
// the current one meets every overlapping pair.
constexpr composition_check find_overlap(std::span<const target_info> targets) {
    std::vector<std::size_t> order(targets.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&targets](std::size_t a, std::size_t b) {
        return targets[a].path < targets[b].path || (targets[a].path == targets[b].path && a < b);
    });
    composition_check stray_exclude;
    std::vector<std::size_t> enclosing;
    for (const std::size_t current : order) {
        while (!enclosing.empty() && !contains(targets[enclosing.back()].path, targets[current].path))
            enclosing.pop_back();
        bool inside_quantizing = false;
        for (const std::size_t outer : enclosing) {
            if (!may_overlap(targets[outer], targets[current]))
                return {composition_rule::targets_must_not_overlap, std::min(outer, current), std::max(outer, current)};
            inside_quantizing = inside_quantizing || !targets[outer].is_exclude();
        }
        if (targets[current].is_exclude() && !inside_quantizing && stray_exclude.rule == composition_rule::ok)
            stray_exclude = {composition_rule::exclude_must_sit_inside_a_target, current, current};
        enclosing.push_back(current);
    }
    return stray_exclude;
}
}  // namespace detail

constexpr composition_check check_composition(std::span<const target_info> targets) {
    using enum composition_rule;
    for (std::size_t i = 0; i < targets.size(); ++i)
        if (const path_check path = check_module_path(targets[i].path); !path)
            return {path_must_be_valid, i, i, {}, path.rule};

    const std::optional<std::size_t> lead = detail::first_quantizing(targets);
    if (!lead) return {needs_a_quantizing_target};

    if (const composition_check overlap = detail::find_overlap(targets); !overlap) return overlap;

    const backend_descriptor& first = *targets[*lead].backend;
    device_set devices = first.supported_device_types;
    for (std::size_t i = *lead + 1; i < targets.size(); ++i) {
        if (targets[i].is_exclude()) continue;
        const backend_descriptor& backend = *targets[i].backend;
        if (backend.is_dynamic != first.is_dynamic) return {static_and_dynamic_must_not_mix, *lead, i};
        if (backend.is_qat != first.is_qat) return {qat_and_ptq_must_not_mix, *lead, i};
        devices = devices & backend.supported_device_types;
        if (devices.empty()) return {devices_must_intersect, *lead, i};
    }
    if (devices.empty()) return {devices_must_intersect, *lead, *lead};
    return detail::find_environment_conflict(targets);
}

// --- Queries on a composition that passed check_composition -------------------------------

constexpr device_set common_devices(std::span<const target_info> targets) noexcept {
    device_set devices = device_set::all();
    for (const target_info& target : targets)
        if (!target.is_exclude()) devices = devices & target.backend->supported_device_types;
    return devices;
}

constexpr bool all_dynamic(std::span<const target_info> targets) noexcept {
    const std::optional<std::size_t> lead = detail::first_quantizing(targets);
    return lead && targets[*lead].backend->is_dynamic;
}

constexpr bool all_qat(std::span<const target_info> targets) noexcept {
    const std::optional<std::size_t> lead = detail::first_quantizing(targets);
    return lead && targets[*lead].backend->is_qat;
}

// Static post-training targets learn activation ranges from calibration batches; dynamic
// ones take them at run time and QAT ones while training.
constexpr bool needs_calibration(std::span<const target_info> targets) noexcept {
    return detail::first_quantizing(targets) && !all_dynamic(targets) && !all_qat(targets);
}

// The target that decides how `module_name` is treated: the most specific one containing it
// (an Exclude inside a wider target wins there). nullopt when no target contains it.
constexpr std::optional<std::size_t> find_target(std::span<const target_info> targets,
                                                 std::string_view module_name) noexcept {
    std::optional<std::size_t> found;
    for (std::size_t i = 0; i < targets.size(); ++i)
        if (contains(targets[i].path, module_name) && (!found || targets[i].path.size() > targets[*found].path.size()))
            found = i;
    return found;
}

// Calls `visit(assignment)` once per distinct environment assignment, in target order.
template <class Visitor>
constexpr void for_each_environment_assignment(std::span<const target_info> targets, Visitor&& visit) {
    const std::vector<detail::backend_use> uses = detail::distinct_backends(targets);
    for (std::size_t i = 0; i < uses.size(); ++i)
        for (const environment_assignment& assignment : uses[i].backend->environment) {
            bool seen = false;
            for (std::size_t j = 0; j < i && !seen; ++j)
                for (const environment_assignment& earlier : uses[j].backend->environment)
                    seen = seen || earlier == assignment;
            if (!seen) visit(assignment);
        }
}

}  // namespace versatil

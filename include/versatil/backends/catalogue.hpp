// Every configured policy of the built-in backends, as descriptors, and the parser that maps
// a run-time spec ("xnnpack:per_tensor,dynamic") onto one of them: the one place where a
// run-time choice meets the compile-time policy types.
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "versatil/backends/builtin_families.hpp"
#include "versatil/backends/cortex_m.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/backend.hpp"
#include "versatil/core/result.hpp"

namespace versatil {

namespace detail {
template <std::size_t... N>
constexpr auto concatenate(const std::array<const backend_descriptor*, N>&... parts) {
    std::array<const backend_descriptor*, (N + ...)> all{};
    std::size_t next = 0;
    ((void)[&] {
        for (const backend_descriptor* descriptor : parts) all[next++] = descriptor;
    }(), ...);
    return all;
}

// A policy under every subset of its options that combine (options_combine): `Chosen` plus
// each subset of the rest.
template <template <auto...> class Policy, auto... Chosen>
struct option_subsets {
    template <auto... Rest>
    static constexpr auto of() {
        if constexpr (sizeof...(Rest) != 0)
            return without_and_with<Rest...>();
        else if constexpr (options_combine<Chosen...>)
            return std::array<const backend_descriptor*, 1>{&descriptor_of<Policy<Chosen...>>};
        else
            return std::array<const backend_descriptor*, 0>{};
    }
    template <auto First, auto... Rest>
    static constexpr auto without_and_with() {
        return concatenate(option_subsets<Policy, Chosen...>::template of<Rest...>(),
                           option_subsets<Policy, Chosen..., First>::template of<Rest...>());
    }
};

template <template <auto...> class Policy, auto... Options>
inline constexpr auto every_option_subset = option_subsets<Policy>::template of<Options...>();

// The same, and each combining subset again with each calibration method.
template <template <auto...> class Policy, auto... Options>
inline constexpr auto every_option_subset_and_calibration = concatenate(
    every_option_subset<Policy, Options...>,
    option_subsets<Policy, calibration<calibration_method::minmax>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::moving_minmax>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::histogram>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::percentile>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::entropy>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::automatic>>::template of<Options...>(),
    option_subsets<Policy, calibration<calibration_method::output>>::template of<Options...>());
}  // namespace detail

inline constexpr auto builtin_backends =
    detail::concatenate(detail::every_option_subset_and_calibration<X86Inductor, dynamic, qat, reduce_range, cle, bias_correction, gptq, adaround>,
                        detail::every_option_subset_and_calibration<XNNPACK, dynamic, qat, per_tensor, cle, bias_correction, gptq, adaround>,
                        detail::every_option_subset_and_calibration<CortexM, qat, per_tensor>);

static_assert(
    [] {
        for (const backend_descriptor* descriptor : builtin_backends)
            if (!detail::is_listed(descriptor->family, builtin_families{})) return false;
        return true;
    }(),
    "versatil: every backend in builtin_backends needs its policy template in builtin_families");

struct backend_spec_error {
    std::string message;
};

namespace detail {
constexpr std::string_view next_token(std::string_view& rest, char separator) noexcept {
    const std::size_t end = rest.find(separator);
    const std::string_view token = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    return token;
}

constexpr bool is_calibration(std::string_view option) noexcept {
    return option == "calibration" || option.starts_with("calibration=");
}

// Whether `options` lists `option`; "calibration" stands for any "calibration=METHOD".
constexpr bool lists_option(std::string_view options, std::string_view option) noexcept {
    while (!options.empty()) {
        const std::string_view token = next_token(options, ',');
        if (token == option || (option == "calibration" && is_calibration(token))) return true;
    }
    return false;
}

// The options of the backend `name` in any of its configurations, each after the one it follows
// in a configuration that has both (the widest configurations first), so in the policy's order.
inline std::vector<std::string_view> known_options(std::span<const backend_descriptor* const> catalogue,
                                                   std::string_view name) {
    std::vector<const backend_descriptor*> configurations;
    for (const backend_descriptor* descriptor : catalogue)
        if (descriptor->name == name) configurations.push_back(descriptor);
    const auto option_count = [](const backend_descriptor* d) {
        return d->options.empty() ? 0 : 1 + std::ranges::count(d->options, ',');
    };
    std::ranges::stable_sort(configurations, std::greater{}, option_count);
    std::vector<std::string_view> known;
    for (const backend_descriptor* descriptor : configurations) {
        auto after = known.begin();
        for (std::string_view rest = descriptor->options; !rest.empty();) {
            const std::string_view option = next_token(rest, ',');
            auto found = std::ranges::find(known, option);
            if (found == known.end()) found = known.insert(after, option);
            after = found + 1;
        }
    }
    return known;
}

}  // namespace detail

// The catalogue's backend names, each once, in the catalogue's order ("x86_inductor, xnnpack, cortex_m"):
// what error messages and the CLI's help list.
inline std::string backend_names_shown(std::span<const backend_descriptor* const> catalogue = builtin_backends) {
    std::vector<std::string_view> names;
    for (const backend_descriptor* descriptor : catalogue)
        if (std::ranges::find(names, descriptor->name) == names.end()) names.push_back(descriptor->name);
    std::string shown;
    for (const std::string_view name : names) shown.append(shown.empty() ? "" : ", ").append(name);
    return shown;
}

// The options backend `name` takes in any configuration, in the policy's order, the calibration
// methods as one "calibration=METHOD" ("dynamic qat per_tensor calibration=METHOD ...").
inline std::string backend_options_shown(std::string_view name,
                                         std::span<const backend_descriptor* const> catalogue = builtin_backends) {
    std::string list;
    bool calibration_listed = false;  // one "calibration=METHOD" for the six methods
    for (const std::string_view option : detail::known_options(catalogue, name)) {
        if (detail::is_calibration(option) && std::exchange(calibration_listed, true)) continue;
        list.append(list.empty() ? "" : " ").append(detail::is_calibration(option) ? "calibration=METHOD" : option);
    }
    return list;
}

// Parses "BACKEND[:OPT[,OPT]...]" (options in any order) into the catalogue's descriptor.
inline result<const backend_descriptor*, backend_spec_error> parse_backend_spec(
    std::string_view spec, std::span<const backend_descriptor* const> catalogue = builtin_backends) {
    const std::size_t colon = spec.find(':');
    const std::string_view name = spec.substr(0, colon);
    const std::string_view options = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);

    // Every option some configuration of the backend takes, in the policy's order (options that
    // do not combine are in no one configuration together).
    const std::vector<std::string_view> known = detail::known_options(catalogue, name);
    if (std::ranges::none_of(catalogue, [&](const backend_descriptor* d) { return d->name == name; }))
        return backend_spec_error{"unknown backend '" + std::string(name) +
                                  "' (known: " + backend_names_shown(catalogue) + ")"};

    const auto accepted = [&] {
        return " (" + std::string(name) + " accepts: " + backend_options_shown(name, catalogue) + ")";
    };
    if (colon != std::string_view::npos && options.empty())
        return backend_spec_error{"backend spec '" + std::string(spec) + "' has ':' but no option" + accepted()};

    if (options.starts_with(',') || options.ends_with(',') || options.find(",,") != std::string_view::npos)
        return backend_spec_error{"backend spec '" + std::string(spec) + "' has an empty option" + accepted()};
    std::size_t count = 0;
    for (std::string_view rest = options; !rest.empty();) {
        const std::string_view before = options.substr(0, options.size() - rest.size());
        const std::string_view option = detail::next_token(rest, ',');
        ++count;
        if (detail::is_calibration(option)) {
            const std::string_view method = option.substr(std::min(option.size(), std::size_t{12}));
            if (!parse_calibration_method(method))
                return backend_spec_error{
                    (method.empty() ? "option 'calibration' needs a method, calibration=METHOD"
                                    : "unknown calibration method '" + std::string(method) + "'") +
                    " in '" + std::string(spec) + "' (methods: " + std::string(calibration_method_names) + ")"};
            if (detail::lists_option(before, "calibration"))
                return backend_spec_error{"more than one calibration method in '" + std::string(spec) +
                                          "' (a target calibrates with one)"};
        }
        if (std::ranges::find(known, option) == known.end())
            return backend_spec_error{"unknown option '" + std::string(option) + "' for backend '" +
                                      std::string(name) + "'" + accepted()};
        if (detail::lists_option(before, option))
            return backend_spec_error{"option '" + std::string(option) + "' given twice in '" + std::string(spec) +
                                      "'"};
    }

    for (const option_conflict& conflict : option_conflicts)
        if (detail::lists_option(options, conflict.option) && detail::lists_option(options, conflict.other))
            return backend_spec_error{"options '" + std::string(conflict.option) + "' and '" +
                                      std::string(conflict.other) + "' do not combine in '" + std::string(spec) +
                                      "': " + std::string(conflict.reason)};

    for (const backend_descriptor* descriptor : catalogue) {
        if (descriptor->name != name) continue;
        std::size_t listed = descriptor->options.empty() ? 0 : 1;
        for (char c : descriptor->options) listed += c == ',' ? 1 : 0;
        bool all_given = listed == count;
        for (std::string_view rest = options; all_given && !rest.empty();)
            all_given = detail::lists_option(descriptor->options, detail::next_token(rest, ','));
        if (all_given) return descriptor;
    }
    return backend_spec_error{"backend '" + std::string(name) + "' has no configuration with options '" +
                              std::string(options) + "'"};
}

}  // namespace versatil

// `Quantizer<Targets...>`: targets composed and checked while compiling (the original's
// ComposableQuantizer). Every query is a constant; a composition that breaks a rule is a
// compile error naming the rule and, in the instantiation it shows, the targets involved.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>

#include <boost/hana/for_each.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "versatil/core/composition.hpp"
#include "versatil/core/target.hpp"
#include "versatil/environment/scoped_environment.hpp"

namespace versatil {

namespace detail {
// Instantiated only when a rule is broken, with the targets that break it (and, for an
// environment conflict, the variable), so the compiler prints them beside the rule.
template <composition_rule Rule, class First, class Second, fixed_string Variable>
struct composition_violation {
    static_assert(Rule != composition_rule::targets_must_not_overlap,
                  "versatil::Quantizer: targets overlap (same path, the whole model, or one nested in the other; "
                  "only an Exclude may sit inside a wider target)");
    static_assert(Rule != composition_rule::exclude_must_sit_inside_a_target,
                  "versatil::Quantizer: an Exclude must sit strictly inside a quantizing target");
    static_assert(Rule != composition_rule::static_and_dynamic_must_not_mix,
                  "versatil::Quantizer: static and dynamic targets do not mix");
    static_assert(Rule != composition_rule::qat_and_ptq_must_not_mix,
                  "versatil::Quantizer: QAT and post-training targets do not mix");
    static_assert(Rule != composition_rule::devices_must_intersect,
                  "versatil::Quantizer: the targets' backends share no device type");
    static_assert(Rule != composition_rule::environments_must_agree,
                  "versatil::Quantizer: two backends set one environment variable to different values");
    static_assert(Rule != composition_rule::needs_a_quantizing_target,
                  "versatil::Quantizer: no target quantizes anything (only Excludes)");
    static constexpr bool value = Rule == composition_rule::ok;
};

// The I-th type of a pack, or void past its end (an empty Quantizer reports a violation too).
template <std::size_t I, class... Ts>
struct nth_type {
    using type = void;
};
template <std::size_t I, class... Ts>
    requires(I < sizeof...(Ts))
struct nth_type<I, Ts...> {
    using type = std::tuple_element_t<I, std::tuple<Ts...>>;
};

template <class... Targets>
struct composition_of {
    static constexpr std::array<target_info, sizeof...(Targets)> targets{Targets::info...};
    static constexpr composition_check check = check_composition(targets);

    template <std::size_t I>
    using target = typename nth_type<I, Targets...>::type;

    static constexpr auto variable = [] {
        fixed_string<check.variable.size()> name{};
        for (std::size_t i = 0; i < check.variable.size(); ++i) name.chars[i] = check.variable[i];
        return name;
    }();

    static constexpr bool valid =
        composition_violation<check.rule, target<check.first>, target<check.second>, variable>::value;
};
}  // namespace detail

template <class... Targets>
class Quantizer {
    static_assert(sizeof...(Targets) > 0, "versatil::Quantizer: needs at least one target");
    using composition = detail::composition_of<Targets...>;
    static_assert(composition::valid);

    static constexpr std::span<const target_info> all = composition::targets;

    static constexpr std::size_t quantizing_count = (std::size_t{0} + ... + (Targets::is_exclude ? 0 : 1));
    static constexpr std::size_t environment_count = [] {
        std::size_t count = 0;
        for_each_environment_assignment(all, [&count](const environment_assignment&) { ++count; });
        return count;
    }();

public:
    // Every target, Excludes included, in the order given.
    static constexpr const std::array<target_info, sizeof...(Targets)>& targets = composition::targets;
    static constexpr std::size_t size = sizeof...(Targets);

    // One quantizer per quantizing target (Excludes skipped), in order: what the original
    // hands to ComposableQuantizer.
    static constexpr std::array<backend_quantizer, quantizing_count> quantizers = [] {
        std::array<backend_quantizer, quantizing_count> result{};
        std::size_t next = 0;
        for (const target_info& target : all)
            if (!target.is_exclude()) result[next++] = backend_quantizer{target.backend, target.path};
        return result;
    }();

    static constexpr std::array<std::string_view, quantizing_count> backend_names = [] {
        std::array<std::string_view, quantizing_count> names{};
        for (std::size_t i = 0; i < quantizing_count; ++i) names[i] = quantizers[i].backend_name();
        return names;
    }();

    static constexpr bool is_dynamic = all_dynamic(all);
    static constexpr bool is_qat = all_qat(all);
    static constexpr bool needs_calibration = versatil::needs_calibration(all);
    static constexpr device_set supported_device_types = common_devices(all);

    // The distinct variables every backend sets, in target order.
    static constexpr std::array<environment_assignment, environment_count> environment = [] {
        std::array<environment_assignment, environment_count> result{};
        std::size_t next = 0;
        for_each_environment_assignment(all, [&](const environment_assignment& a) { result[next++] = a; });
        return result;
    }();

    // The quantizer that applies to `module_name`, or nullopt when the module stays float
    // (no target contains it, or an Exclude does).
    static constexpr std::optional<backend_quantizer> quantizer_for(std::string_view module_name) noexcept {
        const std::optional<std::size_t> index = find_target(all, module_name);
        if (!index || all[*index].is_exclude()) return std::nullopt;
        return backend_quantizer{all[*index].backend, all[*index].path};
    }

    // One scope that applies every distinct backend environment and restores them all.
    template <EnvironmentStore Store = default_environment>
    [[nodiscard]] static auto environment_context() {
        return scoped_environment<Store, environment_count>(environment);
    }

    template <EnvironmentStore Store = default_environment>
    static bool activate_environment() {
        return activate<Store>(environment);
    }

    // Calls `visit(boost::hana::type_c<Target>)` for each target type, in order: how a layer
    // above reaches each target's policy type (the LibTorch layer checks that each can lower).
    template <class Visitor>
    static constexpr void for_each_target(Visitor&& visit) {
        boost::hana::for_each(boost::hana::tuple_t<Targets...>, visit);
    }
};

}  // namespace versatil

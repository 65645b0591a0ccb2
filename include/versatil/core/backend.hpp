// The backend contract (the original's BasePT2EBackend) as a concept, and a base that
// implements the contract's functions from a policy's constexpr traits.
//
// A model of Backend provides, usable in constant expressions:
//   name                     std::string_view, the serialized backend name
//   is_dynamic, is_qat       bool
//   supported_device_types   device_set
// and the functions
//   create_quantizer(std::string_view module_path) -> backend_quantizer (constexpr)
//   environment_context()    -> a scope that sets the backend's environment until it ends
//   activate_environment()   sets it for good
// Models: X86Inductor<...>, XNNPACK<...>, CortexM<...> (versatil/backends/).
#pragma once

#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "versatil/core/backend_descriptor.hpp"
#include "versatil/core/backend_quantizer.hpp"
#include "versatil/environment/scoped_environment.hpp"

namespace versatil {

namespace detail {
// One concept per member, so a failed check names the member that is missing.
template <class B>
concept backend_declares_name =
    requires { typename std::integral_constant<std::size_t, std::string_view(B::name).size()>; };
template <class B>
concept backend_declares_is_dynamic = requires { typename std::bool_constant<B::is_dynamic>; };
template <class B>
concept backend_declares_is_qat = requires { typename std::bool_constant<B::is_qat>; };
template <class B>
concept backend_declares_supported_device_types =
    std::same_as<std::remove_cvref_t<decltype(B::supported_device_types)>, device_set> &&
    requires { typename std::bool_constant<B::supported_device_types.empty()>; };
template <class B>
concept backend_declares_create_quantizer = requires(std::string_view path) {
    { B::create_quantizer(path) } -> std::same_as<backend_quantizer>;
};
template <class B>
concept backend_declares_environment_context = requires { B::environment_context(); };
template <class B>
concept backend_declares_activate_environment = requires { B::activate_environment(); };
}  // namespace detail

template <class B>
concept Backend = detail::backend_declares_name<B> && detail::backend_declares_is_dynamic<B> &&
                  detail::backend_declares_is_qat<B> && detail::backend_declares_supported_device_types<B> &&
                  detail::backend_declares_create_quantizer<B> && detail::backend_declares_environment_context<B> &&
                  detail::backend_declares_activate_environment<B>;

// The same check as `Backend`, one assertion per member, for entry points that take a
// backend (Target): the message names the member the type lacks.
template <class B>
consteval bool check_backend() {
    static_assert(detail::backend_declares_name<B>,
                  "versatil::Backend: the type lacks 'name' (a constexpr std::string_view: the serialized name)");
    static_assert(detail::backend_declares_is_dynamic<B>, "versatil::Backend: the type lacks 'is_dynamic' (a constexpr bool)");
    static_assert(detail::backend_declares_is_qat<B>, "versatil::Backend: the type lacks 'is_qat' (a constexpr bool)");
    static_assert(detail::backend_declares_supported_device_types<B>,
                  "versatil::Backend: the type lacks 'supported_device_types' (a constexpr versatil::device_set)");
    static_assert(detail::backend_declares_create_quantizer<B>,
                  "versatil::Backend: the type lacks 'create_quantizer(std::string_view) -> backend_quantizer'");
    static_assert(detail::backend_declares_environment_context<B>,
                  "versatil::Backend: the type lacks 'environment_context()'");
    static_assert(detail::backend_declares_activate_environment<B>,
                  "versatil::Backend: the type lacks 'activate_environment()'");
    return true;
}

// The descriptor of a policy that declares `config`, `environment` and `options` besides
// the contract's traits.
template <class Policy>
inline constexpr backend_descriptor descriptor_of{Policy::name,   Policy::is_dynamic, Policy::is_qat,
                                                  Policy::supported_device_types, Policy::config,
                                                  Policy::environment, Policy::options,
                                                  family_of_policy<Policy>};

// Implements the contract's functions for `Policy` (CRTP, resolved at compile time): the
// functions are static, so a policy is used as a type (`XNNPACK<>::create_quantizer("")`)
// or through a value of it alike.
template <class Policy>
struct backend_policy {
    static constexpr backend_quantizer create_quantizer(std::string_view module_path) noexcept {
        return {&descriptor_of<Policy>, module_path};
    }

    // Sets the backend's environment; the returned scope restores it when it ends.
    template <EnvironmentStore Store = default_environment>
    [[nodiscard]] static auto environment_context() {
        return scoped_environment<Store, Policy::environment.size()>(Policy::environment);
    }

    // Sets the backend's environment for good (for work deferred past any scope).
    template <EnvironmentStore Store = default_environment>
    static bool activate_environment() {
        return activate<Store>(Policy::environment);
    }
};

}  // namespace versatil

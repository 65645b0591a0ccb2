// The policy through which versatil reads and writes environment variables. Hosted builds
// use the process environment; firmware plugs in `null_environment` or its own store.
//
// A model of EnvironmentStore provides static functions:
//   get(std::string_view name)   -> std::optional<std::string>  (nullopt: not set)
//   set(std::string_view name, std::string_view value) -> bool  (false: not applied)
//   unset(std::string_view name) -> bool
#pragma once

#include <concepts>
#include <optional>
#include <string>
#include <string_view>

namespace versatil {

template <class Store>
concept EnvironmentStore = requires(std::string_view name, std::string_view value) {
    { Store::get(name) } -> std::same_as<std::optional<std::string>>;
    { Store::set(name, value) } -> std::same_as<bool>;
    { Store::unset(name) } -> std::same_as<bool>;
};

}  // namespace versatil

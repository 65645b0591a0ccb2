// The policy through which versatil reads and writes environment variables. Hosted builds
// use the process environment; firmware plugs in `null_environment` or its own store.
//
// A model of EnvironmentStore provides static functions:
//   get(std::string_view name)   -> std::optional<std::string>  (nullopt: not set)
//   set(std::string_view name, std::string_view value) -> bool  (false: not applied)
//   unset(std::string_view name) -> bool
//
// A store shared by threads may also model LayeredEnvironmentStore: each scope's value is a
// layer over the variable's value from before any scope, so scopes closed in any order (two
// threads interleaving) leave the variable as it was once every scope is closed:
//   push_layer(std::string_view name, std::string_view value, const void* owner) -> bool
//   pop_layer(std::string_view name, const void* owner) -> bool  (owner's latest layer)
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

template <class Store>
concept LayeredEnvironmentStore =
    EnvironmentStore<Store> && requires(std::string_view name, std::string_view value, const void* owner) {
        { Store::push_layer(name, value, owner) } -> std::same_as<bool>;
        { Store::pop_layer(name, owner) } -> std::same_as<bool>;
    };

}  // namespace versatil

// An environment store that holds nothing and changes nothing: for firmware, where there is
// no process environment, and for code that wants the backend traits without side effects.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace versatil {

struct null_environment {
    static std::optional<std::string> get(std::string_view) { return std::nullopt; }
    static bool set(std::string_view, std::string_view) noexcept { return true; }
    static bool unset(std::string_view) noexcept { return true; }
};

}  // namespace versatil

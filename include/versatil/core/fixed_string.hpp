// A string literal usable as a template argument, so a module path is part of a type
// (`Target<"encoder", XNNPACK<>>`) and shows verbatim in compiler diagnostics.
#pragma once

#include <cstddef>
#include <string_view>

namespace versatil {

template <std::size_t N>
struct fixed_string {
    char chars[N + 1]{};

    constexpr fixed_string() noexcept = default;
    constexpr fixed_string(const char (&literal)[N + 1]) noexcept {
        for (std::size_t i = 0; i <= N; ++i) chars[i] = literal[i];
    }

    constexpr std::string_view view() const noexcept { return {chars, N}; }
    constexpr operator std::string_view() const noexcept { return view(); }
    static constexpr std::size_t size() noexcept { return N; }
};

template <std::size_t M>
fixed_string(const char (&)[M]) -> fixed_string<M - 1>;

}  // namespace versatil

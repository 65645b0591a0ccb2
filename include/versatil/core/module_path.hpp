// Dotted module paths ("encoder.layers.0"), one set of rules for paths known while
// compiling (template arguments) and paths known only at run time (std::string_view).
// "" names the whole model.
#pragma once

#include <cstddef>
#include <string_view>

namespace versatil {

enum class path_rule : unsigned char {
    ok,
    component_must_not_be_empty,      // leading, trailing or doubled '.'
    component_must_be_identifier,     // a character outside [A-Za-z0-9_-]
    identifier_must_not_start_with_digit,  // "0abc": neither identifier nor index
    index_must_not_have_leading_zero,  // "01": no container names a child so
};

constexpr std::string_view to_string(path_rule rule) noexcept {
    switch (rule) {
        case path_rule::ok: return "ok";
        case path_rule::component_must_not_be_empty: return "a path component is empty (leading, trailing or doubled '.')";
        case path_rule::component_must_be_identifier: return "a path component holds a character other than letters, digits, '_' and '-'";
        case path_rule::identifier_must_not_start_with_digit: return "a path component starts with a digit but is not an index";
        case path_rule::index_must_not_have_leading_zero: return "an index component has a leading zero";
    }
    return "unknown";
}

struct path_check {
    path_rule rule = path_rule::ok;
    std::size_t position = 0;  // offset of the offending component in the path

    constexpr explicit operator bool() const noexcept { return rule == path_rule::ok; }
};

namespace detail {
constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
// '-' too: torchvision's RegNet names its blocks "block1-0" (nn.Module.add_module takes any name
// without '.'), and a path must reach every module a real model has.
constexpr bool is_name_char(char c) noexcept {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

constexpr path_rule check_component(std::string_view component) noexcept {
    if (component.empty()) return path_rule::component_must_not_be_empty;
    bool all_digits = true;
    for (char c : component) {
        if (!is_name_char(c)) return path_rule::component_must_be_identifier;
        all_digits = all_digits && is_digit(c);
    }
    if (all_digits) return component.size() > 1 && component[0] == '0' ? path_rule::index_must_not_have_leading_zero
                                                                         : path_rule::ok;
    return is_digit(component[0]) ? path_rule::identifier_must_not_start_with_digit : path_rule::ok;
}
}  // namespace detail

// Checks a path's syntax: "" (whole model), or '.'-separated components, each a name (a Python
// identifier, or one with '-' as in RegNet's `block1-0`) or a child index such as the `0` in
// `layers.0`.
constexpr path_check check_module_path(std::string_view path) noexcept {
    if (path.empty()) return {};
    std::size_t start = 0;
    while (true) {
        const std::size_t dot = path.find('.', start);
        const std::string_view component = path.substr(start, dot == std::string_view::npos ? path.npos : dot - start);
        if (const path_rule rule = detail::check_component(component); rule != path_rule::ok) return {rule, start};
        if (dot == std::string_view::npos) return {};
        start = dot + 1;
    }
}

constexpr bool is_valid_module_path(std::string_view path) noexcept { return static_cast<bool>(check_module_path(path)); }

// Whether the module named `module_name` lies under `path` (the path itself, a descendant,
// or anything when `path` is the whole model), as the original's target matching does.
constexpr bool contains(std::string_view path, std::string_view module_name) noexcept {
    if (path.empty() || module_name == path) return true;
    return module_name.size() > path.size() && module_name.substr(0, path.size()) == path &&
           module_name[path.size()] == '.';
}

// Two targets overlap when they are the same path, either is the whole model, or one is
// nested in the other.
constexpr bool overlaps(std::string_view a, std::string_view b) noexcept { return contains(a, b) || contains(b, a); }

// Nesting depth: 0 for the whole model, 1 for "encoder", 2 for "encoder.0".
constexpr std::size_t depth(std::string_view path) noexcept {
    if (path.empty()) return 0;
    std::size_t count = 1;
    for (char c : path) count += c == '.' ? 1 : 0;
    return count;
}

}  // namespace versatil

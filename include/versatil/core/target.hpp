// `Target<"encoder", XNNPACK<>>` aims a backend at one module path ("" = whole model);
// `Exclude<"encoder.norm">` keeps a module inside a wider target float.
#pragma once

#include <string_view>

#include "versatil/core/backend.hpp"
#include "versatil/core/composition.hpp"
#include "versatil/core/fixed_string.hpp"
#include "versatil/core/module_path.hpp"

namespace versatil {

namespace detail {
// Instantiated with the offending path, so the diagnostic shows it; one assertion per rule.
template <fixed_string Path, path_rule Rule = check_module_path(Path).rule>
struct check_path {
    static_assert(Rule != path_rule::component_must_not_be_empty,
                  "versatil::Target: invalid module path: a component is empty (leading, trailing or doubled '.')");
    static_assert(Rule != path_rule::component_must_be_identifier,
                  "versatil::Target: invalid module path: a component holds a character other than letters, digits, "
                  "'_' and '-'");
    static_assert(Rule != path_rule::identifier_must_not_start_with_digit,
                  "versatil::Target: invalid module path: a component starts with a digit but is not an index");
    static_assert(Rule != path_rule::index_must_not_have_leading_zero,
                  "versatil::Target: invalid module path: an index component has a leading zero");
    static constexpr bool value = Rule == path_rule::ok;
};
}  // namespace detail

template <fixed_string Path, class B>
struct Target {
    static_assert(check_backend<B>());
    static_assert(detail::check_path<Path>::value);

    using backend = B;
    static constexpr std::string_view path = Path;
    static constexpr bool is_exclude = false;
    static constexpr backend_quantizer quantizer = B::create_quantizer(path);
    static constexpr target_info info{path, quantizer.backend};
};

template <fixed_string Path>
struct Exclude {
    static_assert(detail::check_path<Path>::value);

    static constexpr std::string_view path = Path;
    static constexpr bool is_exclude = true;
    static constexpr target_info info{path, nullptr};
};

}  // namespace versatil

// The built-in backends' policy templates, as a list: what layers above the core give traits to
// (the LibTorch layer's lowering) without the catalogue of every configured policy, whose
// hundreds of instantiations cost each translation unit that includes it seconds of compile time.
#pragma once

#include "versatil/backends/cortex_m.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/backend_family.hpp"

namespace versatil {

// Every configured policy of the catalogue (catalogue.hpp) is of one of these.
using builtin_families = family_list<X86Inductor, XNNPACK, CortexM>;

namespace detail {
template <template <auto...> class... Policies>
constexpr bool is_listed(const backend_family* family, family_list<Policies...>) {
    return ((family == &family_of<Policies>) || ...);
}
}  // namespace detail

}  // namespace versatil

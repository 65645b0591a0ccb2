// Which policy template a configured policy comes from: X86Inductor<> and
// X86Inductor<dynamic, reduce_range> are one family. Layers above the core key their
// per-backend facts on the family (the LibTorch layer's lowering traits), never on the
// serialized name, so a backend is known by its type wherever it is configured.
#pragma once

#include <string_view>

namespace versatil {

// One object per policy template; its address is the family's identity.
struct backend_family {
    std::string_view name;
};

template <template <auto...> class Policy>
inline constexpr backend_family family_of{Policy<>::name};

namespace detail {
template <class Policy>
struct policy_family {
    static constexpr const backend_family* value = nullptr;  // a policy that is no template of options
};
template <template <auto...> class Policy, auto... Options>
struct policy_family<Policy<Options...>> {
    static constexpr const backend_family* value = &family_of<Policy>;
};
}  // namespace detail

// The family of a configured policy, or nullptr for a policy that is not a template of options.
template <class Policy>
inline constexpr const backend_family* family_of_policy = detail::policy_family<Policy>::value;

// A list of policy templates, as the catalogue and the layers above enumerate them.
template <template <auto...> class... Policies>
struct family_list {};

}  // namespace versatil

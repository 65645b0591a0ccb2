// One environment variable a backend sets while it is active (`TORCHINDUCTOR_FREEZING=1`).
#pragma once

#include <string_view>

namespace versatil {

struct environment_assignment {
    std::string_view name;
    std::string_view value;

    friend constexpr bool operator==(const environment_assignment&, const environment_assignment&) = default;
};

}  // namespace versatil

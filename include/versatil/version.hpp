// The library's version, as stored in the metadata of every model it saves.
#pragma once

#include <string_view>

namespace versatil {
inline constexpr std::string_view version = "0.1.0";
}

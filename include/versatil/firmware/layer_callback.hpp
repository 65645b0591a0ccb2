// The per-layer callback of an exported model's run (codegen/header_writer.hpp): called as
// on_layer(event, layer, module) before and after each layer, e.g. to time layers on a board
// (examples/firmware/layer_timing.cpp). The default does nothing and is inlined away, so a
// run without a callback compiles to the same code as one without the calls
// (tests/firmware/check_c_header.py measures it).
#pragma once

#include <cstddef>

namespace versatil::firmware {

enum class layer_event : unsigned char { starts, ends };

struct no_layer_callback {
    constexpr void operator()(layer_event, std::size_t, const char*) const noexcept {}
};

}  // namespace versatil::firmware

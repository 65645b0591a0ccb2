// An elementwise op of one int8 tensor given as its 256 outputs: sigmoid, hardsigmoid,
// hardswish, tanh, a multiplication by a constant, a requantization to other scales. The code
// generator builds the table at export by running the model's own op on every input level,
// so the kernel gives LibTorch's bytes by construction, whatever rounding LibTorch's kernel
// does. Element i is read before it is written: in place is safe.
#pragma once

#include <cstdint>

namespace versatil::firmware {

inline constexpr int lookup_table_size = 256;

struct lookup_params {
    int elements = 0;
    const std::int8_t* table = nullptr;  // table[level + 128] for every int8 level
};

inline void lookup(const lookup_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int i = 0; i < p.elements; ++i) output[i] = p.table[input[i] + 128];
}

}  // namespace versatil::firmware

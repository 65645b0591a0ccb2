// Concatenation of up to max_concat_parts int8 tensors along channels, height or width. In the
// channels-height-width order the output is `outer` runs, each the parts' runs one after the
// other: along channels one run (the parts' whole bytes), along height one per channel, along
// width one per row. A part quantized otherwise than the output goes through its table (the
// requantization LibTorch does, built at export as lookup.hpp's are); a part that shares the
// output's quantization is copied. The output needs bytes of its own.
#pragma once

#include <cstdint>

namespace versatil::firmware {

inline constexpr int max_concat_parts = 4;

struct concat_params {
    int parts = 0;
    int outer = 1;                                   // runs per part
    int run[max_concat_parts] = {};                  // each part's run length, in levels
    const std::int8_t* tables[max_concat_parts] = {};  // nullptr: the part is copied as it is
};

inline void concat(const concat_params& p, const std::int8_t* const* inputs, std::int8_t* output) noexcept {
    for (int o = 0; o < p.outer; ++o)
        for (int k = 0; k < p.parts; ++k) {
            const std::int8_t* from = inputs[k] + o * p.run[k];
            const std::int8_t* table = p.tables[k];
            if (table == nullptr)
                for (int i = 0; i < p.run[k]; ++i) *output++ = from[i];
            else
                for (int i = 0; i < p.run[k]; ++i) *output++ = table[from[i] + 128];
        }
}

}  // namespace versatil::firmware

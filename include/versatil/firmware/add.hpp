// Elementwise add of two int8 tensors with their own quantization (TFLite's reference int8
// add): each input, offset to its zero point, is shifted left by 20 bits and rescaled by
// scale / (2 * max scale); the sum is rescaled by 2 * max scale / (2^20 * output scale).
// Each rescale rounds once (output_stage.hpp's rescale, TFLite Micro's single rounding).
// Element i is read before it is written, so the output may be either input (in place).
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct add_params {
    int elements = 0;
    int left_shift = 20;
    std::int32_t input1_offset = 0, input2_offset = 0;  // minus each input's zero point
    std::int32_t output_offset = 0;                     // the output zero point
    math::fixed_point_multiplier input1_multiplier, input2_multiplier, output_multiplier;
    activation_range range;
};

inline void add(const add_params& p, const std::int8_t* input1, const std::int8_t* input2, std::int8_t* output) noexcept {
    for (int i = 0; i < p.elements; ++i) {
        const std::int32_t shifted1 = (input1[i] + p.input1_offset) * (std::int32_t{1} << p.left_shift);
        const std::int32_t shifted2 = (input2[i] + p.input2_offset) * (std::int32_t{1} << p.left_shift);
        const std::int32_t sum = rescale(shifted1, p.input1_multiplier) + rescale(shifted2, p.input2_multiplier);
        output[i] = to_output(rescale(sum, p.output_multiplier), p.output_offset, p.range);
    }
}

}  // namespace versatil::firmware

// Elementwise add of two int8 tensors with their own quantization, rounded as LibTorch's engine
// (QNNPACK's q8vadd) rounds it: each input, offset to its zero point, is multiplied by its scale
// ratio to the output (scale / output scale) held as an integer below 2^22 at a common power of
// two, the two products are summed, and the sum is divided by that power of two with one
// rounding, half away from zero. TFLite's add (inputs shifted left by 20, then three rescales
// rounded separately) put one output in a hundred thousand a level off QNNPACK's and, over the
// residual blocks of a network, up to 2 levels. Element i is read before it is written, so the
// output may be either input (in place).
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct add_params {
    int elements = 0;
    std::int32_t input1_offset = 0, input2_offset = 0;  // minus each input's zero point
    std::int32_t output_offset = 0;                     // the output zero point
    // scale / output scale * 2^shift, rounded half to even; the larger in [2^21, 2^22), so
    // |level * multiplier| < 2^30 and the sum stays in 32 bits.
    std::int32_t input1_multiplier = 0, input2_multiplier = 0;
    int shift = 0;  // 13..31: 21 minus the larger ratio's power of two
    activation_range range;
};

inline void add(const add_params& p, const std::int8_t* input1, const std::int8_t* input2, std::int8_t* output) noexcept {
    for (int i = 0; i < p.elements; ++i) {
        const std::int32_t sum = (input1[i] + p.input1_offset) * p.input1_multiplier +
                                 (input2[i] + p.input2_offset) * p.input2_multiplier;
        output[i] = to_output(math::rounding_divide_by_power_of_two(sum, p.shift), p.output_offset, p.range);
    }
}

}  // namespace versatil::firmware

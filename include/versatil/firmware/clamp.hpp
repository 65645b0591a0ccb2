// A clamp (relu, relu6, hardtanh) that could not be folded into its producer's output range:
// rescaled to the output's quantization (an exact identity when input and output share it)
// and clamped. Element i is read before it is written: in place is safe.
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct clamp_params {
    int elements = 0;
    std::int32_t input_offset = 0;   // minus the input zero point
    std::int32_t output_offset = 0;  // the output zero point
    math::fixed_point_multiplier multiplier;  // input scale / output scale
    activation_range range;
};

inline void clamp(const clamp_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int i = 0; i < p.elements; ++i)
        output[i] = requantize_output(input[i] + p.input_offset, 0, p.multiplier, p.output_offset, p.range);
}

}  // namespace versatil::firmware

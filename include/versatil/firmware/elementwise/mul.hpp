// Elementwise product of two int8 tensors with their own quantization, the second either of
// the output's shape or one value per channel broadcast over the plane (squeeze-and-excite's
// gate, [C, 1, 1]) or one value for all: (a - za) * (b - zb) is exact in 32 bits, rescaled by
// scale_a * scale_b / scale_out with one rounding (output_stage.hpp) and clamped. Element i of
// the first input is read before element i is written: the output may take its bytes.
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct mul_params {
    shape output;  // and the first input's
    shape input2;  // output-shaped, {channels, 1, 1} or {1, 1, 1}
    std::int32_t input1_offset = 0, input2_offset = 0;  // minus each input's zero point
    std::int32_t output_offset = 0;                     // the output zero point
    math::fixed_point_multiplier multiplier;            // scale_a * scale_b / scale_out
    activation_range range;
};

// The second input's shape is one mul broadcasts.
constexpr bool broadcastable(const mul_params& p) noexcept {
    const bool per_channel = p.input2.channels == p.output.channels && p.input2.plane() == 1;
    return p.input2 == p.output || per_channel || p.input2.elements() == 1;
}

inline void mul(const mul_params& p, const std::int8_t* input1, const std::int8_t* input2, std::int8_t* output) noexcept {
    const int plane = p.output.plane(), channels = p.output.channels;
    const bool full = p.input2 == p.output, per_channel = !full && p.input2.channels == channels;
    for (int c = 0; c < channels; ++c) {
        const int at = c * plane;
        const std::int32_t channel_value = input2[per_channel ? c : 0] + p.input2_offset;
        for (int i = at; i < at + plane; ++i) {
            const std::int32_t b = full ? input2[i] + p.input2_offset : channel_value;
            output[i] = requantize_output((input1[i] + p.input1_offset) * b, 0, p.multiplier, p.output_offset, p.range);
        }
    }
}

}  // namespace versatil::firmware

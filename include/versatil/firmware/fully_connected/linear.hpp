// Fully connected layer, int8 (TFLite's reference kernel): weights [out][in], one
// fixed-point multiplier per output feature (a per-tensor scale repeated), bias at
// input_scale * weight_scale[o]. Every output reads the whole input: never in place.
#pragma once

#include <cstdint>

#include "versatil/firmware/dot.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/math/requantize.hpp"

namespace versatil::firmware {

struct linear_params {
    int in_features = 0, out_features = 0;
    std::int32_t input_offset = 0;   // minus the input zero point
    std::int32_t output_offset = 0;  // the output zero point
    activation_range range;
    const std::int8_t* weights = nullptr;
    const std::int32_t* bias = nullptr;  // one per output feature, or none
    const math::fixed_point_multiplier* multipliers = nullptr;  // one per output feature
};

inline void linear(const linear_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int o = 0; o < p.out_features; ++o) {
        const std::int32_t sum = dot(input, p.weights + o * p.in_features, p.in_features, p.input_offset);
        output[o] = requantize_output(sum, p.bias != nullptr ? p.bias[o] : 0, p.multipliers[o], p.output_offset, p.range);
    }
}

}  // namespace versatil::firmware

// Softmax over the channels of an int8 tensor (a row of logits is {classes, 1, 1}; a map of
// per-pixel logits is softmaxed per pixel), into probabilities at scale 1/256 and zero point
// -128 (TFLite Micro's int8 softmax output, which keeps 0 and 1 exact at both ends of int8).
// Only level differences matter: exp(scale * (x - max)) for the 256 differences a row can
// hold is a table the code generator builds at export, in units of 2^-exp_bits with
// exp_bits chosen so that the sum over all classes fits 32 bits; then each output is
// exp_i * 256 / sum rounded half up, less 128. Reads every input of a pixel before writing
// its outputs: not in place (the output tensor is its own).
#pragma once

#include <cstdint>

#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

inline constexpr double softmax_output_scale = 1.0 / 256.0;
inline constexpr std::int32_t softmax_output_zero_point = -128;

struct softmax_params {
    shape input;                             // softmax over input.channels, per pixel of the plane
    const std::uint32_t* exp_table = nullptr;  // exp_table[max - x] = exp(scale * (x - max)) * 2^exp_bits
};

// The most a table entry may be (the entry for the largest logit) so that `classes` of them sum
// in 32 bits and one times 256 fits too: the code generator's choice of units.
constexpr std::uint32_t softmax_table_one(int classes) noexcept {
    std::uint32_t one = std::uint32_t{1} << 23;
    while (one > 1 && static_cast<std::uint64_t>(one) * static_cast<std::uint64_t>(classes) > 0xffffffffu) one >>= 1;
    return one;
}

static_assert(softmax_table_one(1) <= (std::uint32_t{1} << 23), "e * 256 must stay below 2^31");

inline void softmax(const softmax_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    const int plane = p.input.plane();
    for (int at = 0; at < plane; ++at) {
        std::int32_t largest = -128;
        for (int c = 0; c < p.input.channels; ++c)
            if (input[c * plane + at] > largest) largest = input[c * plane + at];
        std::uint32_t sum = 0;
        for (int c = 0; c < p.input.channels; ++c) sum += p.exp_table[largest - input[c * plane + at]];
        for (int c = 0; c < p.input.channels; ++c) {
            const std::uint32_t e = p.exp_table[largest - input[c * plane + at]];
            // e <= 2^23 and sum < 2^32: e * 256 + sum / 2 < 2^32, one 32-bit division (UDIV).
            const std::uint32_t level = (e * 256u + sum / 2) / sum;
            output[c * plane + at] = static_cast<std::int8_t>((level > 255u ? 255 : static_cast<std::int32_t>(level)) - 128);
        }
    }
}

}  // namespace versatil::firmware

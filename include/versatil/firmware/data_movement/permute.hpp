// A permutation of the three axes of an int8 tensor (channels, height, width), as
// tensor.permute / transpose followed by contiguous: output element (a, b, c) is the input
// element at a * step[0] + b * step[1] + c * step[2], each step the input stride of the axis
// the output's axis comes from. The output needs bytes of its own.
#pragma once

#include <cstdint>

#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

struct permute_params {
    shape input, output;
    int axes[3] = {0, 1, 2};  // output axis i is input axis axes[i]
};

constexpr int input_stride(const shape& s, int axis) noexcept {
    return axis == 0 ? s.plane() : (axis == 1 ? s.width : 1);
}

constexpr int extent(const shape& s, int axis) noexcept {
    return axis == 0 ? s.channels : (axis == 1 ? s.height : s.width);
}

// The axes are a permutation and the output's extents follow from them.
constexpr bool axes_match(const permute_params& p) noexcept {
    bool seen[3] = {};
    for (int axis : p.axes) {
        if (axis < 0 || axis > 2 || seen[axis]) return false;
        seen[axis] = true;
    }
    for (int i = 0; i < 3; ++i)
        if (extent(p.output, i) != extent(p.input, p.axes[i])) return false;
    return true;
}

inline void permute(const permute_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    const int s0 = input_stride(p.input, p.axes[0]), s1 = input_stride(p.input, p.axes[1]),
              s2 = input_stride(p.input, p.axes[2]);
    for (int a = 0; a < p.output.channels; ++a)
        for (int b = 0; b < p.output.height; ++b)
            for (int c = 0; c < p.output.width; ++c) *output++ = input[a * s0 + b * s1 + c * s2];
}

}  // namespace versatil::firmware

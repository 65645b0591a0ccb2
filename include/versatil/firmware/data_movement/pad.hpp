// Constant padding of an int8 tensor on any of its three axes (channels, height, width): the
// input placed `before[axis]` levels into each axis of the output, everything around it the
// pad value's level (for F.pad's default 0.0, the zero point). The output needs bytes of its
// own.
#pragma once

#include <cstdint>

#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

struct pad_params {
    shape input, output;
    int before[3] = {};  // levels added before each axis; after it: output extent - input extent - before
    std::int8_t value = 0;
};

constexpr bool padding_fits(const pad_params& p) noexcept {
    const int in[] = {p.input.channels, p.input.height, p.input.width};
    const int out[] = {p.output.channels, p.output.height, p.output.width};
    for (int axis = 0; axis < 3; ++axis)
        if (p.before[axis] < 0 || in[axis] + p.before[axis] > out[axis]) return false;
    return p.input.elements() > 0;
}

inline void pad(const pad_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int c = 0; c < p.output.channels; ++c) {
        const int ic = c - p.before[0];
        for (int y = 0; y < p.output.height; ++y) {
            const int iy = y - p.before[1];
            const bool row_inside = ic >= 0 && ic < p.input.channels && iy >= 0 && iy < p.input.height;
            for (int x = 0; x < p.output.width; ++x) {
                const int ix = x - p.before[2];
                *output++ = row_inside && ix >= 0 && ix < p.input.width
                                ? input[(ic * p.input.height + iy) * p.input.width + ix]
                                : p.value;
            }
        }
    }
}

}  // namespace versatil::firmware

// Max pooling, int8: the largest level among the valid taps (padding is minus infinity, as in
// PyTorch), clamped to the activation range. Input and output share their quantization, as
// LibTorch's quantized pooling keeps it. Same order of work as conv2d.hpp (channel, row,
// column; each level written after its taps are read): in place is safe where in_place.hpp
// says so.
#pragma once

#include <cstdint>

#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

struct max_pool2d_params {
    shape input, output;
    window win;
    activation_range range;
};

inline void max_pool2d(const max_pool2d_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    for (int c = 0; c < p.output.channels; ++c) {
        const std::int8_t* plane = input + c * p.input.plane();
        for (int oy = 0; oy < p.output.height; ++oy) {
            const int iy0 = oy * p.win.stride_h - p.win.padding_h;
            const tap_range rows = valid_taps(iy0, p.win.kernel_h, p.win.dilation_h, p.input.height);
            for (int ox = 0; ox < p.output.width; ++ox) {
                const int ix0 = ox * p.win.stride_w - p.win.padding_w;
                const tap_range cols = valid_taps(ix0, p.win.kernel_w, p.win.dilation_w, p.input.width);
                std::int32_t largest = -128;
                for (int ky = rows.begin; ky < rows.end; ++ky) {
                    const int row = (iy0 + ky * p.win.dilation_h) * p.input.width + ix0;  // ix0 may be negative
                    for (int kx = cols.begin; kx < cols.end; ++kx)
                        if (plane[row + kx * p.win.dilation_w] > largest) largest = plane[row + kx * p.win.dilation_w];
                }
                output[(c * p.output.height + oy) * p.output.width + ox] = clamp_to(largest, p.range);
            }
        }
    }
}

}  // namespace versatil::firmware

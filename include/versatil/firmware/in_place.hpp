// When a windowed per-channel op (depthwise convolution, max and average pooling, global
// average pooling) may write its output over its own input, and how far before the input the
// output must start.
//
// The kernels work channel by channel, then row by row, column by column, write each output
// level once all its taps are read, and read for output channel c only input channel c
// (conv2d.hpp). With the input at offset I and the output at I - lag (planes of H*W input and
// OH*OW output levels, OH*OW <= H*W), the write of output element k = oy*OW + ox of channel c
// lands at I - lag + c*OH*OW + k. Inputs still to be read then are those of channel c read by
// elements after k, at I + c*H*W + m with m >= next_read(k) (the smallest index any later
// element of the plane reads), and those of later channels, at I + (c+1)*H*W and beyond. The
// first stay intact when k - lag < next_read(k) (c*OH*OW <= c*H*W), the second because
// c*OH*OW + k < (c+1)*H*W. So lag = max(0, max over k of k - next_read(k) + 1): for a 3x3
// stride-1 padding-1 depthwise convolution that is W + 1 levels, against a second tensor for
// an output kept apart. The tests check this bound against an element-by-element simulation,
// and that one level less is unsafe.
#pragma once

#include <cstddef>

#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

inline constexpr std::ptrdiff_t not_in_place = -1;

// The lag in levels (int8: bytes), or not_in_place when the op cannot run in place: a channel
// count that changes, or an output plane larger than the input plane.
constexpr std::ptrdiff_t in_place_lag(shape input, shape output, window w) noexcept {
    if (input.channels != output.channels || output.plane() > input.plane() || output.plane() <= 0)
        return not_in_place;
    constexpr std::ptrdiff_t nothing_read = static_cast<std::ptrdiff_t>(~std::size_t{0} >> 1);
    std::ptrdiff_t lag = 0, next_read = nothing_read;
    for (int oy = output.height - 1; oy >= 0; --oy) {
        const int iy0 = oy * w.stride_h - w.padding_h;
        const tap_range rows = valid_taps(iy0, w.kernel_h, w.dilation_h, input.height);
        for (int ox = output.width - 1; ox >= 0; --ox) {
            const std::ptrdiff_t k = oy * output.width + ox;
            if (next_read != nothing_read && k - next_read + 1 > lag) lag = k - next_read + 1;
            const int ix0 = ox * w.stride_w - w.padding_w;
            const tap_range cols = valid_taps(ix0, w.kernel_w, w.dilation_w, input.width);
            if (rows.begin < rows.end && cols.begin < cols.end) {
                const std::ptrdiff_t first = std::ptrdiff_t{iy0 + rows.begin * w.dilation_h} * input.width + ix0 +
                                             cols.begin * w.dilation_w;
                if (first < next_read) next_read = first;
            }
        }
    }
    return lag;
}

}  // namespace versatil::firmware

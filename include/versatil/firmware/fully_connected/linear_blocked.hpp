// Fully connected layer, int8, four output features at a time: the fast kernel for linear
// layers whose multipliers are below 0.25 (prepared_output_applies). Same params and result as the reference linear (linear.hpp), byte for byte.
//
// Four input bytes are one load, widened once with the input offset into the pairs (0, 2)
// and (1, 3) (SXTAB16), and serve four weight rows, whose four bytes are one load and two
// SXTB16 each: eight SMLADs for sixteen products. The reference kernel loads the input again
// for every row. Rows left over (out_features % 4) go one at a time.
#pragma once

#include <cstdint>

#include "versatil/firmware/fully_connected/linear.hpp"
#include "versatil/firmware/output_stage.hpp"
#include "versatil/firmware/simd.hpp"

namespace versatil::firmware {

namespace detail {

// sums[r] = sum over i of (x[i] + offset) * w[r * n + i], for Rows rows.
template <int Rows>
VERSATIL_FIRMWARE_INLINE void dot_rows(const std::int8_t* x, const std::int8_t* w, int n, std::int32_t x_offset,
                                       std::int32_t (&sums)[Rows]) noexcept {
    const simd::pair offsets = simd::make_pair(x_offset, x_offset);
    std::int32_t acc[Rows] = {};
    // One pointer walks the input, one the first row; the others are at fixed distances
    // from it, and the loop counts down: no pointer of the loop spills to the stack.
    const std::int8_t* xi = x;
    const std::int8_t* wi = w;
    for (int groups = n >> 2; groups > 0; --groups, xi += 4, wi += 4) {
        const std::int32_t xs = simd::load4(xi);
        const simd::pair x_even = simd::even_bytes_plus(offsets, xs), x_odd = simd::odd_bytes_plus(offsets, xs);
#pragma GCC unroll 4
        for (int r = 0; r < Rows; ++r) {
            const std::int32_t ws = simd::load4(wi + r * n);
            acc[r] = simd::dual_multiply_add(x_even, simd::even_bytes(ws), acc[r]);
            acc[r] = simd::dual_multiply_add(x_odd, simd::odd_bytes(ws), acc[r]);
        }
    }
    for (int i = n & ~3; i < n; ++i)
#pragma GCC unroll 4
        for (int r = 0; r < Rows; ++r) acc[r] += (x[i] + x_offset) * w[r * n + i];
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) sums[r] = acc[r];
}

}  // namespace detail

VERSATIL_FIRMWARE_HOT inline void linear_blocked(const linear_params& p, const std::int8_t* input, std::int8_t* output) noexcept {
    const int n = p.in_features;
    const auto finish = [&](int o, std::int32_t sum) {
        const prepared_output stage = prepare_output(p.bias != nullptr ? p.bias[o] : 0, p.multipliers[o], p.output_offset);
        output[o] = requantize_prepared(sum, stage, p.range);
    };
    int o = 0;
    for (; o + 4 <= p.out_features; o += 4) {
        std::int32_t sums[4];
        detail::dot_rows<4>(input, p.weights + o * n, n, p.input_offset, sums);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) finish(o + r, sums[r]);
    }
    for (; o < p.out_features; ++o) {  // at most three: a two-row variant would cost more code than it saves
        std::int32_t sums[1];
        detail::dot_rows<1>(input, p.weights + o * n, n, p.input_offset, sums);
        finish(o, sums[0]);
    }
}

}  // namespace versatil::firmware

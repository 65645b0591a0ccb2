// Compile-time facts of the firmware runtime: shapes, valid taps, the in-place lag, the
// output stage, and a whole arena plan computed by the compiler.
#include <cstdint>

#include "versatil/firmware/firmware.hpp"

namespace {

namespace fw = versatil::firmware;

// Shapes and windows (PyTorch's floor mode).
static_assert(fw::output_extent(28, 3, 1, 1, 1) == 28 && fw::output_extent(28, 3, 2, 1, 1) == 14);
static_assert(fw::output_extent(7, 3, 1, 2, 2) == 7 && fw::output_extent(2, 5, 1, 0, 1) == 0);
static_assert(fw::output_shape({8, 14, 14}, {2, 2, 2, 2}, 8) == fw::shape{8, 7, 7});
static_assert(fw::shape{16, 7, 7}.bytes() == 784 && fw::shape{10}.elements() == 10);
static_assert(fw::well_formed({3, 3, 1, 1, 1, 1, 1, 1}) && !fw::well_formed({0, 3}) && !fw::well_formed({3, 3, 0, 1}));

// Valid taps: a 3-tap window starting one before the edge reads taps 1 and 2.
static_assert(fw::valid_taps(-1, 3, 1, 5).begin == 1 && fw::valid_taps(-1, 3, 1, 5).end == 3);
static_assert(fw::valid_taps(3, 3, 1, 5).begin == 0 && fw::valid_taps(3, 3, 1, 5).end == 2);
static_assert(fw::valid_taps(-2, 3, 2, 5).begin == 1 &&
              fw::valid_taps(-2, 3, 2, 5).end == 3);  // dilation 2: taps at -2, 0, 2
static_assert(fw::valid_taps(5, 3, 1, 5).begin == fw::valid_taps(5, 3, 1, 5).end);             // all padding

// In place: 3x3 stride 1 padding 1 needs W + 1 levels of lag; 2x2 stride 2 pooling none; a
// channel change or a larger output plane never runs in place.
static_assert(fw::in_place_lag({8, 14, 14}, {8, 14, 14}, {3, 3, 1, 1, 1, 1, 1, 1}) == 15);
static_assert(fw::in_place_lag({8, 28, 28}, {8, 14, 14}, {2, 2, 2, 2}) == 0);
static_assert(fw::in_place_lag({4, 7, 7}, {4, 7, 7}, {3, 3, 1, 1, 2, 2, 2, 2}) ==
              2 * 7 + 2);  // dilation 2, padding 2: 2W + 2
static_assert(fw::in_place_lag({4, 7, 7}, {8, 7, 7}, {3, 3, 1, 1, 1, 1, 1, 1}) == fw::not_in_place);
static_assert(fw::in_place_lag({4, 3, 3}, {4, 5, 5}, {1, 1, 1, 1, 1, 1, 1, 1}) == fw::not_in_place);

// The output stage: bias added with saturation, rescaled, zero point, activation range.
constexpr auto half = versatil::math::quantize_multiplier(0.5);
static_assert(fw::requantize_output(100, 20, half, -3, {}) == 57);
static_assert(fw::requantize_output(2147483000, 2147483000, half, 0, {}) == 127);  // saturates, then clamps
static_assert(fw::requantize_output(-100, 0, half, 10, {0, 127}) == 0);            // a fused relu at zero point 0
static_assert(fw::clamp_to(-129, {}) == -128 && fw::clamp_to(300, {-5, 6}) == 6);
// Rounded as QNNPACK rounds (lrintf((float)acc * scale)), worked by hand: 150 * 0.07f is exactly
// 10.50000004470348..., which rounds to the float 10.5 (its ulp is 2^-20), then to the even 10; the
// exact product rounded once would give 11.
constexpr auto seven_hundredths = versatil::math::quantize_multiplier(static_cast<double>(0.07F));
static_assert(fw::requantization_scale(seven_hundredths) == 0.07F);
static_assert(fw::requantize_output(150, 0, seven_hundredths, 0, {}) == 10);
static_assert(versatil::math::multiply_by_quantized_multiplier_single_rounding(150, seven_hundredths) == 11);
// Ties to even either side of zero; just above a half rounds up; beyond 2^22 held.
static_assert(fw::nearest_integer(2.5F) == 2 && fw::nearest_integer(3.5F) == 4 && fw::nearest_integer(-2.5F) == -2);
static_assert(fw::nearest_integer(0.5F) == 0 && fw::nearest_integer(0.50000006F) == 1 &&
              fw::nearest_integer(-0.49F) == 0);
static_assert(fw::nearest_integer(1e9F) == (1 << 22) && fw::nearest_integer(-1e9F) == -(1 << 22));
static_assert(fw::dot_portable(nullptr, nullptr, 0, 5) == 0);
// Average pooling's mean: nearest, ties to even (LibTorch's nearbyint), either sign; an empty window is 0.
static_assert(fw::divide_half_even(10, 4) == 2 && fw::divide_half_even(14, 4) == 4 && fw::divide_half_even(11, 4) == 3);
static_assert(fw::divide_half_even(-10, 4) == -2 && fw::divide_half_even(-14, 4) == -4 &&
              fw::divide_half_even(-11, 4) == -3);
static_assert(fw::divide_half_even(9, 4) == 2 && fw::divide_half_even(-9, 4) == -2 && fw::divide_half_even(5, 0) == 0);

// A plan the compiler computes: conv, depthwise in place, clamp in place, pointwise.
constexpr fw::conv2d_params conv(fw::shape in, fw::shape out, fw::window w = {}, int groups = 1) {
    fw::conv2d_params p;
    p.input = in;
    p.output = out;
    p.win = w;
    p.groups = groups;
    return p;
}
constexpr fw::shape tensors[] = {{1, 28, 28}, {8, 28, 28}, {8, 28, 28}, {8, 28, 28}, {4, 28, 28}, {3136}};
constexpr fw::layer layers[] = {
    fw::layer_of(conv({1, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1}), 0, 1),
    fw::layer_of(conv({8, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1}, 8), 1, 2),
    fw::layer_of(fw::clamp_params{8 * 784, 0, 0, {}, {}}, tensors[2], 2, 3),
    fw::layer_of(conv({8, 28, 28}, {4, 28, 28}), 3, 4),
    fw::flatten_layer(tensors[4], 4, 5),
};
constexpr auto plan = fw::plan_arena(tensors, layers, 0, 5);
static_assert(plan.figures.arena_bytes == 12 * 784 && plan.figures.lower_bound_bytes == 12 * 784);
static_assert(plan.figures.greedy_bytes == 16 * 784);
static_assert(plan.tensors[0].external && !plan.tensors[1].external);
static_assert(plan.tensors[1].offset == plan.tensors[2].offset + 29);  // the depthwise output starts W + 1 earlier
static_assert(plan.tensors[5].offset == plan.tensors[4].offset);       // flatten: the same bytes
static_assert(fw::consistent(layers[1], tensors, 6) && !fw::consistent(layers[3], tensors + 1, 5));
static_assert(!fw::layer_of(conv({8, 28, 28}, {8, 27, 28}, {3, 3, 1, 1, 1, 1, 1, 1}), 0, 1).geometry_ok);
static_assert(fw::layer_of(conv({8, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1}, 8), 0, 1).alias ==
              fw::aliasing::windowed);
static_assert(fw::layer_of(conv({8, 28, 28}, {8, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1}, 2), 0, 1).alias ==
              fw::aliasing::none);

}  // namespace

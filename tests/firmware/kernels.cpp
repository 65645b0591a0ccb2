// The firmware kernels against straightforward references: an exact integer reference
// written apart from the kernels (the input padded explicitly with its zero point, every tap
// summed in int64, TFLite's arithmetic spelled out), and a float reference of the real
// quantities, which the integer result must meet within one level: the output is rounded
// once (half a level) and the fixed-point multiplier carries a relative error below 2^-30,
// which the accumulators here keep far below half a level.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "versatil/firmware/firmware.hpp"
#include "versatil/math/requantize.hpp"

namespace {

namespace fw = versatil::firmware;
using versatil::math::fixed_point_multiplier;
using versatil::math::multiply_by_quantized_multiplier;
// The runtime's rescale, as QNNPACK computes it (q8gemm's fp32 requantization: the accumulator
// as a float times the float scale, then lrintf), written with the C library: the scale is the
// multiplier's real value rounded to float.
std::int32_t rescale_once(std::int32_t accumulator, fixed_point_multiplier m) {
    const auto scale = static_cast<float>(std::ldexp(static_cast<double>(m.multiplier), m.shift - 31));
    const float product = static_cast<float>(accumulator) * scale;
    return static_cast<std::int32_t>(std::clamp(std::nearbyint(product), -4194304.0F, 4194304.0F));
}
using versatil::math::quantize_multiplier;

std::int8_t clamp_level(std::int64_t v, fw::activation_range r) {
    return static_cast<std::int8_t>(v < r.min ? r.min : (v > r.max ? r.max : v));
}

std::vector<std::int8_t> random_levels(std::mt19937& random, int n, int lo = -128, int hi = 127) {
    std::uniform_int_distribution<int> level(lo, hi);
    std::vector<std::int8_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<std::int8_t>(level(random));
    return v;
}

// The input of one channel padded with `value` on every side, as a dense plane.
std::vector<int> padded_plane(const std::int8_t* plane, fw::shape s, int pad_h, int pad_w, int value) {
    const int h = s.height + 2 * pad_h, w = s.width + 2 * pad_w;
    std::vector<int> out(static_cast<std::size_t>(h * w), value);
    for (int y = 0; y < s.height; ++y)
        for (int x = 0; x < s.width; ++x)
            out[static_cast<std::size_t>((y + pad_h) * w + x + pad_w)] = plane[y * s.width + x];
    return out;
}

std::vector<std::int8_t> reference_conv2d(const fw::conv2d_params& p, const std::int8_t* input) {
    const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
    const int pw = p.input.width + 2 * p.win.padding_w;
    std::vector<std::vector<int>> padded;
    for (int c = 0; c < p.input.channels; ++c)
        padded.push_back(
            padded_plane(input + c * p.input.plane(), p.input, p.win.padding_h, p.win.padding_w, -p.input_offset));
    std::vector<std::int8_t> out;
    for (int oc = 0; oc < p.output.channels; ++oc)
        for (int oy = 0; oy < p.output.height; ++oy)
            for (int ox = 0; ox < p.output.width; ++ox) {
                std::int64_t sum = 0;
                for (int i = 0; i < in_per_group; ++i) {
                    const int ic = oc / out_per_group * in_per_group + i;
                    for (int ky = 0; ky < p.win.kernel_h; ++ky)
                        for (int kx = 0; kx < p.win.kernel_w; ++kx) {
                            const int y = oy * p.win.stride_h + ky * p.win.dilation_h;
                            const int x = ox * p.win.stride_w + kx * p.win.dilation_w;
                            const int w =
                                p.weights[((oc * in_per_group + i) * p.win.kernel_h + ky) * p.win.kernel_w + kx];
                            sum +=
                                std::int64_t{
                                    padded[static_cast<std::size_t>(ic)][static_cast<std::size_t>(y * pw + x)] +
                                    p.input_offset} *
                                w;
                        }
                }
                sum += p.bias != nullptr ? p.bias[oc] : 0;
                sum = std::clamp<std::int64_t>(sum, INT32_MIN, INT32_MAX);
                out.push_back(clamp_level(
                    std::int64_t{rescale_once(static_cast<std::int32_t>(sum), p.multipliers[oc])} + p.output_offset,
                    p.range));
            }
    return out;
}

struct conv_case {
    fw::conv2d_params params;
    std::vector<std::int8_t> input, weights;
    std::vector<std::int32_t> bias;
    std::vector<fixed_point_multiplier> multipliers;
    std::vector<double> weight_scales;
    double input_scale = 0, output_scale = 0;
    std::vector<float> real_bias;
};

conv_case random_conv(std::mt19937& random) {
    std::uniform_int_distribution<int> pick(0, 1 << 20);
    const auto between = [&](int lo, int hi) { return lo + pick(random) % (hi - lo + 1); };
    conv_case c;
    fw::conv2d_params& p = c.params;
    for (;;) {
        const int kind = between(0, 2);
        const int groups = kind == 1 ? 0 : (kind == 2 ? between(2, 3) : 1);
        const int in_c = kind == 1 ? between(1, 6) : groups * between(1, 3);
        p.input = {in_c, between(1, 10), between(1, 10)};
        p.groups = kind == 1 ? in_c : groups;
        p.win = {between(1, 4), between(1, 4), between(1, 3), between(1, 3),
                 between(0, 2), between(0, 2), between(1, 2), between(1, 2)};
        p.output = fw::output_shape(p.input, p.win, kind == 1 ? in_c : groups * between(1, 3));
        if (p.output.elements() > 0) break;
    }
    c.input_scale = 0.01 + 0.05 * between(0, 100) / 100.0;
    c.output_scale = 0.05 + 0.5 * between(0, 100) / 100.0;
    const int in_zero = between(-128, 127), out_zero = between(-128, 127);
    c.input = random_levels(random, p.input.elements());
    c.weights = random_levels(random, p.output.channels * p.input.channels / p.groups * p.win.kernel_h * p.win.kernel_w,
                              -127, 127);
    for (int oc = 0; oc < p.output.channels; ++oc) {
        c.weight_scales.push_back(0.001 + 0.01 * between(0, 100) / 100.0);
        const double accumulator_scale = c.input_scale * c.weight_scales.back();
        c.real_bias.push_back(static_cast<float>((between(0, 2000) - 1000) * accumulator_scale));
        c.bias.push_back(static_cast<std::int32_t>(std::lround(c.real_bias.back() / accumulator_scale)));
        c.multipliers.push_back(quantize_multiplier(accumulator_scale / c.output_scale));
    }
    p.input_offset = -in_zero;
    p.output_offset = out_zero;
    if (between(0, 2) == 0) p.range = {std::max(-128, out_zero), 127};  // a fused relu
    p.weights = c.weights.data();
    p.bias = c.bias.data();
    p.multipliers = c.multipliers.data();
    return c;
}

}  // namespace

TEST_CASE("math/requantize's 32-bit forms equal the 64-bit division formulas they replace") {
    // The formulas as written before the shifts: x / 2^e rounded half away from zero, and the
    // one-rounding product for multipliers of one and above.
    const auto divide = [](std::int32_t x, int e) {
        if (e <= 0) return x;
        e = std::min(e, 31);
        const std::int64_t mask = (std::int64_t{1} << e) - 1, remainder = std::int64_t{x} & mask;
        return static_cast<std::int32_t>((std::int64_t{x} >> e) + (remainder > (mask >> 1) + (x < 0 ? 1 : 0) ? 1 : 0));
    };
    const auto product_rounding = [](std::int32_t x, fixed_point_multiplier m) {
        const std::int64_t product = std::int64_t{x} * m.multiplier;
        const std::int64_t half = std::int64_t{1} << (30 - m.shift);
        const std::int64_t rounded = (product + (product >= 0 ? half : 1 - half)) / (std::int64_t{1} << (31 - m.shift));
        return static_cast<std::int32_t>(std::clamp<std::int64_t>(rounded, INT32_MIN, INT32_MAX));
    };
    std::mt19937 random(10);
    std::vector<std::int32_t> values{0,       1,          -1,    2,     -2, INT32_MAX, INT32_MIN, INT32_MIN + 1,
                                     1 << 30, -(1 << 30), 12345, -12345};
    for (int i = 0; i < 20000; ++i) values.push_back(static_cast<std::int32_t>(random()) >> (random() % 31));
    for (std::int32_t x : values) {
        for (int e = 0; e <= 33; ++e) REQUIRE(versatil::math::rounding_divide_by_power_of_two(x, e) == divide(x, e));
        for (int shift = 1; shift <= 30; ++shift) {
            const fixed_point_multiplier m{static_cast<std::int32_t>((1U << 30) + (random() >> 2)), shift};
            REQUIRE(multiply_by_quantized_multiplier(x, m) == product_rounding(x, m));
            REQUIRE(multiply_by_quantized_multiplier(x, {-m.multiplier, shift}) ==
                    product_rounding(x, {-m.multiplier, shift}));
        }
    }
}

TEST_CASE("conv2d equals the integer reference: padding with the zero point, stride, dilation, groups, depthwise") {
    std::mt19937 random(11);
    for (int n = 0; n < 400; ++n) {
        conv_case c = random_conv(random);
        std::vector<std::int8_t> out(c.params.output.bytes());
        fw::conv2d(c.params, c.input.data(), out.data());
        CAPTURE(n);
        REQUIRE(out == reference_conv2d(c.params, c.input.data()));
    }
}

TEST_CASE("conv2d is within one level of the float computation on the real values") {
    std::mt19937 random(12);
    int exact = 0, total = 0;
    for (int n = 0; n < 300; ++n) {
        conv_case c = random_conv(random);
        const fw::conv2d_params& p = c.params;
        std::vector<std::int8_t> out(p.output.bytes());
        fw::conv2d(p, c.input.data(), out.data());
        // Real convolution of the dequantized input (zero outside) with the dequantized weights.
        const int in_per_group = p.input.channels / p.groups, out_per_group = p.output.channels / p.groups;
        for (int oc = 0; oc < p.output.channels; ++oc)
            for (int oy = 0; oy < p.output.height; ++oy)
                for (int ox = 0; ox < p.output.width; ++ox) {
                    double real = c.real_bias[static_cast<std::size_t>(oc)];
                    for (int i = 0; i < in_per_group; ++i)
                        for (int ky = 0; ky < p.win.kernel_h; ++ky)
                            for (int kx = 0; kx < p.win.kernel_w; ++kx) {
                                const int y = oy * p.win.stride_h - p.win.padding_h + ky * p.win.dilation_h;
                                const int x = ox * p.win.stride_w - p.win.padding_w + kx * p.win.dilation_w;
                                if (y < 0 || x < 0 || y >= p.input.height || x >= p.input.width) continue;
                                const int ic = oc / out_per_group * in_per_group + i;
                                const double xv =
                                    c.input_scale *
                                    (c.input[static_cast<std::size_t>((ic * p.input.height + y) * p.input.width + x)] +
                                     p.input_offset);
                                const double wv =
                                    c.weight_scales[static_cast<std::size_t>(oc)] *
                                    c.weights[static_cast<std::size_t>(
                                        ((oc * in_per_group + i) * p.win.kernel_h + ky) * p.win.kernel_w + kx)];
                                real += xv * wv;
                            }
                    const double level = std::clamp(std::round(real / c.output_scale) + p.output_offset,
                                                    double(p.range.min), double(p.range.max));
                    const int got = out[static_cast<std::size_t>((oc * p.output.height + oy) * p.output.width + ox)];
                    REQUIRE(std::abs(got - level) <= 1.0);
                    exact += got == level ? 1 : 0;
                    ++total;
                }
    }
    CHECK(exact > total * 9 / 10);  // off by one only near a rounding tie
}

TEST_CASE("linear equals the integer reference and the dot product's lengths all agree") {
    std::mt19937 random(13);
    for (int n = 0; n < 200; ++n) {
        const int in = 1 + static_cast<int>(random() % 70), out_features = 1 + static_cast<int>(random() % 9);
        std::vector<std::int8_t> x = random_levels(random, in), w = random_levels(random, in * out_features);
        std::vector<std::int32_t> bias(static_cast<std::size_t>(out_features));
        std::vector<fixed_point_multiplier> m(static_cast<std::size_t>(out_features));
        for (int o = 0; o < out_features; ++o) {
            bias[static_cast<std::size_t>(o)] = static_cast<std::int32_t>(random() % 20001) - 10000;
            m[static_cast<std::size_t>(o)] = quantize_multiplier(1e-4 * (1 + random() % 1000));
        }
        const fw::linear_params p{in,
                                  out_features,
                                  static_cast<std::int32_t>(random() % 256) - 127,
                                  static_cast<std::int32_t>(random() % 256) - 128,
                                  {},
                                  w.data(),
                                  bias.data(),
                                  m.data()};
        std::vector<std::int8_t> got(static_cast<std::size_t>(out_features));
        fw::linear(p, x.data(), got.data());
        for (int o = 0; o < out_features; ++o) {
            std::int64_t sum = bias[static_cast<std::size_t>(o)];
            for (int i = 0; i < in; ++i)
                sum += std::int64_t{x[static_cast<std::size_t>(i)] + p.input_offset} *
                       w[static_cast<std::size_t>(o * in + i)];
            CHECK(
                got[static_cast<std::size_t>(o)] ==
                clamp_level(std::int64_t{rescale_once(static_cast<std::int32_t>(sum), m[static_cast<std::size_t>(o)])} +
                                p.output_offset,
                            {}));
        }
        CHECK(fw::dot(x.data(), w.data(), in, p.input_offset) ==
              fw::dot_portable(x.data(), w.data(), in, p.input_offset));
    }
}

TEST_CASE("add: QNNPACK's integer add, within one level of the real sum, in place") {
    std::mt19937 random(14);
    for (int n = 0; n < 200; ++n) {
        const double s1 = 0.01 + (random() % 1000) * 1e-4, s2 = 0.01 + (random() % 1000) * 1e-4,
                     so = 0.02 + (random() % 1000) * 2e-4;
        const int z1 = static_cast<int>(random() % 256) - 128, z2 = static_cast<int>(random() % 256) - 128,
                  zo = static_cast<int>(random() % 256) - 128;
        // Each ratio at 2^shift, the larger in [2^21, 2^22) (QNNPACK's parameters, by hand).
        const int shift = 21 - static_cast<int>(std::floor(std::log2(std::max(s1, s2) / so)));
        const auto at_shift = [&](double s) {
            return static_cast<std::int32_t>(std::nearbyint(std::ldexp(s / so, shift)));
        };
        const fw::add_params p{64, -z1, -z2, zo, at_shift(s1), at_shift(s2), shift, {}};
        std::vector<std::int8_t> a = random_levels(random, 64), b = random_levels(random, 64), out(64);
        fw::add(p, a.data(), b.data(), out.data());
        for (std::size_t i = 0; i < 64; ++i) {
            // One rounding of the exact sum of products, half away from zero.
            const double sum =
                static_cast<double>((a[i] - z1) * p.input1_multiplier + (b[i] - z2) * p.input2_multiplier);
            CHECK(out[i] == clamp_level(static_cast<std::int64_t>(std::round(std::ldexp(sum, -shift))) + zo, {}));
            const double real = s1 * (a[i] - z1) + s2 * (b[i] - z2);
            CHECK(std::abs(out[i] - std::clamp(std::round(real / so) + zo, -128.0, 127.0)) <= 1.0);
        }
        std::vector<std::int8_t> in_place = a;  // the output over its first input
        fw::add(p, in_place.data(), b.data(), in_place.data());
        CHECK(in_place == out);
    }
}

TEST_CASE("clamp rescales exactly (identity when the quantization is shared) and clamps") {
    const std::vector<std::int8_t> in{-128, -5, 0, 3, 7, 127};
    std::vector<std::int8_t> out(in.size());
    fw::clamp({6, 3, -3, quantize_multiplier(1.0), {-3, 4}}, in.data(), out.data());  // relu6-like on zero point -3
    CHECK(out == std::vector<std::int8_t>{-3, -3, 0, 3, 4, 4});
    fw::clamp({6, 0, 0, quantize_multiplier(0.5), {}}, in.data(), out.data());  // halves: rounding half up, as gemmlowp
    CHECK(out == std::vector<std::int8_t>{-64, -2, 0, 2, 4, 64});
}

TEST_CASE("pooling equals a reference with PyTorch's divisors and TFLite's rounding") {
    std::mt19937 random(15);
    for (int n = 0; n < 300; ++n) {
        const fw::shape in{1 + static_cast<int>(random() % 3), 1 + static_cast<int>(random() % 9),
                           1 + static_cast<int>(random() % 9)};
        fw::window w{1 + static_cast<int>(random() % 3), 1 + static_cast<int>(random() % 3),
                     1 + static_cast<int>(random() % 2), 1 + static_cast<int>(random() % 2)};
        w.padding_h = static_cast<int>(random() % static_cast<unsigned>(w.kernel_h / 2 + 1));
        w.padding_w = static_cast<int>(random() % static_cast<unsigned>(w.kernel_w / 2 + 1));
        const fw::shape out = fw::output_shape(in, w, in.channels);
        if (out.elements() <= 0) continue;
        const std::vector<std::int8_t> x = random_levels(random, in.elements());
        const int zero = static_cast<int>(random() % 256) - 128;
        const bool include_pad = random() % 2 == 0;
        std::vector<std::int8_t> got_max(out.bytes()), got_avg(out.bytes());
        fw::max_pool2d({in, out, w, {}}, x.data(), got_max.data());
        fw::avg_pool2d({in, out, w, include_pad, zero, {}}, x.data(), got_avg.data());
        for (int c = 0; c < in.channels; ++c)
            for (int oy = 0; oy < out.height; ++oy)
                for (int ox = 0; ox < out.width; ++ox) {
                    int largest = -1000, sum = 0, valid = 0, padded = 0;
                    for (int ky = 0; ky < w.kernel_h; ++ky)
                        for (int kx = 0; kx < w.kernel_w; ++kx) {
                            const int y = oy * w.stride_h - w.padding_h + ky, xx = ox * w.stride_w - w.padding_w + kx;
                            if (y < in.height + w.padding_h && xx < in.width + w.padding_w)
                                ++padded;  // inside the padded input
                            if (y < 0 || xx < 0 || y >= in.height || xx >= in.width) continue;
                            const int v = x[static_cast<std::size_t>((c * in.height + y) * in.width + xx)];
                            largest = std::max(largest, v);
                            sum += v - zero;
                            ++valid;
                        }
                    const std::size_t at = static_cast<std::size_t>((c * out.height + oy) * out.width + ox);
                    CHECK(got_max[at] == largest);
                    const double mean = static_cast<double>(sum) / (include_pad ? padded : valid);
                    const double rounded = std::nearbyint(mean);  // ties to even, as LibTorch's quantized pooling
                    CHECK(got_avg[at] == clamp_level(static_cast<std::int64_t>(rounded) + zero, {}));
                }
    }
}

TEST_CASE("global average pooling is average pooling over the whole plane") {
    const std::vector<std::int8_t> x{1, 2, 3, 4, -7, -7, -7, -6};  // two channels of 2x2
    std::vector<std::int8_t> out(2);
    fw::avg_pool2d(fw::global_avg_pool2d({2, 2, 2}, 0, {}), x.data(), out.data());
    CHECK(out == std::vector<std::int8_t>{2, -7});  // 2.5 -> 2 (ties to even) and -6.75 -> -7
    fw::avg_pool2d(fw::global_avg_pool2d({2, 2, 2}, 1, {-128, 2}), x.data(), out.data());
    CHECK(out == std::vector<std::int8_t>{2, -7});  // 1 + round(1.5) = 1 + 2 = 3, clamped to 2
}

TEST_CASE("lookup maps every level through its table, in place too") {
    std::int8_t table[fw::lookup_table_size];
    for (int level = -128; level < 128; ++level) table[level + 128] = static_cast<std::int8_t>(level / 2 - 3);
    std::int8_t data[] = {-128, -1, 0, 1, 127};
    fw::lookup({5, table}, data, data);
    const std::int8_t expected[] = {-67, -3, -3, -3, 60};  // level / 2 rounds toward zero, less 3
    CHECK(std::equal(data, data + 5, expected));
}

TEST_CASE("mul: the real product within one level, whole or broadcast per channel or from one value") {
    std::mt19937 random(7);
    const fw::shape out{3, 2, 5};
    const auto a = random_levels(random, out.elements());
    const double scale_a = 0.05, scale_b = 0.02, scale_out = 0.01;
    const int zero_a = 3, zero_b = -7, zero_out = 4;
    for (const fw::shape second : {out, fw::shape{3, 1, 1}, fw::shape{1, 1, 1}}) {
        const auto b = random_levels(random, second.elements());
        const fw::mul_params p{
            out, second, -zero_a, -zero_b, zero_out, quantize_multiplier(scale_a * scale_b / scale_out), {}};
        REQUIRE(fw::broadcastable(p));
        std::vector<std::int8_t> result(a.size());
        fw::mul(p, a.data(), b.data(), result.data());
        for (int i = 0; i < out.elements(); ++i) {
            const int j = second == out ? i : (second.channels == out.channels ? i / out.plane() : 0);
            const double real = scale_a * (a[static_cast<std::size_t>(i)] - zero_a) * scale_b *
                                (b[static_cast<std::size_t>(j)] - zero_b);
            const double level = std::clamp(real / scale_out + zero_out, -128.0, 127.0);
            CHECK(std::abs(result[static_cast<std::size_t>(i)] - level) <= 0.5 + 1e-6);  // rounded once
        }
    }
    CHECK_FALSE(fw::broadcastable({out, {2, 1, 1}, 0, 0, 0, {}, {}}));
}

TEST_CASE("softmax: probabilities on the 1/256 grid, per pixel over the channels") {
    // Logits at scale 0.1: for each pixel, exp(0.1 * (x - max)) / sum, rounded to a level of
    // 1/256 less 128; the table is the code generator's (exp in units of softmax_table_one).
    const fw::shape s{4, 1, 3};
    const double scale = 0.1;
    std::vector<std::uint32_t> table;
    const double one = fw::softmax_table_one(s.channels);
    for (int d = 0; d < 256; ++d) table.push_back(static_cast<std::uint32_t>(std::lround(std::exp(-scale * d) * one)));
    const std::int8_t logits[] = {10, -5, 0, /**/ 10, 20, 0, /**/ -100, 25, 0, /**/ 10, 30, 0};  // channel-major
    std::int8_t out[12];
    fw::softmax({s, table.data()}, logits, out);
    for (int pixel = 0; pixel < 3; ++pixel) {
        double sum = 0;
        for (int c = 0; c < 4; ++c) sum += std::exp(scale * logits[c * 3 + pixel]);
        for (int c = 0; c < 4; ++c) {
            const double level = std::min(std::exp(scale * logits[c * 3 + pixel]) / sum * 256.0, 255.0) - 128.0;
            CHECK(std::abs(out[c * 3 + pixel] - level) <= 0.5 + 1e-3);
        }
    }
    // Equal logits: a quarter each, exactly 64 / 256.
    const std::int8_t equal[] = {5, 5, 5, 5};
    fw::softmax({{4, 1, 1}, table.data()}, equal, out);
    CHECK(std::all_of(out, out + 4, [](std::int8_t v) { return v == 64 - 128; }));
}

TEST_CASE("concat, permute and pad move levels where the shapes say") {
    // Two parts along height ({2, 1, 3} and {2, 2, 3} -> {2, 3, 3}): one run per channel, the
    // second part through a table that adds 1.
    const std::int8_t first[] = {1, 2, 3, /**/ 4, 5, 6};
    const std::int8_t second[] = {10, 11, 12, 13, 14, 15, /**/ 20, 21, 22, 23, 24, 25};
    std::int8_t plus_one[fw::lookup_table_size];
    for (int level = -128; level < 128; ++level)
        plus_one[level + 128] = static_cast<std::int8_t>(std::min(level + 1, 127));
    const fw::concat_params along_height{2, 2, {3, 6}, {nullptr, plus_one}};
    const std::int8_t* const parts[] = {first, second};
    std::int8_t joined[18];
    fw::concat(along_height, parts, joined);
    const std::int8_t expected_join[] = {1, 2, 3, 11, 12, 13, 14, 15, 16, /**/ 4, 5, 6, 21, 22, 23, 24, 25, 26};
    CHECK(std::equal(joined, joined + 18, expected_join));

    // {2, 3, 4} -> {4, 2, 3}: output (a, b, c) = input (b, c, a).
    std::int8_t input[24], permuted[24];
    for (int i = 0; i < 24; ++i) input[i] = static_cast<std::int8_t>(i);
    const fw::permute_params p{{2, 3, 4}, {4, 2, 3}, {2, 0, 1}};
    REQUIRE(fw::axes_match(p));
    fw::permute(p, input, permuted);
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 3; ++c) CHECK(permuted[(a * 2 + b) * 3 + c] == input[(b * 3 + c) * 4 + a]);
    CHECK_FALSE(fw::axes_match({{2, 3, 4}, {4, 3, 2}, {2, 0, 1}}));

    // {1, 2, 2} padded by one row above and one column left, value 5, into {1, 4, 3}.
    const std::int8_t small[] = {1, 2, 3, 4};
    std::int8_t padded[12];
    const fw::pad_params pad{{1, 2, 2}, {1, 4, 3}, {0, 1, 1}, 5};
    REQUIRE(fw::padding_fits(pad));
    fw::pad(pad, small, padded);
    const std::int8_t expected_pad[] = {5, 5, 5, /**/ 5, 1, 2, /**/ 5, 3, 4, /**/ 5, 5, 5};
    CHECK(std::equal(padded, padded + 12, expected_pad));
    CHECK_FALSE(fw::padding_fits({{1, 2, 2}, {1, 2, 2}, {0, 1, 0}, 0}));
}

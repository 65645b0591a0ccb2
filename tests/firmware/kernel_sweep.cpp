// Every firmware kernel on a few hundred seeded random cases (shapes, windows, groups,
// offsets at their extremes, multipliers and shifts across their range, misaligned
// buffers), printing a hash of each output. Built for the host and, by device.py, for the
// Cortex-M4 with the DSP path and with VERSATIL_FIRMWARE_PORTABLE: the three must print the
// same bytes, so the SMLAD path is bit-identical to the portable one on the same inputs.
// Each fast kernel (conv2d_im2col, depthwise_conv2d_3x3, linear_blocked) runs on every case
// it takes, from misaligned buffers, and must give the reference kernel's bytes ("fast
// mismatch" otherwise). Windowed kernels also run in place at their in_place_lag and must
// match their own out-of-place result ("in-place mismatch" otherwise). The convolutions also
// read the input transposed to (height, width, channels) with input_channels_last (a model's
// first layer exported with --export-input-layout hwc) and must give the same bytes
// ("channel-last mismatch" otherwise).
#include <cstddef>
#include <cstdint>

#include "console.hpp"
#include "versatil/firmware/firmware.hpp"

namespace {

namespace fw = versatil::firmware;
using versatil::math::fixed_point_multiplier;

struct random_bits {
    std::uint32_t state;
    std::uint32_t next() noexcept {  // xorshift32
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        return state;
    }
    int between(int lo, int hi) noexcept {
        return lo + static_cast<int>(next() % static_cast<std::uint32_t>(hi - lo + 1));
    }
    std::int8_t level() noexcept { return static_cast<std::int8_t>(between(-128, 127)); }
};

constexpr std::size_t buffer_bytes = 12 * 1024;
std::int8_t input[buffer_bytes + 4], input2[buffer_bytes], weights[buffer_bytes + 4], output[buffer_bytes];
std::int8_t fast_output[buffer_bytes + 4], scratch[buffer_bytes + 4], packed[buffer_bytes + 4];
std::int8_t arena[2 * buffer_bytes], channels_last[buffer_bytes + 4];
std::int32_t bias[256];
fixed_point_multiplier multipliers[256];

std::uint32_t hash(const std::int8_t* bytes, int count) noexcept {  // FNV-1a
    std::uint32_t h = 2166136261U;
    for (int i = 0; i < count; ++i) h = (h ^ static_cast<std::uint8_t>(bytes[i])) * 16777619U;
    return h;
}

void fill(random_bits& r, std::int8_t* data, int count, bool extreme) noexcept {
    for (int i = 0; i < count; ++i) data[i] = extreme ? (r.next() & 1U ? 127 : -128) : r.level();
}

std::int32_t offset(random_bits& r, bool extreme) noexcept {
    return extreme ? (r.next() & 1U ? 128 : -127) : r.between(-127, 128);
}

// Shifts across the reference kernels' whole range in one case in four; otherwise from -2
// down to -31, the multipliers below 0.25 that the fast kernels take (prepared_output_applies).
void fill_rescale(random_bits& r, int channels, bool with_bias) noexcept {
    const bool any_shift = r.between(0, 3) == 0;
    for (int c = 0; c < channels; ++c) {
        const int shift =
            any_shift ? r.between(-14, 1) : (r.between(0, 7) == 0 ? r.between(-31, -15) : r.between(-14, -2));
        multipliers[c] = {static_cast<std::int32_t>((1U << 30) + (r.next() >> 2)), shift};
        const int kind = r.between(0, 9);
        bias[c] = kind == 0 ? 2147483647 - r.between(0, 100)
                            : (kind == 1 ? -2147483647 + r.between(0, 100) : r.between(-40000, 40000));
    }
    if (!with_bias) bias[0] = 0;
}

fw::activation_range range(random_bits& r) noexcept {
    if (r.between(0, 2) != 0) return {};
    const int lo = r.between(-128, 20);
    return {lo, r.between(lo, 127)};
}

fw::window window(random_bits& r, int max_kernel) noexcept {
    return {r.between(1, max_kernel), r.between(1, max_kernel), r.between(1, 3), r.between(1, 3),
            r.between(0, 2),          r.between(0, 2),          r.between(1, 2), r.between(1, 2)};
}

// Runs a windowed kernel in place (output lag levels before the input) and compares.
template <class Params, class Kernel>
bool in_place_matches(const Params& p, int out_bytes, Kernel kernel) noexcept {
    const std::ptrdiff_t lag = fw::in_place_lag(p.input, p.output, p.win);
    if (lag == fw::not_in_place) return true;
    std::int8_t* in = arena + lag;
    for (int i = 0; i < p.input.elements(); ++i) in[i] = input[i];
    kernel(p, in, arena);
    for (int i = 0; i < out_bytes; ++i)
        if (arena[i] != output[i]) return false;
    return true;
}

void report(const char* kernel, int index, const std::int8_t* out, int count, bool in_place_ok = true) {
    console::line() << kernel << " " << index << " " << count << " " << console::hex{hash(out, count)}
                    << (in_place_ok ? "" : " in-place mismatch") << "\n";
}

int fast_cases = 0;  // cases a fast kernel took

// `input` (channels, height, width) as (height, width, channels) at channels_last + misalign.
void transpose_input(const fw::shape& s, int misalign) noexcept {
    for (int c = 0; c < s.channels; ++c)
        for (int i = 0; i < s.plane(); ++i) channels_last[misalign + i * s.channels + c] = input[c * s.plane() + i];
}

// The kernel on the channel-last input against the reference output.
template <class Kernel>
int channel_last_mismatch(const char* kernel, int index, fw::conv2d_params p, Kernel run) {
    p.input_channels_last = true;
    const int misalign = index % 4;
    transpose_input(p.input, misalign);
    run(p, channels_last + misalign, fast_output);
    for (int i = 0; i < p.output.elements(); ++i)
        if (fast_output[i] != output[i]) {
            console::line() << kernel << " " << index << " channel-last mismatch\n";
            return 1;
        }
    return 0;
}

bool same_bytes(const std::int8_t* a, const std::int8_t* b, int count) noexcept {
    for (int i = 0; i < count; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

// A fast kernel's output (written at fast_output + misalign) against the reference output.
int compare_fast(const char* kernel, int index, int misalign, int count) {
    const bool ok = same_bytes(output, fast_output + misalign, count);
    if (!ok) console::line() << kernel << " " << index << " fast mismatch\n";
    return ok ? 0 : 1;
}

// kinds: 0 dense, 1 depthwise, 2 grouped, 3 pointwise (small shapes, any window); 4 depthwise
// 3x3 (dilation 1, strides 1 and 2, rows as narrow as one level); 5 dense and pointwise with
// channel counts across the fast kernel's two-by-two tiles and its groups of four taps.
int conv2d_cases(random_bits& r, int cases, int first_kind, int last_kind) {
    int mismatches = 0;
    for (int n = 0; n < cases; ++n) {
        fw::conv2d_params p;
        const int kind = r.between(first_kind, last_kind);
        const int groups = kind == 2 ? r.between(2, 3) : 1;
        const bool depthwise = kind == 1 || kind == 4;
        const int in_c = depthwise ? r.between(1, 12) : (kind == 5 ? r.between(1, 40) : groups * r.between(1, 5));
        const int out_c = depthwise ? in_c : (kind == 5 ? r.between(1, 9) : groups * r.between(1, 5));
        p.input = kind == 5 ? fw::shape{in_c, r.between(1, 7), r.between(1, 7)}
                            : fw::shape{in_c, r.between(1, 14), r.between(1, kind == 4 ? 40 : 14)};
        if (kind == 4)
            p.win = {3, 3, r.between(1, 3), r.between(1, 2), r.between(0, 2), r.between(0, 2), 1, 1};
        else if (kind == 5)
            p.win = r.between(0, 1) == 0 ? fw::window{} : fw::window{3, 3, 1, 1, 1, 1, 1, 1};
        else
            p.win = kind == 3 ? fw::window{} : window(r, 5);
        p.groups = depthwise ? in_c : groups;
        p.output = fw::output_shape(p.input, p.win, out_c);
        if (p.output.elements() <= 0) { --n; continue; }
        const bool extreme = r.between(0, 7) == 0;
        fill(r, input, p.input.elements(), extreme);
        fill(r, weights, out_c * (in_c / p.groups) * p.win.kernel_h * p.win.kernel_w, extreme);
        p.input_offset = offset(r, extreme);
        p.output_offset = r.between(-128, 127);
        p.range = range(r);
        fill_rescale(r, out_c, true);
        p.weights = weights;
        p.bias = r.between(0, 3) == 0 ? nullptr : bias;
        p.multipliers = multipliers;
        fw::conv2d(p, input, output);
        const bool ok = !depthwise || in_place_matches(p, p.output.elements(),
                                                       [](const auto& q, const std::int8_t* i, std::int8_t* o) {
                                                           fw::conv2d(q, i, o);
                                                       });
        mismatches += ok ? 0 : 1;
        report("conv2d", n, output, p.output.elements(), ok);
        mismatches += channel_last_mismatch("conv2d", n, p, [](const auto& q, const std::int8_t* i, std::int8_t* o) {
            fw::conv2d(q, i, o);
        });

        // The fast kernels read the same input and weights from other alignments.
        const int misalign = r.between(0, 3);
        const int weight_count = out_c * (in_c / p.groups) * p.win.kernel_h * p.win.kernel_w;
        for (int i = 0; i < p.input.elements(); ++i) input2[i + misalign] = input[i];
        for (int i = weight_count - 1; i >= 0; --i) weights[i + 3 - misalign] = weights[i];
        fw::conv2d_params q = p;
        q.weights = weights + 3 - misalign;
        if (!fw::prepared_output_applies(q.multipliers, out_c)) continue;  // the reference kernel's cases
        ++fast_cases;
        fw::conv2d_params packed_q = q;
        fw::conv2d_im2col_pack_weights(q, q.weights, packed + misalign);
        packed_q.weights = packed + misalign;
        fw::conv2d_im2col(packed_q, input2 + misalign, fast_output + misalign, scratch + misalign);
        mismatches += compare_fast("conv2d_im2col", n, misalign, p.output.elements());
        mismatches += channel_last_mismatch("conv2d_im2col", n, packed_q,
                                            [](const auto& k, const std::int8_t* i, std::int8_t* o) {
                                                fw::conv2d_im2col(k, i, o, scratch + 1);
                                            });
        if (fw::depthwise_conv2d_3x3_applies(q)) {
            fw::depthwise_conv2d_3x3(q, input2 + misalign, fast_output + misalign, scratch + misalign);
            mismatches += compare_fast("depthwise_conv2d_3x3", n, misalign, p.output.elements());
            const bool in_place_ok =
                in_place_matches(q, p.output.elements(), [](const auto& k, const std::int8_t* i, std::int8_t* o) {
                    fw::depthwise_conv2d_3x3(k, i, o, scratch + 1);
                });
            mismatches += in_place_ok ? 0 : 1;
            if (!in_place_ok) console::line() << "depthwise_conv2d_3x3 " << n << " in-place mismatch\n";
        }
    }
    return mismatches;
}

int linear_cases(random_bits& r, int cases) {
    int mismatches = 0;
    for (int n = 0; n < cases; ++n) {
        fw::linear_params p;
        p.in_features = r.between(1, 300);
        p.out_features = r.between(1, 24);
        const int misalign = r.between(0, 3);  // the DSP path loads four bytes at any address
        const bool extreme = r.between(0, 5) == 0;
        fill(r, input + misalign, p.in_features, extreme);
        fill(r, weights + 3 - misalign, p.in_features * p.out_features, extreme);
        p.input_offset = offset(r, extreme);
        p.output_offset = r.between(-128, 127);
        p.range = range(r);
        fill_rescale(r, p.out_features, true);
        p.weights = weights + 3 - misalign;
        p.bias = bias;
        p.multipliers = multipliers;
        fw::linear(p, input + misalign, output);
        report("linear", n, output, p.out_features);
        if (!fw::prepared_output_applies(p.multipliers, p.out_features)) continue;
        ++fast_cases;
        fw::linear_blocked(p, input + misalign, fast_output + 3 - misalign);
        mismatches += compare_fast("linear_blocked", n, 3 - misalign, p.out_features);
    }
    return mismatches;
}

void elementwise_cases(random_bits& r, int cases) {
    for (int n = 0; n < cases; ++n) {
        const int elements = r.between(1, 500);
        fill(r, input, elements, false);
        fill(r, input2, elements, false);
        fw::add_params a{elements,
                         offset(r, false),
                         offset(r, false),
                         r.between(-128, 127),
                         static_cast<std::int32_t>((1U << 21) + (r.next() >> 11)),
                         static_cast<std::int32_t>(r.next() >> 10),
                         r.between(13, 31),
                         range(r)};
        fw::add(a, input, input2, output);
        report("add", n, output, elements);
        fw::clamp_params c{elements, offset(r, false), r.between(-128, 127),
                           {static_cast<std::int32_t>((1U << 30) + (r.next() >> 2)), r.between(-3, 2)}, range(r)};
        fw::clamp(c, input, output);
        report("clamp", n, output, elements);
    }
}

int pool_cases(random_bits& r, int cases) {
    int mismatches = 0;
    for (int n = 0; n < cases; ++n) {
        fw::shape in{r.between(1, 8), r.between(1, 16), r.between(1, 16)};
        fw::window w = window(r, 4);
        if (w.padding_h * 2 > w.kernel_h) w.padding_h = w.kernel_h / 2;
        if (w.padding_w * 2 > w.kernel_w) w.padding_w = w.kernel_w / 2;
        fw::shape out = fw::output_shape(in, w, in.channels);
        if (out.elements() <= 0) { --n; continue; }
        fill(r, input, in.elements(), false);
        const fw::max_pool2d_params m{in, out, w, range(r)};
        fw::max_pool2d(m, input, output);
        bool ok = in_place_matches(
            m, out.elements(), [](const auto& q, const std::int8_t* i, std::int8_t* o) { fw::max_pool2d(q, i, o); });
        mismatches += ok ? 0 : 1;
        report("max_pool2d", n, output, out.elements(), ok);
        w.dilation_h = w.dilation_w = 1;
        out = fw::output_shape(in, w, in.channels);
        const fw::avg_pool2d_params a{in, out, w, r.between(0, 1) == 1, r.between(-128, 127), range(r)};
        fw::avg_pool2d(a, input, output);
        ok = in_place_matches(a, out.elements(),
                              [](const auto& q, const std::int8_t* i, std::int8_t* o) { fw::avg_pool2d(q, i, o); });
        mismatches += ok ? 0 : 1;
        report("avg_pool2d", n, output, out.elements(), ok);
        const std::int32_t zero_point = r.between(-128, 127);  // apart: argument order is unspecified
        const fw::avg_pool2d_params g = fw::global_avg_pool2d(in, zero_point, range(r));
        fw::avg_pool2d(g, input, output);
        report("global_avg_pool2d", n, output, in.channels);
    }
    return mismatches;
}

}  // namespace

int main() {
    random_bits r{0x5EED1234U};
    int mismatches = conv2d_cases(r, 240, 0, 3);
    mismatches += conv2d_cases(r, 120, 4, 4);
    mismatches += conv2d_cases(r, 60, 5, 5);
    mismatches += linear_cases(r, 120);
    elementwise_cases(r, 60);
    mismatches += pool_cases(r, 80);
    console::line() << "in-place and fast mismatches " << mismatches << " in " << fast_cases << " fast cases\n";
    // Most cases must reach a fast kernel, or the sweep proves little about them.
    return mismatches == 0 && fast_cases >= 200 ? 0 : 1;
}

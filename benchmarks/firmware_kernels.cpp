// Instructions per MAC of the firmware's convolution and linear kernels on the six MLPerf
// Tiny layer shapes of the firmware-speed issue, on the MPS2 AN386 board (Cortex-M4) under
// QEMU with -icount shift=0, for benchmarks/firmware_kernels.py. The SysTick counts the
// board's 25 MHz clock while QEMU runs one instruction per virtual nanosecond, so a tick is
// 40 instructions: this counts instructions, not cycles (the script estimates cycles from
// the executed instruction mix). Each layer runs once with the reference kernel and once
// with the fast kernel the exporter picks for it, on the same seeded random data with
// per-channel multipliers and a ReLU range; the two outputs must be the same bytes.
// Prints, per run: layer NAME kernel KERNEL macs N instructions I. Between
// versatil_benchmark_mark(1) and (2) lies exactly one kernel call, for the cycle estimate.
#include <cstddef>
#include <cstdint>

#include "console.hpp"
#include "mps2_an386/instruction_counter.hpp"
#include "versatil/firmware/convolution/conv2d_im2col.hpp"
#include "versatil/firmware/convolution/depthwise_conv2d_3x3.hpp"
#include "versatil/firmware/firmware.hpp"
#include "versatil/firmware/fully_connected/linear_blocked.hpp"

namespace {

namespace fw = versatil::firmware;


std::int8_t input[48 * 48 * 32], reference_output[48 * 48 * 32], fast_output[48 * 48 * 32];
std::int8_t weights[640 * 128], packed_weights[640 * 128], scratch[4 * 64 * 9];
std::int32_t bias[128];
versatil::math::fixed_point_multiplier multipliers[128];

struct random_bits {
    std::uint32_t state;
    std::uint32_t next() noexcept {  // xorshift32
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        return state;
    }
    std::int8_t level() noexcept { return static_cast<std::int8_t>(next() & 0xFF); }
};

// Per-channel rescales of a typical layer: a real multiplier near 2^-8 to 2^-10.
void fill(random_bits& r, int input_count, int weight_count, int channels) noexcept {
    for (int i = 0; i < input_count; ++i) input[i] = r.level();
    for (int i = 0; i < weight_count; ++i) weights[i] = r.level();
    for (int c = 0; c < channels; ++c) {
        bias[c] = static_cast<std::int32_t>(r.next() % 20001) - 10000;
        multipliers[c] = {static_cast<std::int32_t>((1U << 30) + (r.next() >> 2)), -7 - static_cast<int>(r.next() % 3)};
    }
}

}  // namespace

// A call the cycle estimate finds in QEMU's execution log: kept out of line and not merged.
extern "C" __attribute__((noinline, used)) void versatil_benchmark_mark(int where) { asm volatile("" : : "r"(where) : "memory"); }

namespace {

using counter = mps2_an386::instruction_counter;

template <class Body>
int measure(Body body) noexcept {
    versatil_benchmark_mark(1);
    const std::uint32_t before = counter::now();
    body();
    const std::uint32_t after = counter::now();
    versatil_benchmark_mark(2);
    return counter::instructions_between(before, after);
}

// One empty measurement, the first mark(1)/mark(2) pair of the run: the cycle estimate takes the
// first region as this overhead (a static per instantiation of `instructions` would measure it
// again for every kernel lambda, and the regions would no longer pair with the printed lines).
int overhead = -1;

// Instructions of `run`, less those of an empty measurement.
template <class Run>
int instructions(Run run) noexcept {
    if (overhead < 0) overhead = measure([] {});
    return measure(run) - overhead;
}

int mismatches = 0;

void report(const char* layer, const char* kernel, long macs, int count) {
    console::line() << "layer " << layer << " kernel " << kernel << " macs " << static_cast<int>(macs)
                    << " instructions " << count << "\n";
}

void check(const char* layer, int bytes) {
    for (int i = 0; i < bytes; ++i)
        if (reference_output[i] != fast_output[i]) {
            console::line() << "layer " << layer << " fast mismatch at " << i << "\n";
            ++mismatches;
            return;
        }
}

void convolution(const char* layer, fw::shape in, int out_channels, fw::window win, int groups, random_bits& r) {
    fw::conv2d_params p;
    p.input = in;
    p.win = win;
    p.groups = groups;
    p.output = fw::output_shape(in, win, out_channels);
    const int weight_count = out_channels * in.channels / groups * win.kernel_h * win.kernel_w;
    fill(r, in.elements(), weight_count, out_channels);
    p.input_offset = 3;
    p.output_offset = -128;
    p.range = {-128, 127};
    p.weights = weights;
    p.bias = bias;
    p.multipliers = multipliers;
    const long macs = static_cast<long>(p.output.elements()) * (in.channels / groups) * win.kernel_h * win.kernel_w;
    report(layer, "conv2d", macs, instructions([&] { fw::conv2d(p, input, reference_output); }));
    if (fw::depthwise_conv2d_3x3_applies(p))
        report(layer, "depthwise_conv2d_3x3", macs, instructions([&] { fw::depthwise_conv2d_3x3(p, input, fast_output, scratch); }));
    else {
        fw::conv2d_params packed = p;  // the exporter stores the weights in the kernel's order
        fw::conv2d_im2col_pack_weights(p, weights, packed_weights);
        packed.weights = packed_weights;
        report(layer, "conv2d_im2col", macs, instructions([&] { fw::conv2d_im2col(packed, input, fast_output, scratch); }));
    }
    check(layer, p.output.elements());
}

void fully_connected(const char* layer, int in_features, int out_features, random_bits& r) {
    fill(r, in_features, in_features * out_features, out_features);
    const fw::linear_params p{in_features, out_features, 3, -128, {-128, 127}, weights, bias, multipliers};
    const long macs = static_cast<long>(in_features) * out_features;
    report(layer, "linear", macs, instructions([&] { fw::linear(p, input, reference_output); }));
    report(layer, "linear_blocked", macs, instructions([&] { fw::linear_blocked(p, input, fast_output); }));
    check(layer, out_features);
}

}  // namespace

int main() {
    const counter started;
    random_bits r{0x1D0A5EEDU};
    const fw::window conv3x3{3, 3, 1, 1, 1, 1, 1, 1}, conv3x3_stride2{3, 3, 2, 2, 1, 1, 1, 1}, pointwise{};
    convolution("resnet8_conv3x3_32x32_16x16", {32, 16, 16}, 32, conv3x3, 1, r);
    convolution("dscnn_depthwise3x3_64_25x5", {64, 25, 5}, 64, conv3x3, 64, r);
    convolution("dscnn_pointwise_64x64_25x5", {64, 25, 5}, 64, pointwise, 1, r);
    convolution("mobilenet_depthwise3x3_stride2_32_48x48", {32, 48, 48}, 32, conv3x3_stride2, 32, r);
    convolution("mobilenet_pointwise_16x32_48x48", {16, 48, 48}, 32, pointwise, 1, r);
    fully_connected("autoencoder_linear_640x128", 640, 128, r);
    console::line() << "fast mismatches " << mismatches << "\n";
    return mismatches == 0 ? 0 : 1;
}

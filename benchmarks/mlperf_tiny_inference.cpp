// Instructions per inference of an exported model on embedded int8 samples, on the MPS2 AN386
// board under QEMU with -icount shift=0, for benchmarks/mlperf_tiny.py. As in
// firmware_inference.cpp: one SysTick tick of the board's 25 MHz clock is 40 instructions of
// icount time, and QEMU counts instructions, not cycles.
//
//   -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_NAMESPACE=name
//   -DVERSATIL_SAMPLES_HEADER='"samples.hpp"' (tests/firmware/check_mlperf_tiny.py writes it)
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include VERSATIL_SAMPLES_HEADER
#include "console.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

volatile std::uint32_t* const systick = reinterpret_cast<volatile std::uint32_t*>(0xE000E010);  // CSR, RVR, CVR
constexpr int instructions_per_tick = 40;  // 1 GHz of icount time / 25 MHz

std::byte arena[model::arena_bytes];
std::int8_t output[model::output_size];

}  // namespace

int main() {
    systick[1] = 0xFFFFFF;  // reload: 24 bits, 671 million instructions before it wraps
    systick[2] = 0;
    systick[0] = 5;         // enabled, processor clock, no interrupt
    for (int sample = 0; sample < embedded_samples::count; ++sample) {
        const std::uint32_t before = systick[2];
        model::run(embedded_samples::inputs[sample], output, arena);
        const std::uint32_t ticks = (before - systick[2]) & 0xFFFFFFU;
        console::line() << "inference " << sample << " instructions " << static_cast<int>(ticks) * instructions_per_tick << "\n";
    }
    return 0;
}

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
#include "mps2_an386/instruction_counter.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

std::byte arena[model::arena_bytes];
std::int8_t output[model::output_size];

}  // namespace

int main() {
    const mps2_an386::instruction_counter counter;
    for (int sample = 0; sample < embedded_samples::count; ++sample) {
        const std::uint32_t before = counter.now();
        model::run(embedded_samples::inputs[sample], output, arena);
        console::line() << "inference " << sample << " instructions " << counter.instructions_between(before, counter.now())
                        << "\n";
    }
    return 0;
}

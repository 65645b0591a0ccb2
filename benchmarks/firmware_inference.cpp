// Instructions per inference of an exported model on the MPS2 AN386 board under QEMU, for
// benchmarks/firmware.py. QEMU runs with -icount shift=0 (one instruction per virtual
// nanosecond) and the SysTick counts the board's 25 MHz clock, so one tick is 40 instructions.
// This counts instructions, not cycles: QEMU models no pipeline, memory wait states or the
// DWT cycle counter. Prints the model's figures and the count for each embedded image.
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include VERSATIL_IMAGES_HEADER
#include "console.hpp"
#include "mps2_an386/instruction_counter.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

std::byte arena[model::arena_bytes];
std::int8_t input[model::input_size];
std::int8_t output[model::output_size];

}  // namespace

int main() {
    const mps2_an386::instruction_counter counter;
    console::line() << "arena_bytes " << static_cast<int>(model::arena_bytes) << "\n";
    for (int image = 0; image < embedded_images::count; ++image) {
        for (std::size_t i = 0; i < model::input_size; ++i)  // raw pixels shifted to int8: the count does not depend on the values' meaning
            input[i] = static_cast<std::int8_t>(embedded_images::pixels[image][i] - 128);
        const std::uint32_t before = counter.now();
        model::run(input, output, arena);
        console::line() << "inference " << image << " instructions " << counter.instructions_between(before, counter.now())
                        << "\n";
    }
    return 0;
}

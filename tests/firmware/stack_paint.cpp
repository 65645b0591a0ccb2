// The stack an exported model's run uses on the board, measured by painting: a pattern written
// below the stack pointer, run called, then the lowest word no longer holding the pattern. Prints
// "run used N bytes of stack" (check_stack.py compares it with the header's model::stack_bytes).
// run goes through a function the compiler may not inline into main, so main's frame is not
// counted and run's whole frame is.
//
//   -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_NAMESPACE=name -DVERSATIL_BOARD_MPS2_AN386
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include "console.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

constexpr std::uint32_t pattern = 0xC0FFEE11U;
constexpr std::size_t painted_words = 4096;  // 16 KiB, far more than any kernel's frame

std::byte arena[model::arena_bytes];
std::int8_t input[model::input_size], output[model::output_size];

__attribute__((noinline)) void run_model() noexcept { model::run(input, output, arena); }

}  // namespace

int main() {
    for (std::size_t i = 0; i < model::input_size; ++i) input[i] = static_cast<std::int8_t>(i * 73 % 256);
    std::uint32_t* sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    // From the word below sp down: nothing of main's lives there, and this loop keeps its
    // pointers in registers.
    for (volatile std::uint32_t* word = sp - 1; word >= sp - painted_words; --word) *word = pattern;
    run_model();
    std::size_t lowest = painted_words;  // in words below sp
    while (lowest > 0 && sp[-static_cast<std::ptrdiff_t>(lowest)] == pattern) --lowest;
    if (lowest == painted_words) {
        console::line() << "run went past the painted " << static_cast<int>(4 * painted_words) << " bytes\n";
        return 1;
    }
    console::line() << "run used " << static_cast<int>(4 * lowest) << " bytes of stack\n";
    return 0;
}

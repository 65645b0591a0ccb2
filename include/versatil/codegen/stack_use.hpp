// The stack an exported model's run needs on a Cortex-M4: run's own frame plus the deepest
// kernel the model calls, each kernel's figure counting its own frame and every call below it
// (a kernel the compiler inlines into run moves its frame there, which the sum still covers).
// Measured with arm-none-eabi-gcc 12.2's -fstack-usage and -fcallgraph-info=su on
// tests/firmware/stack_probe.cpp (every kernel behind a function of its own), at -Os and -O2,
// DSP and portable paths, the largest of the four; newlib's memset (12 bytes) read off its
// disassembly. tests/firmware/check_stack.py fails when a kernel needs more than its figure
// here, when a kernel has none, or when a model's run, compiled or painted on the board under
// QEMU, uses more than the header states; `check_stack.py --update` prints the measured table.
// Another compiler or flags can need more: measure with check_stack.py.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace versatil::codegen {

struct kernel_stack {
    std::string_view kernel;
    std::size_t bytes;
};

// model::run's own frame: the registers it saves, the arena's addresses, and what the kernels the
// compiler inlines into it keep there (a concat's part list, a table op's loop). Measured up to
// 80 B on the suite's models (MobileNetV3-small, -O2 DSP), 48 B on those with no table op or concat.
inline constexpr std::size_t run_frame_stack_bytes = 96;

inline constexpr kernel_stack kernel_stacks[] = {
    {"conv2d", 424}, {"conv2d_im2col", 560}, {"depthwise_conv2d_3x3", 236}, {"linear", 96}, {"linear_blocked", 168},
    {"add", 40},     {"clamp", 80},          {"max_pool2d", 112},          {"avg_pool2d", 128}, {"lookup", 12},
    {"mul", 112},    {"softmax", 32},        {"concat", 32},               {"permute", 36},     {"pad", 28},
};

inline std::size_t kernel_stack_bytes(std::string_view kernel) {
    for (const kernel_stack& k : kernel_stacks)
        if (k.kernel == kernel) return k.bytes;
    throw std::logic_error("versatil::codegen: no stack figure for kernel '" + std::string(kernel) +
                           "': measure it (tests/firmware/check_stack.py --update) and add it to stack_use.hpp");
}

}  // namespace versatil::codegen

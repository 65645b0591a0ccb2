// Reset for the MPS2 AN386 (Cortex-M4): the vector table, the FPU switched on when the build
// uses it, then .data copied from flash,
// .bss zeroed, static constructors, main, and its status handed to the host through
// semihosting. Faults end the run with status 3 instead of hanging QEMU.
#include <cstdint>

#include "semihosting.hpp"

extern "C" {
extern std::uint32_t _data_start[], _data_end[], _data_load[], _bss_start[], _bss_end[], _stack_top[];
extern void (*__init_array_start[])(), (*__init_array_end[])();
int main();
[[noreturn]] void reset_handler();
[[noreturn]] void fault_handler();
}

[[noreturn]] void reset_handler() {
#if defined(__ARM_FP)
    // A Cortex-M4F starts with its FPU off: full access to coprocessors 10 and 11 (CPACR) before
    // any floating-point instruction, then barriers so the next instruction sees it.
    *reinterpret_cast<volatile std::uint32_t*>(0xE000ED88) |= 0xFU << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    for (std::uint32_t *from = _data_load, *to = _data_start; to < _data_end;) *to++ = *from++;
    for (std::uint32_t* to = _bss_start; to < _bss_end;) *to++ = 0;
    for (auto* constructor = __init_array_start; constructor < __init_array_end; ++constructor) (*constructor)();
    mps2_an386::exit_with(main());
}

[[noreturn]] void fault_handler() {
    mps2_an386::write_stdout("fault\n", 6);
    mps2_an386::exit_with(3);
}

// Initial stack pointer, reset, NMI, then the fault handlers; the rest are unused here.
// Entries are addresses: the first is the initial stack pointer, not a function.
__attribute__((section(".vectors"), used)) const std::uintptr_t vector_table[16] = {
    reinterpret_cast<std::uintptr_t>(_stack_top), reinterpret_cast<std::uintptr_t>(reset_handler),
    reinterpret_cast<std::uintptr_t>(fault_handler), reinterpret_cast<std::uintptr_t>(fault_handler),
    reinterpret_cast<std::uintptr_t>(fault_handler), reinterpret_cast<std::uintptr_t>(fault_handler),
    reinterpret_cast<std::uintptr_t>(fault_handler),
};

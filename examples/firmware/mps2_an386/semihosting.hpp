// Arm semihosting, the debugger's console and exit call (QEMU: -semihosting-config
// enable=on,target=native): bytes to the host's standard output and an exit status, with
// nothing from newlib's stdio, which would bring malloc along.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mps2_an386 {

inline std::uintptr_t semihosting_call(std::uintptr_t operation, const void* argument) noexcept {
    register std::uintptr_t r0 asm("r0") = operation;
    register const void* r1 asm("r1") = argument;
    asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

// SYS_OPEN of ":tt" for writing is the host's standard output; SYS_WRITE sends bytes to it.
inline std::uintptr_t stdout_handle = ~std::uintptr_t{0};  // not opened yet

inline void write_stdout(const char* bytes, std::size_t count) noexcept {
    if (stdout_handle == ~std::uintptr_t{0}) {
        static constexpr char name[] = ":tt";
        const std::uintptr_t block[3] = {reinterpret_cast<std::uintptr_t>(name), 4 /* "w" */, sizeof name - 1};
        stdout_handle = semihosting_call(0x01, block);
    }
    const std::uintptr_t block[3] = {stdout_handle, reinterpret_cast<std::uintptr_t>(bytes), count};
    semihosting_call(0x05, block);
}

// SYS_EXIT_EXTENDED with ADP_Stopped_ApplicationExit: QEMU exits with `status`.
[[noreturn]] inline void exit_with(int status) noexcept {
    const std::uintptr_t block[2] = {0x20026, static_cast<std::uintptr_t>(status)};
    for (;;) semihosting_call(0x20, block);
}

}  // namespace mps2_an386

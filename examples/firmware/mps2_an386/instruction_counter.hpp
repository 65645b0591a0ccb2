// Instructions executed on the MPS2 AN386 board under QEMU with -icount shift=0: QEMU then runs
// one instruction per virtual nanosecond and the SysTick counts the board's 25 MHz clock, so a
// tick is 40 instructions. This counts instructions, not cycles (QEMU models no pipeline, no
// wait states and no DWT cycle counter). The 24-bit counter wraps after 671 million.
#pragma once

#include <cstdint>

namespace mps2_an386 {

class instruction_counter {
public:
    static constexpr int instructions_per_tick = 40;  // 1 GHz of icount time / 25 MHz

    instruction_counter() noexcept {
        systick()[1] = 0xFFFFFF;  // reload: all 24 bits
        systick()[2] = 0;
        systick()[0] = 5;         // enabled, processor clock, no interrupt
    }

    // The counter's value now; instructions_between(a, b) for a read before b.
    static std::uint32_t now() noexcept { return systick()[2]; }
    static int instructions_between(std::uint32_t before, std::uint32_t after) noexcept {
        return static_cast<int>((before - after) & 0xFFFFFFU) * instructions_per_tick;  // it counts down
    }

private:
    static volatile std::uint32_t* systick() noexcept {
        return reinterpret_cast<volatile std::uint32_t*>(0xE000E010);  // CSR, RVR, CVR
    }
};

}  // namespace mps2_an386

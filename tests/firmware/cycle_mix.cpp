// A known instruction mix between two marker calls, for check_cycle_estimate.py: the estimator
// (benchmarks/cortex_m4_cycles.py) must count exactly the instructions and cycles worked out by
// hand there. Hand-written Thumb-2 so that no compiler decides what runs between the marks.
#include <cstdint>

extern "C" void cycle_mix(std::int32_t* data);

// Two blocks of 8 words the loop reads, and room for the stores after it; word aligned.
alignas(8) std::int32_t cycle_data[32] = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0,
                                          -1, -2, -3, -4, -5, -6, -7, -8};

int main() {
    cycle_mix(cycle_data);
    return 0;
}

// Every line between the two `bl versatil_benchmark_mark` is priced in check_cycle_estimate.py,
// numbered as there.
asm(R"(
    .syntax unified
    .thumb
    .text
    .global versatil_benchmark_mark
    .type versatil_benchmark_mark, %function
    .thumb_func
versatil_benchmark_mark:
    bx lr                       @ 0 (the region opens at this entry)

    .global cycle_mix
    .type cycle_mix, %function
    .thumb_func
cycle_mix:
    push {r4, r5, r6, r7, r8, lr}
    mov r4, r0
    movs r0, #1
    bl versatil_benchmark_mark
    movs r3, #4                 @ 1
    mov r1, r4                  @ 2
    add.w r2, r4, #32           @ 3
    nop                         @ 4
1:  ldr r5, [r1], #4            @ loop: 4 times
    ldr r6, [r2], #4
    smlad r7, r5, r6, r7
    sxtb16 r8, r5
    subs r3, #1
    bne 1b
    ldr r5, [r4]                @ 5
    ldr r6, [r4, #4]            @ 6
    str r6, [r4, #8]            @ 7
    ldr r5, [r4, #12]           @ 8
    str r5, [r4, r3]            @ 9
    str r5, [r4, r3]            @ 10
    adds r1, r4, #4             @ 11
    ldr r5, [r1]                @ 12
    ldrd r5, r6, [r4]           @ 13
    strd r5, r6, [r4, #16]      @ 14
    ldm r4, {r5, r6, r7}        @ 15
    stm r1, {r5, r6}            @ 16
    cmp r3, #0                  @ 17
    it eq                       @ 18
    moveq r7, #1                @ 19
    mla r8, r5, r6, r8          @ 20
    smull r5, r6, r5, r6        @ 21
    movs r5, #3                 @ 22
    sdiv r7, r5, r5             @ 23
    cbz r3, 2f                  @ 24
    nop                         @ (skipped)
2:  cbnz r3, 3f                 @ 25
    nop                         @ 26
3:  ldr r0, =0xE000E018         @ 27
    ldr r0, [r0]                @ 28 (the SysTick's current value: I/O, QEMU rewinds the block)
    movs r0, #2                 @ 29
    bl versatil_benchmark_mark  @ 30 (the region closes at the mark's entry)
    pop {r4, r5, r6, r7, r8, pc}
    .ltorg
)");

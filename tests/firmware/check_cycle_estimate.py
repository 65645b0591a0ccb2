#!/usr/bin/env python3
"""The Cortex-M4 cycle estimate (benchmarks/cortex_m4_cycles.py) on a hand-written instruction mix
(cycle_mix.cpp) under QEMU: it must find one marked region and count exactly the instructions and
estimated cycles worked out by hand below from the Cortex-M4 TRM's timing table (Arm DDI 0439,
3.3.1 Table 3-1 and 3.3.2 "Load/store timings"), for a pipeline refill P of 1, 2 and 3.

  check_cycle_estimate.py --compiler arm-none-eabi-g++ --root REPO

The mix, numbered as in cycle_mix.cpp; "after X" is the instruction before it; P = refill:

   0  bx lr (the marker's body)                             1+P
   1  movs r3, #4                                           1
   2  mov r1, r4                                            1
   3  add.w r2, r4, #32                                     1
   4  nop                                                   1
      loop, 4 times:
        ldr r5, [r1], #4   after nop or bne: not pipelined  2
        ldr r6, [r2], #4   after a load, r5 not its address 1
        smlad / sxtb16 / subs                               1 each
        bne                taken 3 times, not taken once    3(1+P) + 1
      loop: 24 instructions, 4*6 + 3(1+P) + 1 = 28 + 3P
   5  ldr r5, [r4]         after bne                        2
   6  ldr r6, [r4, #4]     pipelined after a load           1
   7  str r6, [r4, #8]     immediate offset                 1
   8  ldr r5, [r4, #12]    after a store: not pipelined     2
   9  str r5, [r4, r3]     register offset, after a load    1
  10  str r5, [r4, r3]     register offset, after a store   2
  11  adds r1, r4, #4                                       1
  12  ldr r5, [r1]         address from the ALU just before 2+1
  13  ldrd r5, r6, [r4]    1+N, never pipelined             3
  14  strd r5, r6, [r4, #16]                                3
  15  ldm r4, {r5, r6, r7} 1+N                              4
  16  stm r1, {r5, r6}     1+N                              3
  17  cmp r3, #0           (16-bit)                         1
  18  it eq                folded onto the 16-bit cmp       0
  19  moveq r7, #1                                          1
  20  mla                                                   1
  21  smull                                                 1
  22  movs r5, #3                                           1
  23  sdiv                 the model's assumed 7            7
  24  cbz r3 (r3 is 0)     taken                            1+P
  25  cbnz r3              not taken                        1
  26  nop                                                   1
  27  ldr r0, =literal     after nop                        2
  28  ldr r0, [r0]         the SysTick: an I/O access QEMU
                           redoes as a block of its own;
                           its address is the load before's
                           destination: not pipelined       2
  29  movs r0, #2                                           1
  30  bl mark                                               1+P

Instructions: 1 + 4 + 24 + 26 = 55 (the skipped nop after cbz does not run).
Cycles: fixed 1 + 4 + 28 + 47 = 80 (5..30: 2+1+1+2+1+2+1+3+3+3+4+3+1+0+1+1+1+1+7+1+1+1+2+2+1+1 = 47),
refills 1 + 3 + 1 + 1 = 6: P=1 86, P=2 92, P=3 98.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import device  # noqa: E402

EXPECTED_INSTRUCTIONS = 55
EXPECTED_CYCLES = {1: 86, 2: 92, 3: 98}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiler", default="arm-none-eabi-g++")
    parser.add_argument("--root", default=str(HERE.parent.parent))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.root) / "benchmarks"))
    import cortex_m4_cycles
    board = Path(args.root) / "examples" / "firmware" / "mps2_an386"
    with tempfile.TemporaryDirectory() as directory:
        elf = Path(directory) / "cycle_mix.elf"
        subprocess.run([args.compiler, *device.FLAGS, "-DVERSATIL_BOARD_MPS2_AN386",
                        f"-I{Path(args.root) / 'include'}", f"-I{Path(args.root) / 'examples' / 'firmware'}",
                        "-nostartfiles", "-T", str(board / "mps2_an386.ld"), "-Wl,--gc-sections",
                        str(board / "startup.cpp"), str(HERE / "cycle_mix.cpp"), "-o", str(elf)], check=True)
        output, status, regions = cortex_m4_cycles.run(elf, nm=device.tool(args.compiler, "nm"), timeout=60)
    failures = []
    if status != 0:
        failures.append(f"QEMU exited {status}: {output}")
    if len(regions) != 1:
        failures.append(f"{len(regions)} marked regions, expected 1")
    else:
        region = regions[0]
        print(f"instructions {region.instructions} (expected {EXPECTED_INSTRUCTIONS}); "
              f"by class: {cortex_m4_cycles.breakdown(region)}")
        if region.instructions != EXPECTED_INSTRUCTIONS:
            failures.append(f"instructions {region.instructions}, expected {EXPECTED_INSTRUCTIONS}")
        for refill, expected in EXPECTED_CYCLES.items():
            print(f"P={refill}: estimated cycles {region.cycles(refill)} (expected {expected})")
            if region.cycles(refill) != expected:
                failures.append(f"P={refill}: estimated cycles {region.cycles(refill)}, expected {expected}")
        if region.unknown:
            failures.append(f"mnemonics outside the model: {region.unknown}")
    for failure in failures:
        print("FAIL: " + failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An ESTIMATE of Cortex-M4 cycles beside QEMU's instruction count, from the executed instruction
mix: QEMU (-icount shift=0) counts instructions, but on a Cortex-M4 a load, a taken branch or a
multi-register store takes more than one cycle.

QEMU logs each block it translates with its disassembly (-d in_asm) and each block it executes
(-d exec, with nochain so that every block is logged); this module streams that log through a FIFO
(the full log of the kernel benchmark is ~0.7 GB, never stored), splits the run into regions
between consecutive calls of a marker function (the 1st, 3rd, ... call open a region, the 2nd,
4th, ... close it: `versatil_benchmark_mark(1)` / `(2)` in the benchmarks), and prices every
executed instruction with the cost model below.

Source of the cost model: Arm Cortex-M4 Processor Technical Reference Manual (Arm DDI 0439 /
100166_0001_00), section 3.3 "Processor instruction timings": 3.3.1 Table 3-1 "Processor
instruction set summary" (cycles per instruction, zero wait states) and 3.3.2 "Load/store
timings" (which loads and stores pipeline). TI reproduces both in its Cortex-M4F device manuals
(e.g. SWCU192, "Instruction Set Summary" and "Load/Store Timings").

  class              instructions                                   cycles
  other              data processing, MOV/MOVW/MOVT, shifts,        1
                     compare, logic, QADD/QSUB, SSAT/USAT, bit
                     field, CLZ, REV, SIMD add/sub, NOP
  multiply-acc.      MUL, MLA, MLS, SMULL, UMULL, SMLAL, UMLAL,     1
                     SMLAD(X), SMLSD, SMUAD, SMLAxy, SMULxy, ...
  extend/pack        SXTB, SXTH, UXTB, UXTH, SXTB16, UXTB16,        1
                     SXTAB, SXTAH, SXTAB16, UXTAB16, PKHBT, PKHTB
  divide             SDIV, UDIV                                     2..12; assumed 7 (DIVIDE_CYCLES)
  load               LDR, LDRB, LDRH, LDRSB, LDRSH, LDREX           2; 1 when it directly follows a
                                                                    single LDR-type load whose
                                                                    destination is not in its address
                     LDRD                                           1+N = 3, never pipelined
                     LDM, POP                                       1+N; +P when PC is loaded
                     LDR PC, [...]                                  2+P
  store              STR, STRB, STRH, STREX, immediate or           1 (3.3.2: "always one cycle", the
                     post/pre-indexed address                          write buffer takes the data)
                     STR... [Rn, Rm] (register offset)              2 (3.3.2: nothing pipelines after
                                                                    it); 1 right after a single LDR
                     STRD                                           1+N = 3
                     STM, PUSH                                      1+N
  branch             B, BL, BX, BLX; MOV/ADD with PC destination    1+P
                     B<cond>, CBZ, CBNZ (and a branch made          taken 1+P, not taken 1
                     conditional by IT)
                     TBB, TBH                                       2+P
  other              IT                                             0 when folded: the TRM lets IT fold
                                                                    onto a preceding 16-bit instruction;
                                                                    1 after a 32-bit one or a branch
  (any load/store)   address register written by the immediately    +1 (3.3.2: no forwarding path from
                     preceding data-processing instruction             the ALU to address generation)

P, the pipeline refill, is 1 to 3 cycles by the TRM ("depending on the alignment and width of the
target instruction, and whether the processor manages to speculate the address early"). The
estimate uses P = 2, the middle, and reports the range with P = 1 and P = 3. A block's final
conditional branch is taken when the next executed block does not start at its fall-through
address (QEMU ends a block at every branch, so the final instruction is the only branch).

Assumptions, which the log cannot tell: all memory accesses aligned (an unaligned word access costs
a Cortex-M4 an extra cycle) and zero wait states (flash and SRAM at core speed, as the TRM's table
assumes); a conditional instruction inside an IT block costs as if its condition passed (a load
that fails its condition takes 1 cycle, not 2; other instructions cost 1 either way); SDIV/UDIV
take DIVIDE_CYCLES (the TRM: 2 to 12 by early termination on the operands); LDR from a PC-relative
literal costs no extra fetch contention; barriers (DMB, DSB) cost 1, ISB 1+P. This is an estimate
of the core's cycles, not a measurement.

  benchmarks/cortex_m4_cycles.py ELF [--mark SYMBOL] [--refill P] [--calibration] [--breakdown]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

QEMU_ICOUNT = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel"]
MARK = "versatil_benchmark_mark"
REFILL = 2             # P: the middle of the TRM's 1..3
REFILL_RANGE = (1, 3)
DIVIDE_CYCLES = 7      # SDIV/UDIV: the middle of the TRM's 2..12
CLASSES = ("load", "store", "multiply-accumulate", "extend/pack", "divide", "branch", "other")

CONDITIONS = {"eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le"}
ALIASES = {"sb": 9, "sl": 10, "fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}
REGISTER = re.compile(r"\b(r1[0-5]|r[0-9]|sb|sl|fp|ip|sp|lr|pc)\b")
LINE = re.compile(r"^0x([0-9a-f]+):\s+([0-9a-f]{4})(?: ([0-9a-f]{4}))?\s+(\S+)\s*(.*)$")

SINGLE_LOADS = {"ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrex", "ldrexb", "ldrexh", "ldrt", "ldrbt", "ldrht",
                "ldrsbt", "ldrsht"}
SINGLE_STORES = {"str", "strb", "strh", "strex", "strexb", "strexh", "strt", "strbt", "strht"}
LOAD_MULTIPLE = {"ldm", "ldmia", "ldmfd", "ldmdb", "ldmea", "pop"}
STORE_MULTIPLE = {"stm", "stmia", "stmea", "stmdb", "stmfd", "push"}
MULTIPLY = {"mul", "mla", "mls", "smull", "umull", "smlal", "umlal", "umaal", "smlad", "smladx", "smlsd", "smlsdx",
            "smuad", "smuadx", "smusd", "smusdx", "smlald", "smlaldx", "smlsld", "smlsldx", "smmla", "smmlar",
            "smmls", "smmlsr", "smmul", "smmulr", "usad8", "usada8"} | \
    {f"sm{op}{x}{y}" for op in ("la", "ul") for x in "bt" for y in "bt"} | \
    {f"sm{op}w{y}" for op in ("la", "ul") for y in "bt"} | {f"smlal{x}{y}" for x in "bt" for y in "bt"}
EXTEND = {"sxtb", "sxth", "uxtb", "uxth", "sxtb16", "uxtb16", "sxtab", "sxtah", "uxtab", "uxtah", "sxtab16", "uxtab16",
          "pkhbt", "pkhtb"}
DIVIDE = {"sdiv", "udiv"}
BRANCHES = {"b", "bl", "blx", "bx", "cbz", "cbnz", "tbb", "tbh"}
NO_DESTINATION = {"cmp", "cmn", "tst", "teq", "it", "nop", "dmb", "dsb", "isb", "msr", "cpsid", "cpsie", "bkpt", "svc",
                  "sev", "wfi", "wfe", "yield", "clrex"}
OTHER = {"adc", "add", "addw", "adr", "and", "asr", "bfc", "bfi", "bic", "clz", "cmn", "cmp", "eor", "lsl", "lsr", "mov",
         "movw", "movt", "mvn", "neg", "orn", "orr", "rbit", "rev", "rev16", "revsh", "ror", "rrx", "rsb", "sbc", "sbfx",
         "ssat", "ssat16", "usat", "usat16", "sub", "subw", "teq", "tst", "ubfx", "nop", "mrs", "msr", "cpsid", "cpsie",
         "sev", "wfi", "wfe", "yield", "bkpt", "svc", "clrex", "sel"} | \
    {f"{p}{op}" for p in ("s", "q", "sh", "u", "uq", "uh")
     for op in ("add16", "add8", "sub16", "sub8", "asx", "sax")} | \
    {"qadd", "qsub", "qdadd", "qdsub"}
KNOWN = SINGLE_LOADS | SINGLE_STORES | LOAD_MULTIPLE | STORE_MULTIPLE | MULTIPLY | EXTEND | DIVIDE | BRANCHES | OTHER | \
    {"ldrd", "strd", "it", "dmb", "dsb", "isb"}


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction of a block: what the cost model needs of it, nothing more."""
    address: int
    size: int                 # bytes: 2 or 4
    name: str                 # base mnemonic, no .w/.n, condition or flag-setting suffix
    text: str                 # as QEMU printed it, for the breakdown and errors
    conditional: bool         # a B<cond>, CBZ/CBNZ, or inside an IT block
    it_length: int = 0        # for IT: how many instructions it makes conditional
    destinations: frozenset = frozenset()
    address_registers: frozenset = frozenset()
    register_offset: bool = False
    list_length: int = 0      # LDM/STM/PUSH/POP: registers in the list
    writes_pc: bool = False


def _registers(text):
    return [ALIASES.get(r, None) if r in ALIASES else int(r[1:]) for r in REGISTER.findall(text)]


def decode(line, it_remaining):
    """An Instruction from one line of QEMU's in_asm log, given how many IT-conditional
    instructions are still to come; None if the line is not an instruction."""
    match = LINE.match(line)
    if not match:
        return None
    address, first, second, mnemonic, operands = match.groups()
    # A Thumb instruction is 32 bits when its first halfword starts 0b11101, 0b11110 or 0b11111.
    size = 4 if (int(first, 16) >> 11) in (0x1D, 0x1E, 0x1F) else 2
    if size == 2 and second is not None:  # the disassembler printed one halfword; the rest is the mnemonic
        mnemonic, operands = second, f"{mnemonic} {operands}".strip()
    name = mnemonic.lower()
    for suffix in (".w", ".n"):
        if name.endswith(suffix):
            name = name[:-2]
    conditional = False
    if it_remaining > 0 and name[-2:] in CONDITIONS and name != "it" and len(name) > 2:
        name, conditional = name[:-2], True
    elif name[0] == "b" and name[1:] in CONDITIONS:
        name, conditional = "b", True
    elif name in ("cbz", "cbnz"):
        conditional = True  # a conditional branch by its name, like B<cond>
    elif it_remaining > 0:
        conditional = True  # e.g. a 16-bit instruction whose printed form hides the condition
    if name not in KNOWN and name.endswith("s") and name[:-1] in KNOWN:
        name = name[:-1]  # flag-setting form: same timing
    it_length = 0
    if name.startswith("it") and set(name[2:]) <= {"t", "e"} and len(name) <= 5:
        it_length, name = len(name) - 1, "it"
    registers = _registers(operands)
    inside = operands[operands.find("[") + 1:operands.find("]")] if "[" in operands else ""
    address_registers = frozenset(_registers(inside))
    register_offset = len(_registers(inside)) > 1 or (
        "]" in operands and "," in operands[operands.find("]"):] and
        bool(_registers(operands[operands.find("]"):])))
    destinations = frozenset()
    list_length = 0
    writes_pc = False
    if name in LOAD_MULTIPLE or name in STORE_MULTIPLE:
        body = operands[operands.find("{") + 1:operands.find("}")]
        listed = _registers_list(body)
        list_length = len(listed)
        base = operands[:operands.find("{")]
        address_registers = frozenset(_registers(base)) or frozenset({13})
        if name in LOAD_MULTIPLE:
            destinations = frozenset(listed)
            writes_pc = 15 in listed
    elif name in SINGLE_LOADS or name == "ldrd":
        destinations = frozenset(registers[:2 if name == "ldrd" else 1])
        writes_pc = 15 in destinations
    elif name in SINGLE_STORES or name == "strd" or name in NO_DESTINATION or name in BRANCHES:
        pass
    elif name in ("smull", "umull", "smlal", "umlal", "umaal", "smlald", "smlaldx", "smlsld", "smlsldx") or \
            name.startswith("smlal"):
        destinations = frozenset(registers[:2])
    elif registers:
        destinations = frozenset(registers[:1])
        writes_pc = registers[0] == 15
    return Instruction(int(address, 16), size, name, line.split(":", 1)[1].strip(), conditional, it_length,
                       destinations, address_registers, register_offset, list_length, writes_pc)


def _registers_list(body):
    """Registers of a {list}, ranges such as r4-r7 expanded."""
    listed = []
    for part in body.split(","):
        part = part.strip()
        if "-" in part:
            low, high = (_registers(p)[0] for p in part.split("-"))
            listed.extend(range(low, high + 1))
        elif part:
            listed.extend(_registers(part))
    return listed


# What the next instruction's cost depends on, of the instruction before it: (kind, registers, size).
# kind: "load" a single LDR-type load (registers: its destination), "dp" a data-processing
# instruction (registers: what it wrote), "branch" a branch or nothing known, "other".
AFTER_BRANCH = ("branch", frozenset(), 4)


def context_after(instruction):
    name = instruction.name
    if name in SINGLE_LOADS and not instruction.writes_pc:
        return ("load", instruction.destinations, instruction.size)
    if name in BRANCHES or instruction.writes_pc:
        return AFTER_BRANCH
    if name in SINGLE_STORES or name in ("ldrd", "strd") or name in LOAD_MULTIPLE or name in STORE_MULTIPLE:
        return ("other", frozenset(), instruction.size)
    return ("dp", instruction.destinations, instruction.size)


def price(instruction, before, taken):
    """(class, fixed cycles, pipeline refills) of one instruction, given the context of the
    instruction before it; `taken` matters only for a block's final branch."""
    name = instruction.name
    stall = 0
    if instruction.address_registers and before[0] == "dp" and before[1] & instruction.address_registers:
        stall = 1  # TRM 3.3.2: an address from the preceding data-processing result waits a cycle
    follows_load = before[0] == "load" and not (before[1] & instruction.address_registers)
    if (name in BRANCHES or instruction.writes_pc) and instruction.conditional and not taken:
        # A branch not taken, or a PC-writing instruction whose IT condition failed: 1 cycle.
        return ("load" if name in SINGLE_LOADS | LOAD_MULTIPLE else "branch"), 1, 0
    if name in SINGLE_LOADS:
        if instruction.writes_pc:
            return "load", 2 + stall, 1
        return "load", (1 if follows_load else 2) + stall, 0
    if name in SINGLE_STORES:
        if instruction.register_offset:
            return "store", (1 if follows_load else 2) + stall, 0
        return "store", 1 + stall, 0
    if name == "ldrd":
        return "load", 3 + stall, 0
    if name == "strd":
        return "store", 3 + stall, 0
    if name in LOAD_MULTIPLE:
        return "load", 1 + instruction.list_length + stall, 1 if instruction.writes_pc else 0
    if name in STORE_MULTIPLE:
        return "store", 1 + instruction.list_length + stall, 0
    if name in BRANCHES or instruction.writes_pc:
        base = 2 if name in ("tbb", "tbh") else 1
        return "branch", base + stall, 1
    if name in MULTIPLY:
        return "multiply-accumulate", 1, 0
    if name in EXTEND:
        return "extend/pack", 1, 0
    if name in DIVIDE:
        return "divide", DIVIDE_CYCLES, 0
    if name == "it":
        # TRM 3.3.1: IT can fold onto a preceding 16-bit instruction and then costs nothing.
        return "other", 0 if before[0] != "branch" and before[2] == 2 else 1, 0
    if name == "isb":
        return "other", 1, 1
    return "other", 1, 0


@dataclass
class Block:
    """A translated block: its instructions, and what ends it."""
    instructions: tuple
    fallthrough: int
    ends_in_branch: bool
    ends_conditionally: bool
    exit_context: tuple

    @staticmethod
    def of(instructions):
        last = instructions[-1]
        branch = last.name in BRANCHES or last.writes_pc
        return Block(tuple(instructions), last.address + last.size, branch, branch and last.conditional,
                     context_after(last))


@dataclass
class Region:
    """What ran between one marker call and the next: instructions and estimated cycles."""
    instructions: int = 0
    fixed: int = 0
    refills: int = 0
    by_class: dict = field(default_factory=dict)   # class -> [instructions, fixed, refills]
    unknown: dict = field(default_factory=dict)    # mnemonic -> executions priced as 1 cycle

    def cycles(self, refill=REFILL):
        return self.fixed + self.refills * refill

    def minus(self, other):
        """This region less another (the empty calibration measurement)."""
        result = Region(self.instructions - other.instructions, self.fixed - other.fixed,
                        self.refills - other.refills, {}, dict(self.unknown))
        for name in set(self.by_class) | set(other.by_class):
            a, b = self.by_class.get(name, [0, 0, 0]), other.by_class.get(name, [0, 0, 0])
            result.by_class[name] = [x - y for x, y in zip(a, b)]
        return result

    def as_dict(self):
        return {"instructions": self.instructions, "estimated_cycles": self.cycles(),
                "estimated_cycles_range": [self.cycles(p) for p in REFILL_RANGE],
                "by_class": {name: {"instructions": v[0], "estimated_cycles": v[1] + v[2] * REFILL}
                             for name, v in sorted(self.by_class.items())}}


def _tally(blocks, counts):
    """A Region from how often each (block, entry context, taken) ran."""
    region = Region()
    by_class = defaultdict(lambda: [0, 0, 0])
    for (block_id, before, taken), times in counts.items():
        block = blocks[block_id]
        last = len(block.instructions) - 1
        for index, instruction in enumerate(block.instructions):
            kind, fixed, refills = price(instruction, before, taken if index == last else False)
            entry = by_class[kind]
            entry[0] += times
            entry[1] += fixed * times
            entry[2] += refills * times
            if instruction.name not in KNOWN:
                region.unknown[instruction.name] = region.unknown.get(instruction.name, 0) + times
            before = context_after(instruction)
        region.instructions += times * len(block.instructions)
    region.by_class = dict(by_class)
    region.fixed = sum(v[1] for v in by_class.values())
    region.refills = sum(v[2] for v in by_class.values())
    return region


def parse_log(lines, mark_address):
    """Regions of a QEMU `-d in_asm,exec,nochain` log, read line by line (a stream)."""
    blocks = []          # Block by id
    by_pointer = {}      # host code pointer of a translated block -> block id
    translating = None   # instruction lines of the block being printed
    it_remaining = 0
    just_translated = None
    regions = []         # list of counts dicts, one per region
    counts = None        # the open region's counts, or None between regions
    pending = None       # (block id, entry context, counts, toggled) of the block last logged
    context = AFTER_BRANCH
    prefixes = {}        # (block id, rewind address) -> id of the block as far as it ran, or None

    def settle(next_pc):
        """Account the pending block now that the next block's address tells its branch."""
        nonlocal context
        block_id, before, into, _ = pending
        block = blocks[block_id]
        taken = block.ends_in_branch and (not block.ends_conditionally or next_pc != block.fallthrough)
        if into is not None:
            key = (block_id, before, taken)
            into[key] = into.get(key, 0) + 1
        context = AFTER_BRANCH if block.ends_in_branch else block.exit_context

    for line in lines:
        if line.startswith("Trace "):
            # Trace 0: 0x7f... [cs_base/pc/flags/cflags] symbol
            parts = line.split(None, 4)
            pointer = parts[2]
            pc = int(parts[3][1:].split("/")[1], 16)
            if just_translated is not None:
                by_pointer[pointer] = just_translated
                just_translated = None
            block_id = by_pointer[pointer]
            if blocks[block_id].instructions[0].address != pc:
                raise RuntimeError(f"log out of step: block at {pc:#x} has instructions from "
                                   f"{blocks[block_id].instructions[0].address:#x}")
            if pending is not None:
                settle(pc)
            toggled = False
            if pc == mark_address:
                toggled = True
                if counts is None:
                    counts = {}
                    regions.append(counts)
                else:
                    counts = None
            pending = (block_id, context, counts, toggled)
        elif line.startswith("IN:"):
            translating, it_remaining = [], 0
        elif translating is not None:
            if line.startswith("0x"):
                instruction = decode(line, it_remaining)
                if instruction is None:
                    raise RuntimeError(f"cannot read {line!r}")
                it_remaining = instruction.it_length if instruction.name == "it" else max(0, it_remaining - 1)
                translating.append(instruction)
            elif line.strip() == "" and translating:
                blocks.append(Block.of(translating))
                just_translated = len(blocks) - 1
                translating = None
        elif line.startswith("Stopped execution of TB chain before"):
            # The block was logged but not run (the instruction budget ran out before it).
            if pending is not None:
                block_id, before, into, toggled = pending
                if toggled:
                    if counts is None:
                        counts = regions[-1]
                    else:
                        regions.pop()
                        counts = None
                pending = None
                context = before
        elif line.startswith("cpu_io_recompile: rewound execution of TB to"):
            # The block ran up to an I/O access (a SysTick read), which QEMU redoes as a block
            # of its own: only the instructions before it ran.
            stop = int(line.rsplit(None, 1)[1], 16)
            if pending is None:
                continue
            block_id, before, into, toggled = pending
            if (block_id, stop) not in prefixes:
                kept = [i for i in blocks[block_id].instructions if i.address < stop]
                if kept:
                    blocks.append(Block.of(kept))
                prefixes[(block_id, stop)] = len(blocks) - 1 if kept else None
            shorter = prefixes[(block_id, stop)]
            if shorter is None:
                pending = None
                context = before
            else:
                pending = (shorter, before, into, toggled)
    if pending is not None:
        settle(-1)
    return [_tally(blocks, region) for region in regions]


def mark_address(elf, symbol=MARK, nm="arm-none-eabi-nm"):
    for line in subprocess.run([nm, str(elf)], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == symbol:
            return int(parts[0], 16) & ~1
    raise SystemExit(f"{elf}: no symbol {symbol}")


def run(elf, qemu=QEMU_ICOUNT, symbol=MARK, nm="arm-none-eabi-nm", timeout=600):
    """Runs `qemu + [elf]` with the execution log streamed through a FIFO. Returns the program's
    standard output, QEMU's exit status and the list of Regions."""
    address = mark_address(elf, symbol, nm)
    with tempfile.TemporaryDirectory() as directory:
        fifo = Path(directory) / "log"
        os.mkfifo(fifo)
        out_path = Path(directory) / "stdout"
        with open(out_path, "w") as out:
            process = subprocess.Popen(list(qemu) + [str(elf), "-d", "in_asm,exec,nochain", "-D", str(fifo)],
                                       stdout=out, stderr=subprocess.STDOUT)

        def watch():
            # If QEMU ends (or is killed for the timeout) before it opens the log, the reader
            # below would wait in open() forever: open the FIFO for writing once to release it.
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with open(fifo, "r", buffering=1 << 20, errors="replace") as log:
            regions = parse_log(log, address)
        watcher.join()
        return out_path.read_text(errors="replace"), process.returncode, regions


def breakdown(region, refill=REFILL):
    """One line per instruction class: instructions and estimated cycles."""
    parts = []
    for name in CLASSES:
        if name in region.by_class:
            count, fixed, refills = region.by_class[name]
            parts.append(f"{name} {count} ({fixed + refills * refill} cyc)")
    return ", ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("elf")
    parser.add_argument("--mark", default=MARK, help="the marker function (default %(default)s)")
    parser.add_argument("--nm", default="arm-none-eabi-nm")
    parser.add_argument("--qemu", default=" ".join(QEMU_ICOUNT), help="the QEMU command before the ELF")
    parser.add_argument("--calibration", action="store_true",
                        help="the first region is an empty measurement: subtract it from the others")
    parser.add_argument("--breakdown", action="store_true", help="instructions and cycles by class per region")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    if not shutil.which(args.qemu.split()[0]):
        sys.exit(f"{args.qemu.split()[0]} not found")
    output, status, regions = run(args.elf, args.qemu.split(), args.mark, args.nm, args.timeout)
    sys.stdout.write(output)
    if status != 0:
        sys.exit(f"QEMU exited {status}")
    if args.calibration and regions:
        overhead, regions = regions[0], [r.minus(regions[0]) for r in regions[1:]]
        print(f"calibration region: {overhead.instructions} instructions, {overhead.cycles()} estimated cycles "
              "(subtracted below)")
    print("ESTIMATED Cortex-M4 cycles (TRM DDI 0439 3.3 timings; P=2, range P=1..3; aligned accesses, zero wait "
          f"states, SDIV/UDIV {DIVIDE_CYCLES}):")
    for index, region in enumerate(regions):
        low, high = (region.cycles(p) for p in REFILL_RANGE)
        print(f"region {index}: instructions {region.instructions} estimated cycles {region.cycles()} "
              f"({low}..{high}) cycles/instruction {region.cycles() / max(region.instructions, 1):.2f}")
        if args.breakdown:
            print("  " + breakdown(region))
        if region.unknown:
            print("  priced as 1 cycle, not in the model: " + ", ".join(f"{k} x{v}" for k, v in region.unknown.items()))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a firmware engineer does with an exported header beyond C++ (issue 36), on the synthetic
model's header:

- C entry point: c_entry.c, compiled as C (gcc on the host, arm-none-eabi-gcc for the MPS2 AN386),
  calls <name>_run and <name>_run_in_arena, linked with one C++ file that includes the header
  (c_entry_glue.cpp); what it prints must equal the host runtime's outputs (--reference, from
  codegen::run_on_host), on the host and under QEMU. No heap or exception symbol may be linked.
- Placement macros: the device build with VERSATIL_WEIGHTS_SECTION/_ALIGN and
  VERSATIL_ARENA_SECTION/_ALIGN defined puts every parameter array and the arena in the named
  sections at the asked alignment (arm-none-eabi-objdump -t of the linked image), still prints the
  same bytes; the build without them has them in .rodata and .bss, not all on that boundary.
- examples/firmware/layer_timing.cpp times each layer with the SysTick under QEMU (-icount shift=0).
- The per-layer callback is free: run() with the default callback compiles (-Os and -O2) to as
  many bytes of code as the same header with every on_layer(...) line deleted.

  check_c_header.py --header MODEL.hpp --namespace NAME --reference EXE --root REPO --build-dir DIR
                    --cc gcc [--device-compiler arm-none-eabi-g++] --cxx g++ ...
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import device  # noqa: E402  (flags, QEMU command line, symbol checks)

failures = []
C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]
PLACEMENT = {"VERSATIL_WEIGHTS_SECTION": '__attribute__((section(".model_weights")))',
             "VERSATIL_WEIGHTS_ALIGN": "alignas(64)",
             "VERSATIL_ARENA_SECTION": '__attribute__((section(".model_arena")))',
             "VERSATIL_ARENA_ALIGN": "alignas(32)"}


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)
    return condition


def run(command, **kwargs):
    print("$ " + " ".join(str(c) for c in command), flush=True)
    return subprocess.run([str(c) for c in command], capture_output=True, **kwargs)


def model_defines(args):
    name = args.namespace.replace("::", "_")
    return [f'-DVERSATIL_MODEL_HEADER="{Path(args.header).name}"', f"-DVERSATIL_MODEL_C_NAME={name}",
            f"-DVERSATIL_MODEL_C_MACRO={name.upper()}", f"-DVERSATIL_MODEL_NAMESPACE={args.namespace}"]


def includes(args, header_dir):
    return ["-I", Path(args.root) / "include", "-I", Path(args.root) / "examples/firmware", "-I", header_dir]


def built(result, what):
    return check(result.returncode == 0, what + ("" if result.returncode == 0 else ":\n" +
                                                  result.stderr.decode(errors="replace")[-3000:]))


def c_entry_on_host(args, out, expected):
    obj, program = out / "c_entry_host.o", out / "c_entry_host"
    compiled = run([args.cc, *C_FLAGS, "-O2", *model_defines(args), *includes(args, Path(args.header).parent),
                    "-c", HERE / "c_entry.c", "-o", obj])
    if not built(compiled, "c_entry.c compiles as C on the host (gcc -std=c11 -pedantic)"):
        return
    linked = run([*args.cxx, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", *model_defines(args),
                  *includes(args, Path(args.header).parent), HERE / "c_entry_glue.cpp", obj, "-o", program])
    if not built(linked, "linked with the one C++ file that includes the header"):
        return
    ran = run([program])
    check(ran.returncode == 0 and ran.stdout == expected, "the C program on the host prints the host runtime's "
          f"outputs ({len(ran.stdout)} bytes, exit {ran.returncode})")


def device_image(args, out, stem, defines):
    """c_entry.c (as C) + c_entry_glue.cpp + the board's startup, linked for the MPS2 AN386."""
    gcc = device.tool(args.device_compiler, "gcc")
    board = Path(args.root) / "examples/firmware/mps2_an386"
    arch = ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-Os", "-ffunction-sections", "-fdata-sections"]
    obj, elf = out / f"{stem}_c.o", out / f"{stem}.elf"
    compiled = run([gcc, *C_FLAGS, *arch, *model_defines(args), *includes(args, Path(args.header).parent), "-c",
                    HERE / "c_entry.c", "-o", obj])
    if not built(compiled, f"{stem}: c_entry.c compiles as C with arm-none-eabi-gcc"):
        return None
    linked = run([args.device_compiler, *device.FLAGS, "-DVERSATIL_BOARD_MPS2_AN386", *defines, *model_defines(args),
                  *includes(args, Path(args.header).parent), "-nostartfiles", "-T", board / "mps2_an386.ld",
                  "-Wl,--gc-sections", board / "startup.cpp", HERE / "c_entry_glue.cpp", obj, "-o", elf])
    if not built(linked, f"{stem}: linked with the C++ file and the board's startup (arm-none-eabi-g++)"):
        return None
    bad = device.check_symbols(argparse.Namespace(compiler=args.device_compiler), elf)
    check(not bad, f"{stem}: no heap or exception symbol linked ({', '.join(bad) or 'none'})")
    return elf


def on_device(args, elf, expected, stem):
    try:
        ran = run(device.QEMU + [elf], timeout=300)
    except subprocess.TimeoutExpired:
        check(False, f"{stem}: QEMU finished within 300 s")
        return
    check(ran.returncode == 0 and ran.stdout == expected,
          f"{stem}: the C program under QEMU prints the host runtime's outputs ({len(ran.stdout)} bytes, "
          f"exit {ran.returncode})")


def symbol_table(args, elf):
    """{demangled name: (section, address)} of the model's parameter arrays and arena."""
    objdump = device.tool(args.device_compiler, "objdump")
    listing = run([objdump, "-t", "-C", elf], check=True, text=True).stdout
    table = {}
    # e.g. "00001234 g     O .model_weights	00000120 synthetic_model::detail::weights_0"
    for line in listing.splitlines():
        match = re.match(r"^([0-9a-f]+) .{7} (\S+)\s+[0-9a-f]+\s+(.*)$", line)
        if match and re.search(r"::(detail::(weights|bias|multipliers)_\d+|arena)$", match.group(3)):
            table[match.group(3)] = (match.group(2), int(match.group(1), 16))
    return table


def placement(args, placed, default):
    table, plain = symbol_table(args, placed), symbol_table(args, default)
    parameters = {name: at for name, at in table.items() if not name.endswith("::arena")}
    arena = [at for name, at in table.items() if name.endswith("::arena")]
    check(len(parameters) >= 10 and len(arena) == 1,
          f"the image holds the model's parameter arrays ({len(parameters)}) and its arena ({len(arena)})")
    wrong = [f"{n} in {s} at {a:#x}" for n, (s, a) in parameters.items() if s != ".model_weights" or a % 64]
    check(not wrong, "every parameter array is in .model_weights on a 64-byte boundary" +
          ("" if not wrong else ": " + "; ".join(wrong[:5])))
    check(arena and arena[0][0] == ".model_arena" and arena[0][1] % 32 == 0,
          f"the arena is in .model_arena on a 32-byte boundary ({arena})")
    # Control: without the macros the same symbols sit where the compiler puts them, so the two
    # checks above measure the macros.
    sections = {s for s, _ in plain.values()}
    check(sections <= {".rodata", ".bss"} and any(a % 64 for n, (s, a) in plain.items() if not n.endswith("arena")),
          f"without the macros they are in {sorted(sections)}, not all on a 64-byte boundary")


def text_bytes(args, obj):
    size = device.tool(args.device_compiler, "size")
    listing = run([size, "-A", obj], check=True, text=True).stdout
    return sum(int(parts[1]) for parts in (line.split() for line in listing.splitlines())
               if len(parts) >= 2 and parts[0].startswith(".text") and parts[1].isdigit())


def callback_is_free(args, out):
    header = Path(args.header).read_text()
    hooks = re.compile(r"^\s*on_layer\(.*\);\n", re.M)
    calls = len(hooks.findall(header))
    check(calls >= 2, f"the header calls on_layer around its layers ({calls} calls)")
    bare = out / "without_hooks"
    bare.mkdir(exist_ok=True)
    (bare / Path(args.header).name).write_text(hooks.sub("", header))
    probe = out / "run_default.cpp"
    probe.write_text(f"#include {model_defines(args)[0].split('=', 1)[1]}\n"
                     f"void run_model(const std::int8_t* in, std::int8_t* out, std::byte* arena) {{\n"
                     f"    {args.namespace}::model::run(in, out, arena);\n}}\n")
    for level in ("-Os", "-O2"):
        sizes = []
        for header_dir, stem in ((Path(args.header).parent, "hooks"), (bare, "bare")):
            obj = out / f"run_{stem}{level}.o"
            # Both with the same flags; without its calls the callback parameter is unused.
            compiled = run([args.device_compiler, *[f for f in device.FLAGS if f != "-Os"], level,
                            "-Wno-unused-parameter", "-c",
                            *includes(args, header_dir), probe, "-o", obj])
            if not built(compiled, f"run() compiles {level} ({stem})"):
                return
            sizes.append(text_bytes(args, obj))
        check(sizes[0] == sizes[1], f"{level}: run() with the default callback is {sizes[0]} B of code, "
                                    f"without the on_layer calls {sizes[1]} B")


def layer_timing(args, out):
    """examples/firmware/layer_timing.cpp under QEMU with -icount shift=0: one line per layer, and
    the layers' instructions (SysTick, 40 a tick) add up to the run's but for the callback's own."""
    board = Path(args.root) / "examples/firmware/mps2_an386"
    elf = out / "layer_timing.elf"
    linked = run([args.device_compiler, *device.FLAGS, "-DVERSATIL_BOARD_MPS2_AN386", *model_defines(args),
                  *includes(args, Path(args.header).parent), "-nostartfiles", "-T", board / "mps2_an386.ld",
                  "-Wl,--gc-sections", board / "startup.cpp", Path(args.root) / "examples/firmware/layer_timing.cpp",
                  "-o", elf])
    if not built(linked, "examples/firmware/layer_timing.cpp builds for the MPS2 AN386"):
        return
    qemu = device.QEMU[:1] + ["-icount", "shift=0"] + device.QEMU[1:]
    ran = run(qemu + [elf], timeout=300, text=True)
    print(ran.stdout)
    lines = ran.stdout.splitlines()
    layers = [int(line.split()[-1]) for line in lines if line.startswith("layer ")]
    header = Path(args.header).read_text()
    count = int(re.search(r"layer_count = (\d+);", header).group(1))
    total = re.search(r"^layers (\d+) of run (\d+)$", ran.stdout, re.M)
    check(ran.returncode == 0 and "outputs equal without the callback" in ran.stdout,
          f"layer_timing ran (exit {ran.returncode}), the outputs with and without the callback are equal")
    check(len(layers) == count, f"one timing per layer ({len(layers)} of {count})")
    if total and len(layers) == count:
        measured, whole = int(total.group(1)), int(total.group(2))
        # A reshape (flatten) runs nothing; every other layer runs thousands of instructions.
        check(sum(1 for n in layers if n > 0) >= count - header.count(": reshape, the same bytes"),
              "every layer that computes takes time")
        # Between the layers only the callback's SysTick reads and stores run: a few per cent.
        check(0.9 * whole <= measured <= whole, f"the layers' {measured} instructions are 90-100 % of run's {whole}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("header", "namespace", "reference", "root", "build-dir", "cc"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--cxx", required=True, nargs="+")
    parser.add_argument("--device-compiler")
    args = parser.parse_args()
    out = Path(args.build_dir)
    out.mkdir(parents=True, exist_ok=True)
    reference = run([args.reference])
    if reference.returncode != 0 or not reference.stdout:
        sys.exit(f"the reference program failed ({reference.returncode})")
    expected = reference.stdout
    c_entry_on_host(args, out, expected)
    if args.device_compiler:
        default = device_image(args, out, "c_entry", [])
        placed = device_image(args, out, "c_entry_placed", [f"-D{k}={v}" for k, v in PLACEMENT.items()])
        if default:
            on_device(args, default, expected, "c_entry")
        if placed:
            on_device(args, placed, expected, "c_entry_placed")
        if default and placed:
            placement(args, placed, default)
        callback_is_free(args, out)
        layer_timing(args, out)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()

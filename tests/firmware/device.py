#!/usr/bin/env python3
"""Builds a program for the MPS2 AN386 board (Cortex-M4) with the project's startup code and
linker script, checks the image, runs it under QEMU and compares what it prints with a host
build of the same program, byte for byte.

  device.py --compiler arm-none-eabi-g++ --root REPO --source PROGRAM.cpp --host-program EXE
            [--define NAME=VALUE ...] [--include-dir DIR ...] --build-dir DIR [--variants dsp,portable]

Each variant is one image: `dsp` as the compiler targets a Cortex-M4 (its DSP extension:
SMLAD path), `portable` with VERSATIL_FIRMWARE_PORTABLE. For each: no malloc, free,
operator new/delete, __cxa_throw, _sbrk or exception-table symbol may be linked; QEMU must
exit 0 within the timeout; its standard output must equal the host program's. Prints the
image's sections and the runtime's code (versatil::firmware functions and model::run) from
nm, and writes them as JSON with --sizes.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

FLAGS = ["-std=c++20", "-mcpu=cortex-m4", "-mthumb", "-Os", "-fno-exceptions", "-fno-rtti",
         "-fno-threadsafe-statics", "-ffunction-sections", "-fdata-sections", "-Wall", "-Wextra", "-Werror"]
# The float ABI per variant: `dsp` is a Cortex-M4F (its single-precision FPU rescales as QNNPACK
# does, firmware/output_stage.hpp), `portable` a core without an FPU (the same float arithmetic
# through the compiler's soft-float library): both must give the host's bytes.
FLOAT_FLAGS = {"dsp": ["-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], "portable": ["-mfloat-abi=soft"]}
FORBIDDEN = re.compile(r"^(malloc|free|calloc|realloc|_malloc_r|_free_r|_sbrk|_sbrk_r|__cxa_throw|"
                       r"__cxa_allocate_exception|__gxx_personality_v0|operator new.*|operator delete.*)$")
QEMU = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
        "-semihosting-config", "enable=on,target=native", "-kernel"]


def tool(compiler: str, name: str) -> str:
    path = shutil.which(Path(compiler).name.replace("g++", name), path=str(Path(compiler).parent)) or \
        shutil.which(Path(compiler).name.replace("g++", name))
    if not path:
        sys.exit(f"no {name} beside {compiler}")
    return path


def build(args, variant: str, out: Path) -> Path:
    board = Path(args.root) / "examples" / "firmware" / "mps2_an386"
    defines = ["-DVERSATIL_BOARD_MPS2_AN386"] + [f"-D{d}" for d in args.define]
    if variant == "portable":
        defines.append("-DVERSATIL_FIRMWARE_PORTABLE")
    includes = [f"-I{Path(args.root) / 'include'}", f"-I{Path(args.root) / 'examples' / 'firmware'}"] + \
        [f"-I{d}" for d in args.include_dir]
    elf = out / f"{Path(args.source).stem}_{variant}.elf"
    command = [args.compiler, *FLAGS, *FLOAT_FLAGS[variant], *defines, *includes, "-nostartfiles",
               "-T", str(board / "mps2_an386.ld"),
               "-Wl,--gc-sections", f"-Wl,-Map={elf.with_suffix('.map')}", str(board / "startup.cpp"), args.source,
               "-o", str(elf)]
    print(" ".join(command), flush=True)
    run = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(run.stdout + run.stderr)
    if run.returncode != 0:
        sys.exit(f"{variant}: build failed")
    return elf


def symbols(args, elf: Path):
    """(size, type, demangled name) of every sized symbol."""
    listing = subprocess.run([tool(args.compiler, "nm"), "-S", "-C", "--size-sort", str(elf)], capture_output=True,
                             text=True, check=True).stdout
    rows = []
    for line in listing.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4:
            rows.append((int(parts[1], 16), parts[2], parts[3]))
    return rows


def check_symbols(args, elf: Path):
    names = subprocess.run([tool(args.compiler, "nm"), "-C", str(elf)], capture_output=True, text=True,
                           check=True).stdout
    bad = []
    for line in names.splitlines():
        name = line.split(maxsplit=2)[-1]
        base = name.split("(")[0]
        if FORBIDDEN.match(base):
            bad.append(name)
    return bad


def sections(args, elf: Path):
    listing = subprocess.run([tool(args.compiler, "size"), "-A", str(elf)], capture_output=True, text=True,
                             check=True).stdout
    result = {}
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".") and parts[1].isdigit():
            result[parts[0]] = int(parts[1])
    return result


def runtime_code(rows):
    """Code of the runtime: functions (t/T/W) of versatil::firmware and versatil::math and each model::run."""
    code = {}
    for size, kind, name in rows:
        if kind.lower() in ("t", "w") and (name.startswith("versatil::") or re.search(r"::model::run[(<]", name)):
            code[name] = size
    return code


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--host-program", required=True)
    parser.add_argument("--define", action="append", default=[])
    parser.add_argument("--include-dir", action="append", default=[])
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--variants", default="dsp,portable")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--sizes", help="write the measured sizes here (JSON)")
    args = parser.parse_args()
    out = Path(args.build_dir)
    out.mkdir(parents=True, exist_ok=True)

    host = subprocess.run([args.host_program], capture_output=True, timeout=args.timeout)
    if host.returncode != 0:
        sys.exit(f"host program exited {host.returncode}: {host.stderr.decode(errors='replace')}")
    (out / "host.out").write_bytes(host.stdout)
    failures, measured = [], {}
    for variant in args.variants.split(","):
        elf = build(args, variant, out)
        bad = check_symbols(args, elf)
        if bad:
            failures.append(f"{variant}: the image links {', '.join(sorted(set(bad)))}")
        rows = symbols(args, elf)
        code = runtime_code(rows)
        sizes = sections(args, elf)
        measured[variant] = {"sections": sizes, "runtime_code_bytes": sum(code.values()), "runtime_functions": code}
        print(f"{variant}: .text {sizes.get('.text', 0)} B, .rodata {sizes.get('.rodata', 0)} B, "
              f".data {sizes.get('.data', 0)} B, .bss {sizes.get('.bss', 0)} B; runtime code "
              f"{sum(code.values())} B in {len(code)} functions:")
        for name, size in sorted(code.items(), key=lambda item: -item[1]):
            print(f"    {size:6d}  {name}")
        try:
            run = subprocess.run(QEMU + [str(elf)], capture_output=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            failures.append(f"{variant}: QEMU did not finish within {args.timeout} s")
            continue
        (out / f"{variant}.out").write_bytes(run.stdout)
        if run.returncode != 0:
            failures.append(f"{variant}: exit status {run.returncode}; stderr: {run.stderr.decode(errors='replace')}")
        elif run.stdout != host.stdout:
            host_lines, device_lines = host.stdout.splitlines(), run.stdout.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(host_lines, device_lines)) if a != b),
                         min(len(host_lines), len(device_lines)))
            failures.append(f"{variant}: output differs from the host's at line {first + 1} "
                            f"({len(device_lines)} lines against {len(host_lines)}; see {out})")
        else:
            print(f"{variant}: QEMU output equals the host's ({len(run.stdout)} bytes, "
                  f"{len(run.stdout.splitlines())} lines)")
    if args.sizes:
        Path(args.sizes).write_text(json.dumps(measured, indent=2) + "\n")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()

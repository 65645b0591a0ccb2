#!/usr/bin/env python3
"""The worst stack use of an exported model's run, as the code generator states it
(model::stack_bytes, the export report's stack_bytes; include/versatil/codegen/stack_use.hpp),
against what the compiler and the device say:

- Each kernel's figure in stack_use.hpp must be at least its deepest call chain measured by
  arm-none-eabi-gcc (-fstack-usage -fcallgraph-info=su) on stack_probe.cpp, at -Os and -O2, DSP
  and portable paths; every kernel of the probe must have a figure. --update prints the table.
- For each --header: run() behind a function of its own, compiled the same four ways: its
  deepest call chain must not exceed the header's model::stack_bytes.
- With --qemu: for each --header, a program paints the stack, calls run() and finds the lowest
  word written (stack_paint.cpp), on the MPS2 AN386 under QEMU, the same four ways: the bytes used
  must not exceed model::stack_bytes.

  check_stack.py --compiler arm-none-eabi-g++ --root REPO --build-dir DIR [--header H.hpp:NAMESPACE ...]
                 [--qemu] [--update] [--models-only]
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import device  # noqa: E402

PORTABLE = ["-DVERSATIL_FIRMWARE_PORTABLE"]
CONFIGS = [("-Os", []), ("-Os", PORTABLE), ("-O2", []), ("-O2", PORTABLE)]
failures = []
LIBRARY = {}  # frames of the C library's leaf functions, by the call graph's name


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)
    return condition


def call_graph(ci_text):
    """({node: (name, bytes or None)}, {node: [callee nodes]}) from GCC's -fcallgraph-info VCG."""
    nodes, edges = {}, {}
    for match in re.finditer(r'node: \{ title: "([^"]+)" label: "([^"]*)"', ci_text):
        title, label = match.groups()
        used = re.search(r"\\n(\d+) bytes \((static|dynamic,bounded)\)$", label)
        nodes[title] = (label.split("\\n")[0], int(used.group(1)) if used else None)
    for match in re.finditer(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"', ci_text):
        edges.setdefault(match.group(1), []).append(match.group(2))
    return nodes, edges


def library_frames(args):
    """Stack bytes of the C library's functions the kernels call (memset, memcpy): newlib's, for
    this target, read off their disassembly: the registers the prologue pushes and its sp
    adjustment; each must call nothing."""
    gcc = device.tool(args.compiler, "gcc")
    libc = subprocess.run([gcc, "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-print-file-name=libc.a"],
                          capture_output=True, text=True, check=True).stdout.strip()
    listing = subprocess.run([device.tool(args.compiler, "objdump"), "-d", libc], capture_output=True, text=True).stdout
    frames = {}
    for name in ("memset", "memcpy", "memmove"):
        body = re.search(rf"^[0-9a-f]+ <{name}>:\n(.*?)(?:\n\n|\Z)", listing, re.M | re.S)
        if not body:
            continue
        code = body.group(1)
        if re.search(r"\tbl\s", code):
            continue  # calls something: no frame of its own to trust
        pushed = sum(len(regs.split(",")) * 4 for regs in re.findall(r"\tpush(?:\.w)?\s+\{([^}]*)\}", code))
        lowered = sum(int(n) for n in re.findall(r"\tsub(?:\.w)?\s+sp, #(\d+)", code))
        lowered += sum(int(n) for n in re.findall(r"\[sp, #-(\d+)\]!", code))
        frames[f"void* __builtin_{name}(void*, {'int' if name == 'memset' else 'const void*'}, unsigned int)"] = \
            pushed + lowered
    # libgcc's soft-float helpers, which the portable (FPU-less) output stage calls: the same reading.
    libgcc = subprocess.run([gcc, "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "-print-libgcc-file-name"],
                            capture_output=True, text=True, check=True).stdout.strip()
    listing = subprocess.run([device.tool(args.compiler, "objdump"), "-d", libgcc], capture_output=True,
                             text=True).stdout
    for name in ("__aeabi_fmul", "__aeabi_i2f"):
        body = re.search(rf"^[0-9a-f]+ <{name}>:\n(.*?)(?:\n\n|\Z)", listing, re.M | re.S)
        if not body or re.search(r"\tbl\s", body.group(1)):
            continue
        code = body.group(1)
        pushed = sum(len(regs.split(",")) * 4 for regs in re.findall(r"\tpush(?:\.w)?\s+\{([^}]*)\}", code))
        pushed += sum(len(regs.split(",")) * 4 for regs in re.findall(r"\tstmdb\s+sp!, \{([^}]*)\}", code))
        frames[name] = pushed + sum(int(n) for n in re.findall(r"\tsub(?:\.w)?\s+sp, #(\d+)", code))
    return frames


def deepest(nodes, edges, start, unknown):
    """Bytes of the deepest call chain from `start`; functions of no known frame go to `unknown`."""
    memo = {}

    def visit(node, path):
        if node in memo:
            return memo[node]
        if node in path:
            sys.exit(f"recursion through {nodes.get(node, (node,))[0]}: no bound")
        name, own = nodes.get(node, (node, None))
        if own is None:
            own = LIBRARY.get(name)
        if own is None:
            unknown.add(name)
            own = 0
        below = max((visit(callee, path | {node}) for callee in edges.get(node, [])), default=0)
        memo[node] = own + below
        return memo[node]

    return visit(start, frozenset())


def compile_graph(args, source, level, defines, includes, out):
    obj = out / (source.stem + level + "".join(defines).replace("-D", "_") + ".o")
    command = [args.compiler, *[f for f in device.FLAGS if f != "-Os"], level, *defines,
               "-I", Path(args.root) / "include", *[a for d in includes for a in ("-I", d)],
               "-fstack-usage", "-fcallgraph-info=su", "-c", source, "-o", obj]
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(" ".join(str(c) for c in command) + "\n" + result.stderr)
    return call_graph(obj.with_suffix(".ci").read_text())


def chain_from(nodes, edges, function, unknown):
    starts = [title for title, (name, _) in nodes.items() if name.split("(")[0].endswith(" " + function)]
    if len(starts) != 1:
        sys.exit(f"{function}: {len(starts)} nodes in the call graph")
    return deepest(nodes, edges, starts[0], unknown)


def stated_table(root):
    text = (Path(root) / "include/versatil/codegen/stack_use.hpp").read_text()
    return {name: int(bytes_) for name, bytes_ in re.findall(r'\{"(\w+)", (\d+)\}', text)}


def kernels(args, out):
    probe = HERE / "stack_probe.cpp"
    names = re.findall(r"^VERSATIL_STACK_PROBE\((\w+),", probe.read_text(), re.M)
    measured, unknown = {name: 0 for name in names}, set()
    for level, defines in CONFIGS:
        nodes, edges = compile_graph(args, probe, level, defines, [], out)
        for name in names:
            measured[name] = max(measured[name], chain_from(nodes, edges, "probe_" + name, unknown))
    check(not unknown, f"every function the kernels call has a known frame ({sorted(unknown) or 'none unknown'})")
    if args.update:
        print("measured: " + ", ".join(f'{{"{n}", {b}}}' for n, b in measured.items()))
    table = stated_table(args.root)
    for name, bytes_ in measured.items():
        check(name in table and table[name] >= bytes_,
              f"{name}: stack_use.hpp states {table.get(name)} B, the deepest chain measured is {bytes_} B")


def stated_figure(header):
    found = re.search(r"static constexpr std::size_t stack_bytes = (\d+);", Path(header).read_text())
    if not found:
        sys.exit(f"{header} states no stack_bytes")
    return int(found.group(1))


def models(args, out):
    for entry in args.header:
        header, namespace = entry.rsplit(":", 1)
        stated = stated_figure(header)
        probe = out / f"run_{namespace}.cpp"
        probe.write_text(f'#include "{Path(header).name}"\n'
                         'extern "C" __attribute__((noinline, used)) void run_model(const std::int8_t* in, '
                         'std::int8_t* out, std::byte* arena) noexcept {\n'
                         f"    {namespace}::model::run(in, out, arena);\n}}\n")
        worst, unknown = 0, set()
        for level, defines in CONFIGS:
            nodes, edges = compile_graph(args, probe, level, defines, [Path(header).parent], out)
            worst = max(worst, chain_from(nodes, edges, "run_model", unknown))
        check(not unknown,
              f"{namespace}: every function run calls has a known frame ({sorted(unknown) or 'none unknown'})")
        check(worst <= stated, f"{namespace}: run's deepest call chain is {worst} B (-Os, -O2, DSP, portable), "
                               f"the header states {stated} B")
        if args.qemu:
            painted(args, out, header, namespace, stated)


def painted(args, out, header, namespace, stated):
    board = Path(args.root) / "examples/firmware/mps2_an386"
    for level, defines in CONFIGS:
        variant = ("portable" if defines else "dsp") + " " + level
        elf = out / f"stack_paint_{namespace}_{variant.replace(' ', '')}.elf"
        command = [args.compiler, *[f for f in device.FLAGS if f != "-Os"], level, *defines,
                   "-DVERSATIL_BOARD_MPS2_AN386",
                   f'-DVERSATIL_MODEL_HEADER="{Path(header).name}"', f"-DVERSATIL_MODEL_NAMESPACE={namespace}",
                   "-I", Path(args.root) / "include", "-I", Path(args.root) / "examples/firmware",
                   "-I", Path(header).parent, "-nostartfiles", "-T", board / "mps2_an386.ld", "-Wl,--gc-sections",
                   board / "startup.cpp", HERE / "stack_paint.cpp", "-o", elf]
        built = subprocess.run([str(c) for c in command], capture_output=True, text=True)
        if not check(built.returncode == 0, f"{namespace} {variant}: stack_paint.cpp builds" +
                     ("" if built.returncode == 0 else ":\n" + built.stderr[-2000:])):
            continue
        ran = subprocess.run(device.QEMU + [str(elf)], capture_output=True, text=True, timeout=300)
        used = re.search(r"^run used (\d+) bytes of stack$", ran.stdout, re.M)
        if check(ran.returncode == 0 and used is not None, f"{namespace} {variant}: painted under QEMU "
                 f"(exit {ran.returncode}: {ran.stdout.strip()[-200:]})"):
            check(int(used.group(1)) <= stated, f"{namespace} {variant}: run used {used.group(1)} B of the painted "
                                                f"stack, the header states {stated} B")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--header", action="append", default=[], help="MODEL.hpp:NAMESPACE")
    parser.add_argument("--qemu", action="store_true")
    parser.add_argument("--update", action="store_true", help="print the measured table")
    parser.add_argument("--models-only", action="store_true", help="check the headers only, not the kernel table")
    args = parser.parse_args()
    out = Path(args.build_dir)
    out.mkdir(parents=True, exist_ok=True)
    LIBRARY.update(library_frames(args))
    print(f"the C library's frames (newlib, disassembled): {LIBRARY}")
    if not args.models_only:
        kernels(args, out)
    models(args, out)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()

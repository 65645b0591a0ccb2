#!/usr/bin/env python3
"""Compile-time cost of the core: what a compile-time library charges instead of run time.

- generated translation units composing N = 1, 8, 32, 128 targets into one Quantizer (checked
  while compiling) and using it at run time: compile time (median of --repeats) and object size;
- the umbrella header alone against an empty translation unit;
- the Cortex-M4 object of examples/firmware/quantizer_check.cpp, built the way
  tests/firmware/build.py builds it.

  compile_time.py --root REPO --out OUT_DIR/compile.json [--repeats 3] [--cxx c++]
"""
import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_COUNTS = (1, 8, 32, 64, 128)


def quantizer_tu(n):
    """A TU composing n targets, alternating the two backends, with queries answered while
    compiling (static_assert) and a lookup left for run time (so there is code to measure)."""
    targets = ",\n    ".join(
        f'Target<"module{i}", {"XNNPACK<>" if i % 2 == 0 else "X86Inductor<>"}>' for i in range(n))
    last = "xnnpack" if (n - 1) % 2 == 0 else "x86_inductor"
    return f"""#include <cstring>
#include "versatil/versatil.hpp"
using namespace versatil;
using model_quantizer = Quantizer<
    {targets}>;
static_assert(model_quantizer::size == {n});
static_assert(model_quantizer::quantizer_for("module{n - 1}.conv")->backend_name() == "{last}");
static_assert(!model_quantizer::quantizer_for("elsewhere"));
extern "C" int lookup(const char* module_name) {{
    const auto found = model_quantizer::quantizer_for(std::string_view(module_name, std::strlen(module_name)));
    return found ? static_cast<int>(found->backend_name().size()) : -1;
}}
extern "C" int enter_environment() {{
    const auto scope = model_quantizer::environment_context();
    return static_cast<int>(model_quantizer::environment.size());
}}
"""


UMBRELLA_TU = '#include "versatil/versatil.hpp"\n'
EMPTY_TU = "\n"


def object_size(size_tool, obj):
    """text + data + bss of an object, as `size` reports them (Berkeley format)."""
    output = subprocess.run([size_tool, str(obj)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(v) for v in output.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss, "total": text + data + bss, "file_bytes": obj.stat().st_size}


def compile_median(command, repeats):
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
        if run.returncode != 0:
            sys.exit("compile failed: " + " ".join(command) + "\n" + run.stderr[-4000:])
    return statistics.median(seconds), seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cxx", default="c++")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    flags = ["-std=c++20", "-O2", "-I", str(root / "include")]
    results = {"compiler": subprocess.run([args.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0],
               "flags": " ".join([args.cxx, "-std=c++20", "-O2", "-I include", "-c"]), "repeats": args.repeats,
               "translation_units": []}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        units = [("empty", 0, EMPTY_TU), ("umbrella", 0, UMBRELLA_TU)] + [
            (f"targets_{n}", n, quantizer_tu(n)) for n in TARGET_COUNTS]
        for name, n, text in units:
            source, obj = scratch / f"{name}.cpp", scratch / f"{name}.o"
            source.write_text(text)
            median, all_seconds = compile_median([args.cxx, *flags, "-c", str(source), "-o", str(obj)], args.repeats)
            entry = {"name": name, "targets": n, "seconds": median, "all_seconds": all_seconds,
                     "size": object_size("size", obj)}
            results["translation_units"].append(entry)
            print(f"{name:12s} {median:6.2f} s  text {entry['size']['text']:7d} B", flush=True)

        # The firmware object: build.py's flags, with only boost/hana beside versatil on the path.
        arm = shutil.which("arm-none-eabi-g++")
        if arm:
            obj = scratch / "quantizer_check.o"
            command = [sys.executable, str(root / "tests/firmware/build.py"), "--compiler", arm, "--host-compiler",
                       args.cxx, "--include", str(root / "include"), "--source",
                       str(root / "examples/firmware/quantizer_check.cpp"), "--output", str(obj)]
            median, all_seconds = compile_median(command, args.repeats)
            flags_line = subprocess.run(command, capture_output=True, text=True).stdout.splitlines()[0]
            results["firmware"] = {"seconds": median, "all_seconds": all_seconds,
                                   "flags": " ".join(re.findall(r"-m\S+|-f\S+|-O\S+|-std=\S+", flags_line)),
                                   "size": object_size(shutil.which("arm-none-eabi-size") or "size", obj)}
            print(f"firmware     {median:6.2f} s  text {results['firmware']['size']['text']:7d} B", flush=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

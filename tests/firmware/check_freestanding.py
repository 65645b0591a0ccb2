#!/usr/bin/env python3
"""The firmware runtime is freestanding: every header under include/versatil/firmware/ (and
the math headers it uses) includes only freestanding standard headers and versatil headers
that pass the same check, and compiles alone for a Cortex-M4 with -ffreestanding
-fno-exceptions -fno-rtti, with the DSP path and with VERSATIL_FIRMWARE_PORTABLE.

  check_freestanding.py --compiler arm-none-eabi-g++ --include INCLUDE_DIR
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# What the runtime may include: headers that allocate nothing, throw nothing and need no OS.
ALLOWED_STANDARD = {"cstdint", "cstddef", "limits", "type_traits", "bit", "concepts", "array", "span", "arm_acle.h"}
FLAGS = ["-std=c++20", "-mcpu=cortex-m4", "-mthumb", "-ffreestanding", "-fno-exceptions", "-fno-rtti", "-Wall",
         "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiler", required=True)
    parser.add_argument("--include", required=True)
    args = parser.parse_args()
    root = Path(args.include)
    pending = sorted(str(p.relative_to(root)) for p in (root / "versatil" / "firmware").rglob("*.hpp"))
    seen, problems = set(), []
    while pending:
        header = pending.pop()
        if header in seen:
            continue
        seen.add(header)
        for kind, name in INCLUDE.findall((root / header).read_text()):
            if kind == "<" and name not in ALLOWED_STANDARD:
                problems.append(f"{header} includes <{name}>, not a freestanding header of the allowed list")
            elif kind == '"':
                if not (root / name).is_file():
                    problems.append(f'{header} includes "{name}", which is not a versatil header')
                else:
                    pending.append(name)
    with tempfile.TemporaryDirectory() as scratch:
        for header in sorted(seen):
            source = Path(scratch) / "tu.cpp"
            source.write_text(f'#include "{header}"\n')
            for extra in ([], ["-DVERSATIL_FIRMWARE_PORTABLE"]):
                run = subprocess.run([args.compiler, *FLAGS, *extra, "-I", str(root), str(source)], capture_output=True,
                                     text=True)
                if run.returncode != 0:
                    problems.append(f"{header} {' '.join(extra)}: does not compile freestanding:\n{run.stderr}")
    print(f"{len(seen)} headers checked: " + ", ".join(sorted(seen)))
    if problems:
        sys.exit("\n".join(problems))


if __name__ == "__main__":
    main()

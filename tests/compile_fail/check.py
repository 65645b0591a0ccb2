#!/usr/bin/env python3
"""Compile-fail harness: compiles one case and checks the outcome.

A case file states what it expects in its leading comments:
    // expect: compiles                 the control case: must compile cleanly
    // expect-error: <regular expression>   must fail, and the compiler's output must match
                                            every such line (several lines: all must match)
The compiler is told not to echo source lines (GCC's -fno-diagnostics-show-caret), so a
pattern can only match what the compiler says (a static_assert's message, a type as it prints
it), never the case's own text or a library line quoted back.
Usage: check.py CASE.cpp -- COMPILER ARGS...
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def expectations(case: Path):
    compiles, patterns = False, []
    for line in case.read_text().splitlines():
        line = line.strip()
        if not line.startswith("//"):
            break
        body = line[2:].strip()
        if body == "expect: compiles":
            compiles = True
        elif body.startswith("expect-error:"):
            patterns.append(body[len("expect-error:"):].strip())
    if compiles == bool(patterns):
        sys.exit(f"{case}: states neither or both of 'expect: compiles' and 'expect-error:'")
    return compiles, patterns


def main():
    case = Path(sys.argv[1])
    command = sys.argv[sys.argv.index("--") + 1:]
    compiles, patterns = expectations(case)
    with tempfile.TemporaryDirectory() as scratch:
        run = subprocess.run(command + ["-fsyntax-only", "-fno-diagnostics-show-caret", "-o", str(Path(scratch) / "case.o"), str(case)],
                             capture_output=True, text=True)
    output = run.stdout + run.stderr
    if compiles:
        if run.returncode != 0:
            sys.exit(f"control case {case.name} must compile but failed:\n{output}")
        print(f"{case.name}: compiles, as it must")
        return
    if run.returncode == 0:
        sys.exit(f"{case.name}: compiled, but must be rejected with: {patterns}")
    missing = [p for p in patterns if not re.search(p, output)]
    if missing:
        sys.exit(f"{case.name}: rejected, but the output lacks {missing}:\n{output}")
    print(f"{case.name}: rejected with the expected message")


if __name__ == "__main__":
    main()

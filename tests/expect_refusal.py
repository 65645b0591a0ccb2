#!/usr/bin/env python3
"""Runs a program that must refuse its input: it must exit with exactly STATUS (not a crash,
not some other failure) and its output must contain TEXT. Meson's should_fail accepts any
non-zero exit, so a test that crashes, or fails for another reason, would pass; this does not.
Usage: expect_refusal.py STATUS TEXT -- PROGRAM ARGS..."""
import subprocess
import sys

status, text = int(sys.argv[1]), sys.argv[2]
command = sys.argv[sys.argv.index("--") + 1:]
run = subprocess.run(command, capture_output=True, text=True, timeout=300)
output = run.stdout + run.stderr
if run.returncode != status:
    sys.exit(f"FAIL: exit {run.returncode}, expected {status}:\n{output}")
if text not in output:
    sys.exit(f"FAIL: exit {status} as expected, but the output lacks {text!r}:\n{output}")
print(f"refused with exit {status} and {text!r}")

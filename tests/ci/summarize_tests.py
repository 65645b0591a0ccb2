#!/usr/bin/env python3
"""tools/summarize-tests on a meson test log written here, against figures worked by hand:
three tests starting at 100, 101 and 150 s for 10, 60 and 5 s ran from 100 to 161 s (1 min 01 s
of wall time), the slowest first; one skip, which --no-skips makes a failure.
Usage: summarize_tests.py SOURCE_ROOT"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

tool = Path(sys.argv[1]) / "tools" / "summarize-tests"
tests = [
    {"name": "versatil:core / a", "result": "OK", "starttime": 100.0, "duration": 10.0, "stdout": ""},
    {"name": "versatil:torch / b", "result": "FAIL", "starttime": 101.0, "duration": 60.0, "stdout": ""},
    {"name": "versatil:zoo / c", "result": "SKIP", "starttime": 150.0, "duration": 5.0, "stdout": "no qemu\n"},
]
with tempfile.TemporaryDirectory() as tmp:
    log = Path(tmp) / "testlog.json"
    log.write_text("".join(json.dumps(test) + "\n" for test in tests))
    plain = subprocess.run([sys.executable, str(tool), "run", str(log)], capture_output=True, text=True)
    timed = subprocess.run([sys.executable, str(tool), "--no-skips", "--timing", "run", str(log)],
                           capture_output=True, text=True)
expected_plain = "skipped: " + str(log) + ": versatil:zoo / c: no qemu\nrun: 1 passed, 1 failed, 1 skipped\n"
expected_timed = (f"{log}: tests ran 1 min 01 s (wall); slowest: b 60 s, a 10 s, c 5 s\n"
                  f"skipped, which CI does not allow: {log}: versatil:zoo / c: no qemu\n"
                  "run: 1 passed, 1 failed, 1 skipped\n")
problems = []
if (plain.returncode, plain.stdout) != (0, expected_plain):
    problems.append(f"without options: exit {plain.returncode}, printed\n{plain.stdout}{plain.stderr}")
if (timed.returncode, timed.stdout) != (1, expected_timed):
    problems.append(f"with --no-skips --timing: exit {timed.returncode}, printed\n{timed.stdout}{timed.stderr}")
print("\n".join(problems) or "summarize-tests: both forms print what the log holds")
sys.exit(1 if problems else 0)

#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time from its seed corpus and reports what it did.
New inputs go to a work directory in the build tree (the seeds in tests/ stay as committed);
a crash leaves its input there too, and fails the test.
Usage: run_fuzzer.py FUZZER SEED_DIR WORK_DIR SECONDS [libFuzzer flags...]"""
import re
import subprocess
import sys
from pathlib import Path

fuzzer, seeds, work, seconds, *flags = sys.argv[1:]
work = Path(work)
(work / "corpus").mkdir(parents=True, exist_ok=True)
command = [fuzzer, f"-max_total_time={seconds}", "-print_final_stats=1", f"-artifact_prefix={work}/",
           *flags, str(work / "corpus"), seeds]
result = subprocess.run(command, capture_output=True, text=True, timeout=int(seconds) + 300)
output = result.stdout + result.stderr
# The last figure is the fuzzer's own; earlier ones come from child processes the target forks
# (fuzz_model_file: LibTorch compiles a file's source in a child, whose sanitizer reports end
# the child, not the run, and leave a crash file each).
runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output)
contained = sorted(p.name for p in work.glob("crash-*")) if result.returncode == 0 else []
print(" ".join(command))
print(output[-6000:] if result.returncode else "\n".join(output.splitlines()[-12:]))
if contained:
    print(f"{len(contained)} inputs made LibTorch fail inside a child process (contained; reports above the "
          f"summary, inputs in {work}): " + " ".join(contained[:5]))
print(f"fuzz {Path(fuzzer).name}: {runs[-1] if runs else 0} executions in {seconds} s, exit {result.returncode}")
sys.exit(result.returncode)

#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time from its seed corpus and reports what it did.
New inputs go to a work directory in the build tree (the seeds in tests/ stay as committed).
Only a run that ends its time budget cleanly (exit 0) passes. Any other exit is a finding and
fails the test with exit 1: never libFuzzer's own code, whose default for a crash (77) meson
would count as a skip. The finding's input is printed (escaped and in hex) and copied to
FINDINGS_DIR, beside the build's test log, where it survives the next run of the work directory.
Usage: run_fuzzer.py FUZZER SEED_DIR WORK_DIR SECONDS FINDINGS_DIR [libFuzzer flags...]"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

ARTIFACT_KINDS = ("crash-", "leak-", "timeout-", "oom-", "slow-unit-")


def artifacts(work):
    return {p for p in work.iterdir() if p.is_file() and p.name.startswith(ARTIFACT_KINDS)}


def show(data):
    """The input as a Python bytes literal (readable where it is text) and as hex."""
    shown = repr(data[:2048]) + (f" ... ({len(data)} bytes)" if len(data) > 2048 else "")
    return f"  escaped: {shown}\n  hex:     {data[:512].hex()}" + (" ..." if len(data) > 512 else "")


def main():
    fuzzer, seeds, work, seconds, findings, *flags = sys.argv[1:]
    work, findings = Path(work), Path(findings)
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    before = artifacts(work)
    command = [fuzzer, f"-max_total_time={seconds}", "-print_final_stats=1", f"-artifact_prefix={work}/",
               *flags, str(work / "corpus"), seeds]
    # A hang guard only: libFuzzer stops itself after `seconds` (and reports a slow input itself,
    # -timeout); five minutes more is far beyond any clean run's shutdown.
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace",
                                timeout=int(seconds) + 300)
        returncode, output = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as hung:
        returncode = None
        output = "".join(s.decode(errors="replace") if isinstance(s, bytes) else (s or "")
                         for s in (hung.stdout, hung.stderr))
    # The last figure is the fuzzer's own; earlier ones come from child processes the target forks
    # (fuzz_model_file: LibTorch compiles a file's source in a child, whose sanitizer reports end
    # the child, not the run, and leave a crash file each).
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output)
    new = sorted(artifacts(work) - before)
    print(" ".join(command))
    print(output[-6000:] if returncode != 0 else "\n".join(output.splitlines()[-12:]))
    name = Path(fuzzer).name
    if returncode == 0:
        if new:
            print(f"{len(new)} inputs made LibTorch fail inside a child process (contained; reports above the "
                  f"summary, inputs in {work}): " + " ".join(p.name for p in new[:5]))
        print(f"fuzz {name}: {runs[-1] if runs else 0} executions in {seconds} s, exit 0")
        return 0
    # The run's own finding is the file libFuzzer names last ("Test unit written to ..."); contained
    # child failures may have left others before it.
    written = [Path(p) for p in re.findall(r"Test unit written to (\S+)", output)]
    finding = written[-1] if written and written[-1].is_file() else (new[-1] if new else None)
    what = "hung past its hang guard" if returncode is None else f"exit {returncode}"
    print(f"FINDING: fuzz {name} {what} after {runs[-1] if runs else 'an unknown number of'} executions")
    if finding is not None:
        findings.mkdir(parents=True, exist_ok=True)
        kept = findings / f"{name}-{finding.name}"
        shutil.copyfile(finding, kept)
        print(f"input ({finding.stat().st_size} bytes), kept as {kept}:\n{show(finding.read_bytes())}")
        print(f"reproduce: {fuzzer} {kept}")
    else:
        print("libFuzzer wrote no input for it (see its output above)")
    return 1


if __name__ == "__main__":
    sys.exit(main())

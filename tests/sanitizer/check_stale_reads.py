"""Runs stale_tensor_read in each mode and checks what AddressSanitizer says of it.

Usage: check_stale_reads.py STALE_TENSOR_READ

A read after free or past the end must stop the program with AddressSanitizer's report, although
tensor_block_cache.cpp keeps freed tensor blocks for reuse; the control read must not. The report
must be the cache's (use-after-poison: AddressSanitizer's own allocator would say
heap-use-after-free and heap-buffer-overflow), so a build where the cache is not installed fails.
"""
import subprocess
import sys

EXPECTED = {
    # A freed block is poisoned by the cache, then waits in its quarantine.
    "after-free": "use-after-poison",
    # The block is rounded up to a page; the bytes past the tensor stay poisoned.
    "past-end": "use-after-poison",
}


def main() -> int:
    program = sys.argv[1]
    failures = []
    for mode, kind in EXPECTED.items():
        run = subprocess.run([program, mode], capture_output=True, text=True, timeout=300)
        if run.returncode == 0 or "AddressSanitizer" not in run.stderr or kind not in run.stderr:
            failures.append(f"{mode}: exit {run.returncode}, wanted AddressSanitizer's {kind} report; "
                            f"stderr ends: {run.stderr[-600:]!r}")
    control = subprocess.run([program, "none"], capture_output=True, text=True, timeout=300)
    if control.returncode != 0:
        failures.append(f"none: exit {control.returncode}; stderr ends: {control.stderr[-600:]!r}")
    for failure in failures:
        print(failure)
    print(f"{len(EXPECTED) + 1 - len(failures)} of {len(EXPECTED) + 1} reads told apart")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""versatil-quantize across processes on loopback, launched as torchrun would (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT): with 2 and 4 processes rank 0 alone writes the model
and a report stating world_size and each rank's samples, with an output SQNR within 0.5 dB of
one process's; QAT with 2 and 4 processes (rank 0 alone writes; the report states each rank's
training examples); a rank that never joins (rank 1, or rank 0 with the rendezvous), dies or
hangs makes the others fail with a distributed_failure and nothing written.

No timing: rank 0 gets MASTER_PORT 0 and says on stderr which port the OS gave its rendezvous
('listening at'), which the other ranks are then started with (a port probed free and handed
over could be taken in between); a rank is killed once a line it or rank 0 prints shows it got
where the case needs it. The only clock is a hang guard per process, far above the timeouts the
cases set and far below the 300 s default, so a --dist-timeout ignored fails too.
Usage: check_distributed.py VERSATIL_QUANTIZE [--sizes 2[,4]]"""
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

cli = sys.argv[1]
# --sizes 2: worlds of 2 processes only (a sanitizer build: the same code paths as 4)
sizes = [int(n) for n in sys.argv[3].split(",")] if sys.argv[2:3] == ["--sizes"] else [2, 4]
failures = []
# Hang guard (seconds) for a case's process to end: the cases' timeouts are 3 to 20 s, the
# default 300 s; a run that is slow only because the machine is loaded takes a few seconds.
HANG_GUARD = 200


def start(rank, size, port, directory, *extra, stderr=subprocess.PIPE):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    args = [cli, "--no-per-layer", "--out", directory / f"q{rank}.pt", "--report", directory / f"r{rank}.json", *extra]
    return subprocess.Popen(list(map(str, args)), env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)


LISTENING = re.compile(r"rank 0 of \d+ listening at 127\.0\.0\.1:(\d+)")


def start_rank_0(size, directory, *extra):
    """Rank 0 on a port the OS picks: (process, port, stderr read so far); port None if rank 0
    ended without saying where it listens."""
    process = start(0, size, 0, directory, *extra)
    seen = ""
    for line in process.stderr:
        seen += line
        if found := LISTENING.search(line):
            return process, int(found.group(1)), seen
    return process, None, seen


def start_world(size, directory, *extra):
    """Every rank of a world, rank 0 first on an OS-assigned port: (processes, rank 0's stderr so far)."""
    rank_0, port, seen = start_rank_0(size, directory, *extra)
    if not check(port is not None, f"rank 0 never said where it listens:\n{seen}"):
        return [rank_0], seen
    return [rank_0] + [start(rank, size, port, directory, *extra) for rank in range(1, size)], seen


def unused_port():
    """A port no server can listen on while the returned socket is open: bound, not listening,
    so a connection there is refused."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    return held, held.getsockname()[1]


def finish(process, what):
    """(stdout, stderr) of a process that must end by itself; killed and recorded as a failure
    when still running after the hang guard."""
    try:
        return process.communicate(timeout=HANG_GUARD)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        failures.append(f"{what} still running after the {HANG_GUARD} s hang guard\n{stderr}")
        return stdout, stderr


def read_until(leader, pattern, seen):
    """Reads a pty until `pattern` matches all that was read (None: to the end); (match or None,
    all read). Gives up at the end of the output or after the hang guard."""
    deadline = time.monotonic() + HANG_GUARD
    while pattern is None or not (found := pattern.search(seen)):
        ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            failures.append(f"hang guard: nothing more on the terminal for {HANG_GUARD} s")
            return None, seen
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty closed: the process ended
            chunk = b""
        if not chunk:
            return None, seen
        seen += chunk
    return found, seen


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def run_world(name, size, *extra):
    """Every rank of a world of `size` in scratch/name; rank 0's report and every rank's
    (stdout, stderr, exit), or None for the report when a rank failed or more than rank 0's
    model and report were written."""
    directory = scratch / name
    directory.mkdir()
    processes, seen = start_world(size, directory, *extra)
    results = [p.communicate(timeout=600) + (p.returncode,) for p in processes]  # hang guard: each takes ~10 s
    results[0] = (results[0][0], seen + results[0][1], results[0][2])
    if not check(len(results) == size, f"{name}: rank 0 never listened"):
        return None, results
    if not check(all(r[2] == 0 for r in results),
                 f"{name}: exits {[r[2] for r in results]}\n" + "\n".join(r[1] for r in results)):
        return None, results
    written = sorted(p.name for p in directory.iterdir())
    if not check(written == ["q0.pt", "r0.json"], f"{name}: wrote {written}, expected rank 0's model and report only"):
        return None, results
    return json.loads((directory / "r0.json").read_text()), results


with tempfile.TemporaryDirectory() as scratch:
    scratch = Path(scratch)
    one = scratch / "one"
    one.mkdir()
    single = subprocess.run([cli, "--no-per-layer", "--report", one / "r.json"], capture_output=True, text=True,
                            timeout=600)
    check(single.returncode == 0, f"one process: exit {single.returncode}\n{single.stderr}")
    single_report = json.loads((one / "r.json").read_text())
    check(single_report["world_size"] == 1 and single_report["samples_per_rank"] == [256],
          f"one process's report: world_size {single_report['world_size']}, "
          f"samples {single_report['samples_per_rank']}")

    for size in sizes:
        report, _ = run_world(f"world{size}", size)
        if report is None:
            continue
        check(report["world_size"] == size, f"{size} processes: report says world_size {report['world_size']}")
        check(report["samples_per_rank"] == [256 // size] * size,
              f"{size} processes: samples per rank {report['samples_per_rank']}, expected {[256 // size] * size}")
        # Histogram observers (x86_inductor's activations) depend on batch order even in one
        # process: tests/torch/distributed.cpp measures reordering the same batches move one
        # process's SQNR by 0.7 dB, and holds the merge to 0.1 dB of that spread and of a real
        # model's one-process SQNR. Here, with only 8 batches, the bound is that order effect.
        difference = abs(report["sqnr_db"] - single_report["sqnr_db"])
        check(difference < 0.5,
              f"{size} processes: SQNR {report['sqnr_db']} dB vs one process {single_report['sqnr_db']} dB")
        print(f"ok: {size} processes, SQNR {report['sqnr_db']:.3f} dB vs one process {single_report['sqnr_db']:.3f} dB")

    # QAT across processes: every rank trains its slice (64) of each global batch of 64 x N;
    # rank 0 alone writes, and its report states the examples each rank trained on.
    for size in sizes:
        report, results = run_world(f"qat{size}", size, "--target", "=x86_inductor:qat", "--steps", "10")
        if report is None:
            continue
        check(report["world_size"] == size and report["qat_steps"] == 10,
              f"QAT, {size} processes: world_size {report['world_size']}, qat_steps {report['qat_steps']}")
        check(report["samples_per_rank"] == [640] * size,
              f"QAT, {size} processes: samples per rank {report['samples_per_rank']}, expected {[640] * size}")
        check("trained on 640 samples" in results[1][0], f"QAT, {size} processes: rank 1 said {results[1][0]!r}")
        print(f"ok: QAT, {size} processes; rank 0's report: world_size {size}, "
              f"samples per rank {report['samples_per_rank']}")

    # A rank killed mid-training: the other stops at its next exchange, names it, writes nothing.
    # Rank 0's stderr is a terminal, so it draws its training bar: step 1 done means both ranks
    # have averaged one step's gradients, so rank 1 is training when it is killed.
    directory = scratch / "qat_killed"
    directory.mkdir()
    qat_long = ("--target", "=x86_inductor:qat", "--steps", "100000", "--dist-timeout", "20")
    leader, follower = pty.openpty()
    survivor = start(0, 2, 0, directory, *qat_long, stderr=follower)
    os.close(follower)
    listening, seen = read_until(leader, re.compile(LISTENING.pattern.encode()), b"")
    if check(listening is not None, f"QAT: rank 0 never said where it listens:\n{seen.decode(errors='replace')}"):
        victim = start(1, 2, int(listening.group(1)), directory, *qat_long)
        training, seen = read_until(leader, re.compile(rb"training \[[= ]*\] [1-9]\d*/100000"), seen)
        check(training is not None and victim.poll() is None,
              f"QAT: rank 0 never finished a step with rank 1 running:\n{seen.decode(errors='replace')}")
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=HANG_GUARD)
        _, seen = read_until(leader, None, seen)  # to the end of rank 0's output (or the hang guard)
        stdout, _ = finish(survivor, "QAT, rank 1 killed: rank 0")
        stderr = seen.decode(errors="replace").replace("\r\n", "\n")
        check(survivor.returncode == 2 and "distributed_failure" in stderr
              and ("averaging gradients" in stderr or "merging fake-quantize ranges" in stderr),
              f"QAT, rank 1 killed: rank 0 exit {survivor.returncode}\n{stderr}")
        check(not any(directory.iterdir()), f"QAT, rank 1 killed: wrote {sorted(p.name for p in directory.iterdir())}")
        print(f"ok: QAT, rank 1 killed mid-training; rank 0: {stderr.strip().splitlines()[-1]}")
    os.close(leader)

    # Rank 1 never starts: rank 0 gives up after the timeout, names the failure, writes nothing.
    directory = scratch / "alone"
    directory.mkdir()
    alone = start(0, 2, 0, directory, "--dist-timeout", "3")
    _, stderr = finish(alone, "rank 1 never joined: rank 0")
    check(alone.returncode == 2 and "distributed_failure" in stderr and "rank 0 of 2" in stderr
          and "timeout of 3 s" in stderr, f"rank 1 never joined: exit {alone.returncode}\n{stderr}")
    check(not any(directory.iterdir()),
          f"rank 1 never joined: rank 0 wrote {sorted(p.name for p in directory.iterdir())}")
    print(f"ok: rank 1 never joined; rank 0: {stderr.strip().splitlines()[-1]}")

    # Rank 0 never starts: rank 1 finds no rendezvous to join, gives up after the timeout.
    directory = scratch / "no_master"
    directory.mkdir()
    held, port = unused_port()
    with held:
        orphan = start(1, 2, port, directory, "--dist-timeout", "3")
        _, stderr = finish(orphan, "rank 0 never started: rank 1")
    check(orphan.returncode == 2 and "distributed_failure" in stderr and "rank 1 of 2" in stderr,
          f"rank 0 never started: rank 1 exit {orphan.returncode}\n{stderr}")
    check(not any(directory.iterdir()),
          f"rank 0 never started: rank 1 wrote {sorted(p.name for p in directory.iterdir())}")
    print(f"ok: rank 0 never started; rank 1: {stderr.strip().splitlines()[-1]}")

    # Rank 1 joins (it says so), then is killed, or hangs (SIGSTOP): rank 0 stops, names the
    # failure, writes nothing; the hung one when its 5 s timeout runs out (the hang guard would
    # catch the 300 s default).
    for name, sent, timeout in (("killed", signal.SIGKILL, "20"), ("hung", signal.SIGSTOP, "5")):
        directory = scratch / name
        directory.mkdir()
        (survivor, *others), seen = start_world(2, directory, "--dist-timeout", timeout)
        if not others:
            continue
        victim = others[0]
        line = victim.stderr.readline()
        check("joined" in line, f"rank 1 did not report joining: {line!r}")
        victim.send_signal(sent)
        try:
            _, stderr = finish(survivor, f"rank 1 {name}: rank 0")
        finally:
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=HANG_GUARD)
        stderr = seen + stderr
        check(survivor.returncode == 2 and "distributed_failure" in stderr and f"timeout of {timeout} s" in stderr,
              f"rank 1 {name}: rank 0 exit {survivor.returncode}\n{stderr}")
        check(not any(directory.iterdir()), f"rank 1 {name}: wrote {sorted(p.name for p in directory.iterdir())}")
        print(f"ok: rank 1 {name}; rank 0: {stderr.strip().splitlines()[-1]}")

    # Malformed worlds are refused before anything runs.
    bad = subprocess.run([cli, "--WORLD_SIZE", "2", "--RANK", "2", "--MASTER_ADDR", "127.0.0.1", "--MASTER_PORT", "1"],
                         capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                                            if k not in ("RANK", "WORLD_SIZE")})
    check(bad.returncode == 2 and "RANK is '2'" in bad.stderr, f"RANK 2 of 2: exit {bad.returncode}\n{bad.stderr}")

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)

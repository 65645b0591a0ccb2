#!/usr/bin/env python3
"""Calibration wall time against the number of processes (RESULTS.md, "Scale out"): runs
benchmarks/scale_out.cpp's binary as 1 process and as 2 and 4 processes on loopback, each
with 1 intra-op thread, each configuration REPEATS times interleaved (so a burst of
load on the shared machine hits all), and prints the medians as a Markdown table; the raw runs
go to benchmarks/results/scale_out.json, which report.py renders into RESULTS.md.
With --qat-steps S it measures QAT instead: S training steps on a global batch of 128 split
across the processes, each step's time with the communication apart; the raw runs go to
benchmarks/results/scale_out_qat.json (RESULTS.md, "Scale out: QAT").
Usage: scale_out.py SCALE_OUT_BINARY [--images N] [--repeats R] [--qat-steps S]"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("binary")
parser.add_argument("--images", type=int, default=16384)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--qat-steps", type=int, default=0)
args = parser.parse_args() if __name__ == "__main__" else None
configurations = [(1, 1), (2, 1), (4, 1)]  # (processes, threads each)
qat_global_batch = 128  # split across the processes: the same work whatever their number


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run(processes, threads):
    command = [args.binary, "--images", str(args.images), "--threads", str(threads)]
    if args.qat_steps:
        command += ["--qat-steps", str(args.qat_steps), "--batch", str(qat_global_batch)]
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    ranks = []
    for rank in range(processes):
        env = dict(environment)
        if processes > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        ranks.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=3600)[0] for p in ranks]
    if any(p.returncode for p in ranks):
        raise SystemExit(f"{processes} processes x {threads} threads failed: {[p.returncode for p in ranks]}")
    return json.loads(outputs[0].strip().splitlines()[-1])


def load_average():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def render(data):
    """The "Scale out" section of RESULTS.md (report.py includes it when results/scale_out.json exists)."""
    runs = data["runs"]
    configurations = []
    for run in runs:
        if (run["world_size"], run["threads"]) not in configurations:
            configurations.append((run["world_size"], run["threads"]))

    def median(configuration, key):
        return statistics.median(r[key] for r in runs if (r["world_size"], r["threads"]) == configuration)

    baseline = median((1, 1), "calibration_s")
    cpu_baseline = median((1, 1), "max_rank_cpu_s")
    two = median((2, 1), "calibration_s") / baseline if (2, 1) in configurations else None
    lines = ["## Scale out: calibration across processes", "",
             f"Command: `{data['command']}` ({data['started']}; load average {data['load_before']} before, "
             f"{data['load_after']} after, on 2 cores). Method: `benchmarks/scale_out` calibrates mobilenet_cnn "
             f"(demo models) for x86_inductor (histogram activations) on {data['images']} Fashion-MNIST training "
             "images in batches of 64, as one process and as 2 and 4 processes on loopback (LibTorch's c10d + "
             "Gloo), each with one intra-op thread; configurations interleaved, median of "
             f"{data['repeats']}. *Calibration wall* is rank 0's time from the start of calibration (all ranks "
             "start together after a barrier) to merged statistics: observing its shard, *waiting* for the "
             "slowest rank, and the *merge exchange* (the all-reduces of the observer statistics), which is the "
             "communication proper. *Busiest rank's CPU* is the largest CPU time any rank spent calibrating: the "
             "work per process, whatever else ran on the machine. *Start-up* (loading data, preparing, joining) "
             "is outside the calibration wall. QAT is measured in the next section.", "",
             "| processes x threads | calibration wall (s) | vs 1 process | observing (s) | waiting for slowest (s) | "
             "merge exchange (s) | busiest rank's CPU (s) | vs 1 process | start-up (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for configuration in configurations:
        wall = median(configuration, "calibration_s")
        cpu = median(configuration, "max_rank_cpu_s")
        lines.append(f"| {configuration[0]} x {configuration[1]} | {wall:.2f} | {wall / baseline:.2f}x | "
                     f"{median(configuration, 'observe_s'):.2f} | {median(configuration, 'wait_s'):.3f} | "
                     f"{median(configuration, 'merge_s'):.3f} | {cpu:.2f} | {cpu / cpu_baseline:.2f}x | "
                     f"{median(configuration, 'startup_s'):.2f} |")
    lines.append("")
    if two is not None:
        verdict = "meets" if two <= 0.6 else "misses"
        lines += [f"With 2 processes the calibration wall time is {two:.2f}x one process's: this run {verdict} the "
                  "issue's target of 0.6x. The target assumes two free cores; the load averages above say how many "
                  "other jobs shared them (a load above 2 leaves the processes time-slicing one another, and the "
                  "CPU column then shows the work per process halving while the wall time does not)."]
        if float(data["load_before"].split()[0]) > 2:
            lines[-1] += (" In this run other jobs kept the load above 2, so the wall times mostly measure the CPU "
                          "share the scheduler gave: one process got "
                          f"{cpu_baseline / baseline:.0%} of a core, and N processes claim N shares against the other "
                          "jobs, which flatters the ratios of the wall column as much as contention hurts them. The "
                          "CPU column is the figure that does not depend on the neighbours.")
        lines.append("")
    return lines


def render_qat(data):
    """The "Scale out: QAT" section of RESULTS.md (from results/scale_out_qat.json)."""
    runs = data["runs"]
    sizes = []
    for run in runs:
        if run["world_size"] not in sizes:
            sizes.append(run["world_size"])

    def median(size, key):
        return statistics.median(r[key] for r in runs if r["world_size"] == size)

    baseline = median(1, "step_ms")
    cpu_baseline = median(1, "max_rank_cpu_step_ms")
    lines = ["## Scale out: QAT across processes", "",
             f"Command: `{data['command']}` ({data['started']}; load average {data['load_before']} before, "
             f"{data['load_after']} after, on 2 cores). Method: `benchmarks/scale_out --qat-steps` trains "
             f"mobilenet_cnn (demo models) prepared for x86_inductor:qat with Adam for {data['steps']} steps on "
             f"Fashion-MNIST training images, a global batch of {data['batch']} split evenly across 1, 2 and 4 "
             "processes on loopback (LibTorch's c10d + Gloo; libtorch/distributed/qat.hpp), each with one intra-op "
             f"thread; configurations interleaved, median of {data['repeats']}. *Step* is rank 0's wall time per "
             "step. *Gradient exchange* is the one all-reduce of the flattened gradients per step; it includes "
             "waiting for the slowest rank to finish its forward and backward, so it is an upper bound on the "
             "communication proper. *Range merge* is the one MIN all-reduce of the fake-quantize ranges per "
             "step, after the ranks are in step: communication alone. *Busiest rank's CPU* is the largest CPU time "
             "per step any rank spent: the work per process, whatever else ran on the machine. The model starts "
             "from random weights at the fine-tuning learning rate (1e-4): the step time is measured, not what it "
             "learns; the final loss, the same in every row, shows the runs trained alike.", "",
             "| processes x threads | step (ms) | vs 1 process | gradient exchange (ms) | range merge (ms) | "
             "busiest rank's CPU (ms) | vs 1 process | final loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        step = median(size, "step_ms")
        cpu = median(size, "max_rank_cpu_step_ms")
        lines.append(f"| {size} x 1 | {step:.1f} | {step / baseline:.2f}x | {median(size, 'gradient_exchange_ms'):.1f} | "
                     f"{median(size, 'range_merge_ms'):.2f} | {cpu:.1f} | {cpu / cpu_baseline:.2f}x | "
                     f"{median(size, 'final_loss'):.4f} |")
    lines.append("")
    if 2 in sizes and 4 in sizes:
        lines += [f"The busiest rank's CPU per step is {median(2, 'max_rank_cpu_step_ms') / cpu_baseline:.2f}x one "
                  f"process's with 2 processes and {median(4, 'max_rank_cpu_step_ms') / cpu_baseline:.2f}x with 4 "
                  "(0.5x and 0.25x would be perfect splitting: each rank still pays per-step costs that do not "
                  "shrink with its slice, such as the optimizer over every weight, and the exchanges).", ""]
    if float(data["load_before"].split()[0]) > 2:
        lines += ["Other jobs kept the load above 2 on the 2 cores during this run, so the wall-time columns mostly "
                  "measure the CPU share the scheduler gave each process (and the gradient exchange then also holds "
                  "the time a rank waited for a descheduled peer); the CPU column is the figure that does not "
                  "depend on the neighbours. Needs a rerun on an idle machine for the wall-time ratios.", ""]
    return lines


def main():
    runs = {c: [] for c in configurations}
    started = time.strftime("%Y-%m-%d %H:%M")
    load_before = load_average()
    for _ in range(args.repeats):
        for configuration in configurations:
            runs[configuration].append(run(*configuration))
    data = {"command": "benchmarks/scale_out.py " + " ".join(sys.argv[1:]), "started": started,
            "load_before": load_before, "load_after": load_average(), "images": args.images, "repeats": args.repeats,
            "runs": [r for c in configurations for r in runs[c]]}
    if args.qat_steps:
        data.update(steps=args.qat_steps, batch=qat_global_batch)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    name = "scale_out_qat.json" if args.qat_steps else "scale_out.json"
    (results / name).write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(render_qat(data) if args.qat_steps else render(data)))


if __name__ == "__main__":
    main()

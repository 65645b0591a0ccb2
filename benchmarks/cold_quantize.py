#!/usr/bin/python3
"""Quantize time alone, cold and warm, both sides, without the full runtime benchmark: the quantize
timings of torch_models and peer.py (their --time-quantization child modes: one fresh process
each, its first quantization cold, the lowest of later ones warm) on the models of an OUT_DIR that
torch_models wrote (<model>/model.pt, data.pt), the lowest of PROCESSES fresh processes per side
and configuration, interleaved, with the machine's 1-minute load average beside each row.

  /usr/bin/python3 benchmarks/cold_quantize.py TORCH_MODELS OUT_DIR [--processes N]

TORCH_MODELS: build-bench/benchmarks/torch_models. Writes benchmarks/results/cold_quantize.json
(with the command that measured it)."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "cold_quantize.json"
MODELS = ("mlp", "transformer_encoder", "resnet_cnn", "mobilenet_cnn")  # peer.py's TWINS
ENGINES = {"x86_inductor": "onednn", "xnnpack": "qnnpack"}
TEST_COUNT = 2000  # torch_models' default: the child loads that many test images (untimed)


def child(command):
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("torch_models")
    parser.add_argument("out")
    parser.add_argument("--processes", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    rows = []
    for model in MODELS:
        for backend, engine in ENGINES.items():
            for mode in ("static", "dynamic"):
                spec = backend + (":dynamic" if mode == "dynamic" else "")
                ours = [str(args.torch_models), "--time-quantization", str(out / model / "model.pt"), spec,
                        str(TEST_COUNT)]
                peer = [sys.executable, str(ROOT / "benchmarks" / "peer.py"), "--time-quantization", str(out), model,
                        engine, mode]
                load = os.getloadavg()[0]
                timings = [(child(ours), child(peer)) for _ in range(args.processes)]
                row = {"model": model, "backend": backend, "mode": mode, "load_before": load,
                       "versatil_cold": min(v["cold_seconds"] for v, _ in timings),
                       "versatil_warm": min(v["warm_seconds"] for v, _ in timings),
                       "peer_cold": min(p["cold_seconds"] for _, p in timings),
                       "peer_warm": min(p["warm_seconds"] for _, p in timings)}
                row["cold_ratio"] = row["versatil_cold"] / row["peer_cold"]
                rows.append(row)
                print(f"{model:20s} {backend:13s} {mode:8s} cold {row['versatil_cold']:.3f} / {row['peer_cold']:.3f} s "
                      f"(x{row['cold_ratio']:.2f}), warm {row['versatil_warm']:.3f} / {row['peer_warm']:.3f} s, "
                      f"load {load:.1f}", flush=True)
    command = f"benchmarks/cold_quantize.py {args.torch_models} {args.out} --processes {args.processes}"
    RESULTS.write_text(json.dumps({"command": command, "processes": args.processes, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

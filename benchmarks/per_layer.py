#!/usr/bin/python3
"""The per-layer analysis' cost: versatil-quantize's wall time on torchvision's MobileNetV2 and
RegNetX-400MF (random weights, scripted with torch.jit.script, 224x224 inputs, 64 calibration and
16 test samples of uniform noise) with the default per-layer analysis against --no-per-layer, in
fresh processes, the median of REPEATS each, with the machine's 1-minute load average before each run
(a shared machine slows both alike, since the runs interleave). The target: the default run costs at most 2x.
Timing only: the models are untrained, so the per-layer figures say nothing about accuracy.

  /usr/bin/python3 benchmarks/per_layer.py VERSATIL_QUANTIZE [--repeats N]

Writes benchmarks/results/per_layer.json (with the command that measured it)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "per_layer.json"
MODELS = {"mobilenet_v2": torchvision.models.mobilenet_v2, "regnet_x_400mf": torchvision.models.regnet_x_400mf}


class DataFile(nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)

    def forward(self):
        return None


def wall_seconds(command):
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        images = torch.rand(80, 3, 224, 224)
        data = Path(tmp) / "data.pt"
        torch.jit.save(torch.jit.script(DataFile({"calib": images[:64], "test": images[64:]})), str(data))
        for name, make in MODELS.items():
            model = Path(tmp) / f"{name}.pt"
            torch.jit.save(torch.jit.script(make().eval()), str(model))
            base = [args.cli, "--model", str(model), "--data", str(data)]
            timed = {"no_per_layer": [], "per_layer": []}
            load = []
            for _ in range(args.repeats):  # interleaved, so that load on the machine hits both alike
                load.append(os.getloadavg()[0])
                timed["no_per_layer"].append(wall_seconds(base + ["--no-per-layer"]))
                timed["per_layer"].append(wall_seconds(base))
            row = {"model": name, **{k: statistics.median(v) for k, v in timed.items()}, "runs": timed,
                   "load_average": load}
            row["ratio"] = row["per_layer"] / row["no_per_layer"]
            print(f"{name}: {row['per_layer']:.1f} s with the per-layer analysis, {row['no_per_layer']:.1f} s without "
                  f"({row['ratio']:.2f}x; load {statistics.median(load):.1f})", flush=True)
            rows.append(row)
    RESULTS.write_text(json.dumps({"command": " ".join(["benchmarks/per_layer.py", *sys.argv[1:]]), "rows": rows},
                                  indent=2) + "\n")


if __name__ == "__main__":
    main()

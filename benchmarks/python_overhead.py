#!/usr/bin/python3
"""What calling through Python costs: the same models and data quantized by versatil-quantize and by
versatil.quantize for the same target, each in a fresh process (both start cold: the CLI always does),
interleaved so that load on the machine hits both alike, the median of REPEATS each. The figure compared
is the report's quantize_seconds (prepare + calibrate + convert + lower), the part a binding can slow:
its data crossing and the Ctrl-C check taken at every calibration batch. Issue 40's target: at most 5 %.
The target is named on both sides: the two defaults differ (the CLI's x86_inductor, Python's xnnpack),
and comparing them compared the backends, not the call (the encoder's +49.5 % of an earlier run).
Beside it: the Python call's whole wall time (data forms to report dict) and the CLI process's (model
and data loading included, so an upper bound for the same work), and the machine's 1-minute load
average before each pair.
Models: torchvision's MobileNetV2 and RegNetX-400MF (random weights, scripted, 64 calibration and
16 test samples of uniform noise at 224x224, as benchmarks/per_layer.py) and the zoo's encoder
(tests/zoo/make_zoo.py, its own data). Timing only: the models are untrained.

  /usr/bin/python3 benchmarks/python_overhead.py VERSATIL_QUANTIZE PYTHON_MODULE_DIR [--repeats N]

Writes benchmarks/results/python_overhead.json (with the command that measured it)."""
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

# Both defaults, each on both sides.
TARGETS = ["x86_inductor", "xnnpack"]
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "python_overhead.json"
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import make_zoo  # noqa: E402

# Run in a fresh interpreter: the data file's tensors as versatil.quantize takes them, the call timed.
PYTHON_RUN = """
import json, sys, time, torch, versatil
model, data = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
start = time.perf_counter()
_, report = versatil.quantize(model, data.calib, targets={"": sys.argv[3]}, evaluation=data.test, per_layer=False)
print(json.dumps({"quantize_seconds": report["quantize_seconds"], "call_seconds": time.perf_counter() - start}))
"""


def run(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli")
    parser.add_argument("module_dir", help="the build directory's python/, where the module versatil is")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(args.module_dir).resolve())}
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        d = Path(scratch)
        images = torch.rand(80, 3, 224, 224)
        make_zoo.save_data(d / "images.data.pt", {"calib": images[:64], "test": images[64:]})
        cases = {}
        for name, make in {"mobilenet_v2": torchvision.models.mobilenet_v2,
                           "regnet_x_400mf": torchvision.models.regnet_x_400mf}.items():
            torch.jit.save(torch.jit.script(make().eval()), str(d / f"{name}.pt"))
            cases[name] = (d / f"{name}.pt", d / "images.data.pt")
        run([sys.executable, make_zoo.__file__, d, "--only", "encoder"])
        cases["encoder"] = (d / "encoder.pt", d / "encoder.data.pt")
        for (name, (model, data)), target in ((case, target) for case in cases.items() for target in TARGETS):
            timed = {"cli_quantize_seconds": [], "python_quantize_seconds": [], "python_call_seconds": [],
                     "cli_wall_seconds": []}
            load = []
            for _ in range(args.repeats):
                load.append(os.getloadavg()[0])
                start = time.perf_counter()
                run([args.cli, "--model", model, "--data", data, "--target", "=" + target, "--no-per-layer",
                     "--report", d / "cli.json"])
                timed["cli_wall_seconds"].append(time.perf_counter() - start)
                timed["cli_quantize_seconds"].append(json.loads((d / "cli.json").read_text())["quantize_seconds"])
                python = json.loads(run([sys.executable, "-c", PYTHON_RUN, model, data, target], env))
                timed["python_quantize_seconds"].append(python["quantize_seconds"])
                timed["python_call_seconds"].append(python["call_seconds"])
            row = {"model": name, "target": target, **{k: statistics.median(v) for k, v in timed.items()},
                   "load_average": load, "runs": timed}
            row["overhead"] = row["python_quantize_seconds"] / row["cli_quantize_seconds"] - 1
            print(f"{name} {target}: quantize {row['cli_quantize_seconds']:.3f} s from the CLI, "
                  f"{row['python_quantize_seconds']:.3f} s from Python ({100 * row['overhead']:+.1f} %); "
                  f"the whole Python call {row['python_call_seconds']:.3f} s, "
                  f"the CLI process {row['cli_wall_seconds']:.3f} s (load {statistics.median(load):.1f})", flush=True)
            rows.append(row)
    RESULTS.write_text(json.dumps({"command": " ".join(["benchmarks/python_overhead.py", *sys.argv[1:]]),
                                   "repeats": args.repeats, "target_overhead": 0.05,
                                   "met": all(r["overhead"] <= 0.05 for r in rows), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

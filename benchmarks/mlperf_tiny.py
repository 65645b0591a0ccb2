#!/usr/bin/python3
"""The MLPerf Tiny four on the firmware runtime (issue 36): per model the arena (and the greedy
planner's figure for the same graph), flash (parameters and runtime code), instructions per
inference on the Cortex-M4 under QEMU, instructions per multiply-accumulate, and SQNR against the
float model, beside the latencies published in MLPerf Tiny v1.0 for the NUCLEO-L4R5ZI (Cortex-M4
at 120 MHz). Writes benchmarks/results/mlperf_tiny.json and prints the table (render() below).

  /usr/bin/python3 tests/firmware/check_mlperf_tiny.py --cli build/tools/versatil-quantize --include include \\
      --max-lsb 2 --device --variants dsp,portable --samples 4 --keep mlperf --compiler c++
  /usr/bin/python3 benchmarks/mlperf_tiny.py --from mlperf

The first command is the test `meson test firmware_mlperf_tiny_device`: it exports each model and
leaves, per model, the header, the int8 samples (samples.hpp) and proof.json (device against
LibTorch, SQNR against float). This script builds benchmarks/mlperf_tiny_inference.cpp with each
header for the MPS2 AN386 board (DSP and portable paths), runs it under QEMU with
`-icount shift=0` and reads the SysTick (40 instructions a tick). QEMU counts instructions, not
cycles (no pipeline, no flash wait states); the models have random weights (tests/firmware/
mlperf_tiny_models.py), which changes no instruction count, as no kernel branches on values but the
clamps. Multiply-accumulates are counted on the PyTorch model (convolution and linear layers).
"""
import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "firmware"))
import device  # noqa: E402  (the board build, nm and size helpers of the device test)

QEMU_ICOUNT = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel"]

# MLPerf Tiny v1.0, closed division, NUCLEO-L4R5ZI (STM32L4R5ZI, Cortex-M4 at 120 MHz): the median
# throughput each submitter's performance run logged (closed/<submitter>/results/NUCLEO_L4R5ZI/
# <task>/performance/results.txt, "Median throughput is ... inf./sec.") in github.com/mlcommons/
# tiny_results_v1.0 at commit c7761cf84076d601c4a0ed2ecc51e77d40696ed2; latency is its inverse.
# Those runs are of the trained TensorFlow Lite reference models, on real silicon.
PUBLISHED_SOURCE = ("MLPerf Tiny v1.0 closed division, NUCLEO-L4R5ZI (Cortex-M4, 120 MHz): median throughput in "
                    "github.com/mlcommons/tiny_results_v1.0 (commit c7761cf), closed/<submitter>/results/"
                    "NUCLEO_L4R5ZI/<task>/performance/results.txt; latency = 1 / throughput")
PUBLISHED_THROUGHPUT = {  # inferences per second
    "STMicroelectronics (X-CUBE-AI 7.3.0)": {"keyword_spotting": 13.323, "visual_wake_words": 4.339,
                                             "image_classification": 4.407, "anomaly_detection": 131.950},
    "Plumerai (Plumerai Inference Engine)": {"keyword_spotting": 13.955, "visual_wake_words": 4.795,
                                             "image_classification": 5.775, "anomaly_detection": 179.448},
    "OctoML (microTVM + CMSIS-NN)": {"keyword_spotting": 10.019, "visual_wake_words": 3.320,
                                     "image_classification": 2.567, "anomaly_detection": 116.212},
}
TASK = {"keyword_spotting": "kws", "visual_wake_words": "vww", "image_classification": "ic",
        "anomaly_detection": "ad"}


def run(command, **kwargs):
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)


def multiply_accumulates(name):
    """MACs of one inference: each convolution's output elements times its window (input channels
    per group x kernel), each linear layer's in x out features."""
    import torch  # here, not above: report.py imports render() without torch
    from torch import nn
    from mlperf_tiny_models import MODELS
    cls = MODELS[name]
    model = cls().eval()
    total = 0

    def count(module, _inputs, output):
        nonlocal total
        if isinstance(module, nn.Conv2d):
            total += output.numel() * (module.in_channels // module.groups) * module.kernel_size[0] * module.kernel_size[1]
        elif isinstance(module, nn.Linear):
            total += module.in_features * module.out_features

    for module in model.modules():
        module.register_forward_hook(count)
    with torch.no_grad():
        model(torch.zeros(1, *cls.input_shape))
    return total


def measure(args, name, model_dir, scratch):
    print(f"== {name}", flush=True)
    proof = json.loads((model_dir / "proof.json").read_text())
    firmware = proof["report"]["firmware"]
    defines = [f'VERSATIL_MODEL_HEADER="{name}.hpp"', f"VERSATIL_MODEL_NAMESPACE={name}",
               'VERSATIL_SAMPLES_HEADER="samples.hpp"']
    build_args = argparse.Namespace(compiler=args.arm, root=str(ROOT), define=defines, include_dir=[str(model_dir)],
                                    source=str(ROOT / "benchmarks" / "mlperf_tiny_inference.cpp"))
    result = {"name": name, "macs": multiply_accumulates(name), "arena_bytes": firmware["arena_bytes"],
              "arena_lower_bound_bytes": firmware["arena_lower_bound_bytes"],
              "greedy_planner_bytes": firmware["greedy_planner_bytes"], "parameter_bytes": firmware["parameter_bytes"],
              "host_max_lsb_vs_libtorch": firmware["max_lsb_diff"], "host_top1_agreement": firmware["top1_agreement"],
              "host_compared_samples": firmware["compared_samples"], "libtorch_sqnr_db": proof["report"]["sqnr_db"],
              "device": {k: proof[k] for k in ("samples", "device_equals_libtorch_top1", "device_max_lsb_vs_libtorch",
                                                "device_differing_outputs", "device_outputs", "device_sqnr_db_vs_float")},
              "variants": {}}
    for variant in ("dsp", "portable"):
        out = scratch / f"{name}_{variant}"
        out.mkdir()
        elf = device.build(build_args, variant, out)
        code = device.runtime_code(device.symbols(build_args, elf))
        qemu = subprocess.run(QEMU_ICOUNT + [str(elf)], capture_output=True, text=True, timeout=600)
        if qemu.returncode != 0:
            sys.exit(f"{name} {variant}: QEMU exited {qemu.returncode}: {qemu.stderr}")
        counts = [int(line.split()[-1]) for line in qemu.stdout.splitlines() if line.startswith("inference ")]
        if not counts:
            sys.exit(f"{name} {variant}: QEMU printed no count:\n{qemu.stdout}")
        median = statistics.median(counts)
        result["variants"][variant] = {
            "sections": device.sections(build_args, elf), "runtime_code_bytes": sum(code.values()),
            "forbidden_symbols": device.check_symbols(build_args, elf), "instructions_per_inference": median,
            "instructions_min_max": [min(counts), max(counts)], "samples": len(counts),
            "instructions_per_mac": median / result["macs"]}
        print(f"{variant}: {median:,.0f} instructions per inference ({median / result['macs']:.2f} per MAC), "
              f"runtime code {sum(code.values())} B", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--from", dest="source", required=True,
                        help="check_mlperf_tiny.py --device --keep DIR: the exported models")
    parser.add_argument("--arm", default="arm-none-eabi-g++")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mlperf_tiny.json"))
    args = parser.parse_args()
    for program in (args.arm, "qemu-system-arm"):
        if not shutil.which(program):
            sys.exit(f"{program} not found (tools/install-deps installs it)")
    started = time.time()
    source = Path(args.source).resolve()
    from mlperf_tiny_models import MODELS
    names = [name for name in MODELS if (source / name / "proof.json").exists()]
    if not names:
        sys.exit(f"{source}: no NAME/proof.json (run tests/firmware/check_mlperf_tiny.py --device --keep {source})")
    with tempfile.TemporaryDirectory() as directory:
        models = [measure(args, name, source / name, Path(directory)) for name in names]
    data = {
        "command": "benchmarks/mlperf_tiny.py --from DIR (DIR from tests/firmware/check_mlperf_tiny.py --device "
                   "--variants dsp,portable --samples 4 --max-lsb 2 --keep DIR)",
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "seconds": round(time.time() - started, 1), "host": platform.machine(),
        "compilers": {"arm": run([args.arm, "--version"]).stdout.splitlines()[0],
                      "qemu": run(["qemu-system-arm", "--version"]).stdout.splitlines()[0]},
        "arm_flags": " ".join(device.FLAGS), "published_source": PUBLISHED_SOURCE,
        "published_throughput": PUBLISHED_THROUGHPUT, "models": models,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(render(data)))
    print("wrote", args.out)


def render(data):
    """The table, in Markdown."""
    lines = ["## MLPerf Tiny on the firmware runtime", "",
             f"Measured by `{data['command']}` on {data['started']} ({data['compilers']['arm']}, `{data['arm_flags']}`; "
             f"{data['compilers']['qemu']}, `-icount shift=0`). The architectures are tests/firmware/mlperf_tiny_models.py's, "
             "written from the public descriptions, with random weights and settled batch norm: not trained, so SQNR "
             "is that of random data through random layers, and accuracy is not measured. *Instructions* are "
             "QEMU's count (median over the samples), not cycles; *at 120 MHz* divides them by 120 MHz as if each "
             "took one cycle, which is a lower bound on a real Cortex-M4 (loads and taken branches take 2 to 3 "
             "cycles, and the flash adds wait states). *Flash* is parameters plus the runtime's code (versatil:: "
             "functions and model::run in the DSP image, nm). The published latencies are real boards running the "
             "trained reference models: " + data["published_source"] + ".", "",
             "| model | MACs | arena (greedy planner) | flash: parameters + code | instructions / inference (DSP / portable) "
             "| instructions / MAC (DSP) | at 120 MHz | SQNR vs float (device / LibTorch) | device vs host | top-1 vs "
             "LibTorch | max LSB vs LibTorch (device / host) | published v1.0 latency (ST / Plumerai / OctoML) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    for m in data["models"]:
        dsp, portable, d = m["variants"]["dsp"], m["variants"]["portable"], m["device"]
        published = " / ".join(f"{1000 / figures[m['name']]:.1f}" for figures in data["published_throughput"].values())
        lines.append(
            f"| {m['name']} | {m['macs'] / 1e6:.2f} M | {m['arena_bytes']:,} B ({m['greedy_planner_bytes']:,} B) | "
            f"{m['parameter_bytes']:,} + {dsp['runtime_code_bytes']:,} B | {dsp['instructions_per_inference'] / 1e6:.2f} M / "
            f"{portable['instructions_per_inference'] / 1e6:.2f} M | {dsp['instructions_per_mac']:.2f} | "
            f"{1000 * dsp['instructions_per_inference'] / 120e6:.1f} ms | {d['device_sqnr_db_vs_float']:.1f} / "
            f"{m['libtorch_sqnr_db']:.1f} dB | byte-identical on {d['samples']} samples | {d['device_equals_libtorch_top1']} "
            f"of {d['samples']} | {d['device_max_lsb_vs_libtorch']} / {m['host_max_lsb_vs_libtorch']} | {published} ms |")
    return lines + [""]


if __name__ == "__main__":
    main()

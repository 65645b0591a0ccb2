#!/usr/bin/python3
"""The MLPerf Tiny four end to end (issue 36): mlperf_tiny_models.py writes the architectures (random
weights, batch norm settled, torch.jit.script; with --models operators, operator_models.py writes the
models of the other firmware operators, torchvision's MobileNetV3-small among them),
versatil-quantize quantizes each for cortex_m and exports it (--export); each must export, its
header compile, and the runtime on this host agree with LibTorch's quantized model (the report's
firmware figures: top-1 on every test sample, every int8 output within --max-lsb).

With --device: run_samples.cpp with the exported header and the first --samples test samples
(int8, quantized as LibTorch's quantized model quantizes its input), built for the host and for
the MPS2 AN386 board (Cortex-M4) by device.py, which runs QEMU, requires the host's bytes and
refuses malloc/free/new/__cxa_throw; then every sample's top-1 on the device must equal LibTorch's
quantized model's, and every int8 output must be within --max-lsb of LibTorch's, and run's stack,
compiled and painted on the board, within the header's model::stack_bytes (check_stack.py). Without
arm-none-eabi-g++ or qemu-system-arm the device run exits 77, which meson counts as skipped.

  check_mlperf_tiny.py --cli versatil-quantize --include DIR --compiler c++ [--max-lsb N]
                       [--device [--device-compiler arm-none-eabi-g++] [--samples N] [--variants dsp,portable]]
                       [--models mlperf_tiny|operators] [--only NAME,...] [--keep DIR]

--keep DIR keeps every model, header, report and (with --device) DIR/NAME/proof.json, which
benchmarks/mlperf_tiny.py reads. Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import mlperf_tiny_models  # noqa: E402
import operator_models  # noqa: E402

# --models: which script writes the models, and its models.
SUITES = {"mlperf_tiny": ("mlperf_tiny_models.py", mlperf_tiny_models.MODELS),
          "operators": ("operator_models.py", operator_models.MODELS)}

SKIP = 77  # meson's exit status for a skipped test
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)


def run(command, **kwargs):
    start = time.monotonic()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    print(f"$ {' '.join(str(c) for c in command)}  ({time.monotonic() - start:.1f} s, exit {result.returncode})",
          flush=True)
    return result


def header_constant(header: Path, name: str) -> float:
    found = re.search(rf"static constexpr \S+ {name} = ([-0-9.e]+);", header.read_text())
    if not found:
        sys.exit(f"{header}: no constant {name}")
    return float(found.group(1))


def export(args, name, work):
    """Quantizes and exports `name`; checks the report and that the header compiles. The report or None."""
    model_dir = work / name
    exported = run([args.cli, "--model", model_dir / f"{name}.pt", "--data", model_dir / f"{name}.data.pt",
                    "--target", "=cortex_m", "--export", model_dir / f"{name}.hpp", "--report",
                    model_dir / "report.json", "--out", model_dir / "q.pt", "--no-per-layer"])
    print(exported.stdout, end="")
    check(exported.returncode == 0, f"{name}: versatil-quantize --target =cortex_m --export exits 0" +
          ("" if exported.returncode == 0 else ": " + exported.stderr.strip()[-600:]))
    if exported.returncode != 0:
        return None
    report = json.loads((model_dir / "report.json").read_text())
    firmware = report["firmware"]
    check(firmware["compared_samples"] == args.test and firmware["top1_agreement"] == 1.0,
          f"{name}: the host runtime's top-1 equals LibTorch's on {firmware['top1_agreement'] * 100:.0f} % of "
          f"{firmware['compared_samples']} samples")
    check(firmware["max_lsb_diff"] <= args.max_lsb,
          f"{name}: host runtime within {firmware['max_lsb_diff']} <= {args.max_lsb} LSB of LibTorch "
          f"({firmware['differing_elements']} of {firmware['compared_elements']} int8 outputs differ)")
    check(firmware["arena_lower_bound_bytes"] <= firmware["arena_bytes"],
          f"{name}: arena {firmware['arena_bytes']} B >= live-set bound {firmware['arena_lower_bound_bytes']} B "
          f"(greedy planner {firmware['greedy_planner_bytes']} B)")
    check(report["quantized_ops"] == report["quantizable_ops"],
          f"{name}: {report['quantized_ops']} of {report['quantizable_ops']} conv/linear ops quantized")
    probe = model_dir / "uses_header.cpp"
    probe.write_text(f'#include "{name}.hpp"\n'
                     f"static_assert({name}::model::arena_bytes == {firmware['arena_bytes']});\n"
                     f"static_assert({name}::model::parameter_bytes == {firmware['parameter_bytes']});\n")
    # Each compiler within its default budget for constant evaluation (Clang's is the smaller).
    for compiler in [args.compiler, *[[c] for c in args.also_compile_with]]:
        compiled = run(compiler + ["-std=c++20", "-fsyntax-only", "-I", args.include, "-I", model_dir, probe])
        check(compiled.returncode == 0, f"{name}: the header compiles with the report's figures ({compiler[-1]})" +
              ("" if compiled.returncode == 0 else ":\n" + compiled.stderr[-2000:]))
    return report


def libtorch_levels(name, model_dir, samples):
    """The test samples as the int8 input levels LibTorch's quantized model computes from them,
    its int8 output levels, and the float model's outputs."""
    header = model_dir / f"{name}.hpp"
    in_scale, in_zero = header_constant(header, "input_scale"), int(header_constant(header, "input_zero_point"))
    out_scale, out_zero = header_constant(header, "output_scale"), int(header_constant(header, "output_zero_point"))
    reference = torch.jit.load(str(model_dir / f"{name}.float.pt"))
    inputs = reference.test[:samples]
    torch.backends.quantized.engine = "qnnpack"  # the engine cortex_m lowers to
    quantized = torch.jit.load(str(model_dir / "q.pt"))
    with torch.no_grad():
        output = quantized(inputs)
    levels = torch.quantize_per_tensor(inputs, in_scale, in_zero, torch.qint8).int_repr()
    # LibTorch returns its int8 output dequantized, (q - zero) * scale: the level comes back exactly.
    out_levels = torch.round(output / out_scale).to(torch.int64) + out_zero
    return levels, out_levels, reference.output[:samples], (out_scale, out_zero)


def first_max(row):
    """Top-1 as run_samples.cpp takes it: the first largest output."""
    values = row.tolist()
    return values.index(max(values))


def device_run(args, name, work, report):
    model_dir = work / name
    levels, libtorch_out, float_out, (out_scale, out_zero) = libtorch_levels(name, model_dir, args.samples)
    samples_header = model_dir / "samples.hpp"
    rows = ",\n".join("{" + ",".join(str(v) for v in row.flatten().tolist()) + "}" for row in levels)
    samples_header.write_text("// The test samples as int8 input levels (check_mlperf_tiny.py).\n#pragma once\n"
                              "#include <cstdint>\nnamespace embedded_samples {\n"
                              f"inline constexpr int count = {levels.shape[0]};\n"
                              f"inline constexpr std::int8_t inputs[{levels.shape[0]}][{levels[0].numel()}] = {{\n"
                              f"{rows}}};\n}}\n")
    defines = [f'VERSATIL_MODEL_HEADER="{name}.hpp"', f"VERSATIL_MODEL_NAMESPACE={name}",
               'VERSATIL_SAMPLES_HEADER="samples.hpp"']
    host = model_dir / "run_samples_host"
    built = run(args.compiler + ["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", *[f"-D{d}" for d in defines],
                                 "-I", args.include, "-I", ROOT / "examples/firmware", "-I", model_dir,
                                 HERE / "run_samples.cpp", "-o", host])
    check(built.returncode == 0, f"{name}: run_samples.cpp builds for the host" +
          ("" if built.returncode == 0 else ":\n" + built.stderr[-2000:]))
    if built.returncode != 0:
        return
    device = run([sys.executable, HERE / "device.py", "--compiler", args.device_compiler, "--root", ROOT,
                  "--source", HERE / "run_samples.cpp", "--host-program", host, "--variants", args.variants,
                  *[a for d in defines for a in ("--define", d)], "--include-dir", model_dir,
                  "--build-dir", model_dir / "device", "--sizes", model_dir / "device" / "sizes.json"])
    print("\n".join(line for line in device.stdout.splitlines() if not line.startswith(" ")))
    check(device.returncode == 0, f"{name}: on the MPS2 AN386 ({args.variants}) QEMU prints the host's bytes, no "
          "allocation or exception symbol linked" + ("" if device.returncode == 0 else ":\n" + device.stderr[-2000:]))
    if device.returncode != 0:
        return
    # The header's stack figure against the model's run compiled four ways and painted under QEMU.
    stack = run([sys.executable, HERE / "check_stack.py", "--compiler", args.device_compiler, "--root", ROOT,
                 "--build-dir", model_dir / "stack", "--header", f"{model_dir / name}.hpp:{name}", "--qemu",
                 "--models-only"], timeout=900)
    print("\n".join(line for line in stack.stdout.splitlines() if "stack" in line))
    check(stack.returncode == 0, f"{name}: run's stack stays within model::stack_bytes (call graph and painted)" +
          ("" if stack.returncode == 0 else ":\n" + stack.stdout[-2000:] + stack.stderr[-1000:]))
    variant = args.variants.split(",")[0]
    text = (model_dir / "device" / f"{variant}.out").read_text().splitlines()
    device_top1, device_out, current = [], [], None
    for line in text:
        fields = line.split()
        if fields[0] == "sample":
            device_top1.append(int(fields[3]))
            current = []
            device_out.append(current)
        elif fields[0] == "outputs":
            current.extend(int(v) for v in fields[1:])
    device_out = torch.tensor(device_out, dtype=torch.int64)
    check(device_out.shape == libtorch_out.shape, f"{name}: the device printed {tuple(device_out.shape)} outputs")
    if device_out.shape != libtorch_out.shape:
        return
    libtorch_top1 = [first_max(row) for row in libtorch_out]
    differ = [i for i, (a, b) in enumerate(zip(device_top1, libtorch_top1)) if a != b]
    check(not differ, f"{name}: top-1 on the device equals LibTorch's quantized model's on "
          f"{len(device_top1) - len(differ)} of {len(device_top1)} samples (differ: {differ[:10]})")
    lsb = (device_out - libtorch_out).abs()
    check(int(lsb.max()) <= args.max_lsb, f"{name}: device outputs within {int(lsb.max())} <= {args.max_lsb} LSB "
          f"of LibTorch's ({int((lsb > 0).sum())} of {lsb.numel()} differ)")
    # SQNR of the device's dequantized outputs against the float model: what int8 costs.
    dequantized = (device_out - out_zero).to(torch.float64) * out_scale
    reference = float_out.to(torch.float64)
    sqnr = 10 * torch.log10(reference.pow(2).sum() / (dequantized - reference).pow(2).sum()).item()
    sizes = json.loads((model_dir / "device" / "sizes.json").read_text())
    (model_dir / "proof.json").write_text(json.dumps({
        "samples": len(device_top1), "device_equals_libtorch_top1": len(device_top1) - len(differ),
        "device_max_lsb_vs_libtorch": int(lsb.max()), "device_differing_outputs": int((lsb > 0).sum()),
        "device_outputs": lsb.numel(), "device_sqnr_db_vs_float": sqnr, "variants": args.variants.split(","),
        "report": {key: report[key] for key in ("sqnr_db", "quantized_ops", "quantizable_ops", "firmware")},
        "device_sizes": {v: {"sections": m["sections"], "runtime_code_bytes": m["runtime_code_bytes"]}
                         for v, m in sizes.items()}}, indent=1) + "\n")
    print(f"{name}: device SQNR against the float model {sqnr:.2f} dB on {len(device_top1)} samples")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--include", required=True)
    parser.add_argument("--compiler", required=True, nargs="+")
    parser.add_argument("--max-lsb", type=int, default=1)
    parser.add_argument("--also-compile-with", action="append", default=[], metavar="CXX",
                        help="a further compiler the header must compile with (syntax only)")
    parser.add_argument("--device", action="store_true", help="run on the MPS2 AN386 under QEMU too")
    parser.add_argument("--device-compiler", default="arm-none-eabi-g++")
    parser.add_argument("--variants", default="dsp")
    parser.add_argument("--samples", type=int, default=4, help="test samples the device runs (default 4)")
    parser.add_argument("--test", type=int, default=16, help="test samples the export compares (default 16)")
    parser.add_argument("--models", choices=SUITES, default="mlperf_tiny",
                        help="the MLPerf Tiny four (default) or the operator models (operator_models.py)")
    parser.add_argument("--only", help="a comma-separated subset of the suite's models")
    parser.add_argument("--keep", help="keep every file under DIR/NAME")
    args = parser.parse_args()
    if args.device:
        missing = [tool for tool in (args.device_compiler, "qemu-system-arm") if not shutil.which(tool)]
        if missing:
            print(f"skipped: {' and '.join(missing)} not found (tools/install-deps installs them)")
            sys.exit(SKIP)
    script, models = SUITES[args.models]
    names = args.only.split(",") if args.only else list(models)
    with tempfile.TemporaryDirectory(prefix="versatil-mlperf-") as scratch:
        work = Path(args.keep or scratch)
        for name in names:
            written = run([sys.executable, HERE / script, work / name, "--only", name, "--test", args.test])
            print(written.stdout, end="")
            if written.returncode != 0:
                sys.exit(f"{script} failed:\n{written.stderr}")
            report = export(args, name, work)
            if report is not None and args.device:
                device_run(args, name, work, report)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""versatil from Python against the CLI, on zoo models (tests/zoo/make_zoo.py) and their data files:
the same model and tensors quantized by versatil.quantize and by versatil-quantize must give the same
report (every figure but the timings) and a quantized model whose outputs are the same bits. The
models then cross: the one quantized in Python, saved with versatil.save, is run by the C++ library
(run_quantized), and the CLI's, loaded with versatil.load, is run in Python; the outputs must be the
same bits again. The truth here is the CLI's run, which this module's code did not compute.

  cli_parity.py VERSATIL_QUANTIZE RUN_QUANTIZED"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "zoo"))
import make_zoo  # noqa: E402

import versatil  # noqa: E402

# A transformer block (linear layers, LayerNorm, GELU) and a two-input CNN: one input and two, static
# and dynamic. Small, so the whole check takes seconds.
CASES = [("encoder", "xnnpack"), ("two_inputs", "xnnpack"), ("encoder", "x86_inductor:dynamic")]
# Wall-clock figures: measured anew by each run.
# LibTorch's warning counts follow the number of timed runs, which the clock decides.
TIMINGS = {"float_ms", "quantized_ms", "float_ms_p10", "float_ms_p90", "quantized_ms_p10", "quantized_ms_p90",
           "latency_runs", "latency_unsteady", "libtorch_warnings", "speedup", "quantize_seconds", "qat_seconds"}
# How the run was asked for, which only the CLI knows: its command line and the model file it read.
PROVENANCE = {"command_line", "model_path"}


def inputs_named(data, stem):
    """A data file's inputs as versatil.quantize takes them: a tensor, or a tuple for several inputs."""
    if hasattr(data, stem):
        return getattr(data, stem)
    return tuple(getattr(data, f"{stem}_{i}") for i in range(2))


def outputs(module, inputs, engine):
    torch.backends.quantized.engine = engine
    with torch.no_grad():
        result = module(*inputs) if isinstance(inputs, tuple) else module(inputs)
    return [result] if isinstance(result, torch.Tensor) else list(result)


def main():
    cli, runner = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        d = Path(scratch)
        subprocess.run([sys.executable, make_zoo.__file__, d, "--only", "encoder,two_inputs"], check=True,
                       stdout=subprocess.DEVNULL)
        for name, spec in CASES:
            case = f"{name} {spec}"
            tag = name + "." + spec.replace(":", "_")
            model_path, data_path = d / f"{name}.pt", d / f"{name}.data.pt"
            subprocess.run([cli, "--model", model_path, "--data", data_path, "--target", "=" + spec,
                            "--out", d / f"{tag}.cli.pt", "--report", d / f"{tag}.cli.json"],
                           check=True, stdout=subprocess.DEVNULL)
            cli_report = json.loads((d / f"{tag}.cli.json").read_text())

            data = torch.jit.load(str(data_path))
            calibration, test = inputs_named(data, "calib"), inputs_named(data, "test")
            quantized, report = versatil.quantize(torch.jit.load(str(model_path)), calibration,
                                                  targets={"": spec}, evaluation=test)
            if not isinstance(report, dict) or "output SQNR" not in str(report):
                failures.append(f"{case}: the report is not a dict with the CLI's table as str()")
            differing = sorted(k for k in cli_report.keys() | report.keys()
                               if k not in TIMINGS | PROVENANCE and cli_report.get(k) != report.get(k))
            if differing:
                failures.append(f"{case}: report fields differ from the CLI's: "
                                + "; ".join(f"{k}: {report.get(k)} != {cli_report.get(k)}" for k in differing))

            engine = report["engine"]
            from_python = outputs(quantized, test, engine)
            from_cli = outputs(versatil.load(str(d / f"{tag}.cli.pt")), test, engine)
            if len(from_python) != len(from_cli) or not all(map(torch.equal, from_python, from_cli)):
                failures.append(f"{case}: the Python-quantized model's outputs are not the CLI's, bit for bit")

            # The Python-quantized model saved, run by the C++ library on the same test inputs.
            versatil.save(quantized, str(d / f"{tag}.py.pt"))
            subprocess.run([runner, d / f"{tag}.py.pt", data_path, d / f"{tag}.out.pt"], check=True)
            in_cpp = torch.jit.load(str(d / f"{tag}.out.pt"))
            from_cpp = [in_cpp.calib] if hasattr(in_cpp, "calib") else \
                [getattr(in_cpp, f"calib_{i}") for i in range(len(from_python))]
            if not all(map(torch.equal, from_python, from_cpp)):
                failures.append(f"{case}: the Python-quantized model runs differently in C++")
            print(f"{case}: SQNR {report['sqnr_db']:.2f} dB, {report['quantized_ops']}/{report['quantizable_ops']} "
                  f"ops, the CLI's figures and bits", flush=True)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

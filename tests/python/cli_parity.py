#!/usr/bin/python3
"""versatil from Python against the CLI, on zoo models (tests/zoo/make_zoo.py) and their data files:
the same model and tensors quantized by versatil.quantize and by versatil-quantize must give the same
report (every figure but the timings) and a quantized model whose outputs are the same bits. The
models then cross: the one quantized in Python, saved with versatil.save, is run by the C++ library
(run_quantized), and the CLI's, loaded with versatil.load, is run in Python; the outputs must be the
same bits again. The truth here is the CLI's run, which this module's code did not compute.

  cli_parity.py VERSATIL_QUANTIZE RUN_QUANTIZED"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "zoo"))
import make_zoo  # noqa: E402

import versatil  # noqa: E402

# A transformer block (linear layers, LayerNorm, GELU) and a two-input CNN: one input and two, static
# and dynamic, each side's default target (Python's xnnpack, the CLI's x86_inductor), and each side's
# default batching (no --batch, no batch argument): the data split into the same batches, the same
# latency batch. Small, so the whole check takes seconds.
CASES = [("encoder", "xnnpack"), ("two_inputs", "xnnpack"), ("encoder", "x86_inductor"),
         ("encoder", "x86_inductor:dynamic")]
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


def tiny_cnn():
    torch.manual_seed(0)
    return torch.jit.script(torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 10 * 10, 10)).eval())


def differing_fields(cli_report, report):
    return sorted(k for k in cli_report.keys() | report.keys()
                  if k not in TIMINGS | PROVENANCE and cli_report.get(k) != report.get(k))


def check_qat(cli, d, failures):
    """train_qat against the CLI's QAT on one data file: a few steps, the same options the CLI has. The
    training batch is left at its default (64) on both sides: the CLI's --batch also sets the latency
    batch, which train_qat's batch_size does not."""
    torch.manual_seed(1)
    samples = torch.randn(128, 1, 12, 12)
    labels = torch.randint(0, 10, (128,))
    test, test_labels = torch.randn(32, 1, 12, 12), torch.randint(0, 10, (32,))
    model = tiny_cnn()
    model.save(str(d / "qat.pt"))
    make_zoo.save_data(d / "qat.data.pt", {"train_inputs": samples, "train_labels": labels, "test": test,
                                           "test_labels": test_labels})
    subprocess.run([cli, "--model", d / "qat.pt", "--data", d / "qat.data.pt", "--target", "=xnnpack:qat",
                    "--steps", "4", "--lr", "1e-3", "--no-per-layer", "--out", d / "qat.cli.pt",
                    "--report", d / "qat.cli.json"], check=True, stdout=subprocess.DEVNULL)
    quantized, report = versatil.train_qat(torch.jit.load(str(d / "qat.pt")), samples, labels, evaluation=test,
                                           labels=test_labels, steps=4, learning_rate=1e-3)
    differing = differing_fields(json.loads((d / "qat.cli.json").read_text()), report)
    if differing:
        failures.append(f"train_qat: report fields differ from the CLI's: {differing}")
    engine = report["engine"]
    if not torch.equal(outputs(quantized, test, engine)[0],
                       outputs(versatil.load(str(d / "qat.cli.pt")), test, engine)[0]):
        failures.append("train_qat: the trained model's outputs are not the CLI's, bit for bit")
    print(f"train_qat: {report['qat_steps']} steps, final loss {report['qat_final_loss']:.4f}, "
          f"SQNR {report['sqnr_db']:.2f} dB, "
          "the CLI's figures and bits", flush=True)


def check_export(cli, d, failures):
    """export_firmware against the CLI's --export of the same model and data: the same header, byte for
    byte (the header records no provenance), and one the host compiler compiles."""
    torch.manual_seed(2)
    calibration, test = torch.randn(64, 1, 12, 12), torch.randn(32, 1, 12, 12)
    tiny_cnn().save(str(d / "fw.pt"))
    make_zoo.save_data(d / "fw.data.pt", {"calib": calibration, "test": test})
    subprocess.run([cli, "--model", d / "fw.pt", "--data", d / "fw.data.pt", "--target", "=cortex_m",
                    "--no-per-layer", "--export", d / "tiny_fw.hpp"], check=True, stdout=subprocess.DEVNULL)
    (d / "py").mkdir()
    _, report = versatil.export_firmware(torch.jit.load(str(d / "fw.pt")), calibration, str(d / "py" / "tiny_fw.hpp"),
                                         evaluation=test, per_layer=False)
    written, from_cli = (d / "py" / "tiny_fw.hpp").read_bytes(), (d / "tiny_fw.hpp").read_bytes()
    if written != from_cli:
        failures.append("export_firmware: the header differs from the CLI's --export of the same model")
    (d / "use_fw.cpp").write_text('#include "tiny_fw.hpp"\nint main() { return 0; }\n')
    include = Path(__file__).resolve().parent.parent.parent / "include"
    compiled = subprocess.run([os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", "-I", include,
                               "-I", d / "py", d / "use_fw.cpp"], capture_output=True, text=True)
    if compiled.returncode != 0:
        failures.append(f"export_firmware: the header does not compile: {compiled.stderr[:400]}")
    print(f"export_firmware: {len(written)} bytes, the CLI's header, which c++ compiles", flush=True)


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
            differing = differing_fields(cli_report, report)
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
        check_qat(cli, d, failures)
        check_export(cli, d, failures)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

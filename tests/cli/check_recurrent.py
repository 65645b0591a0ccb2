#!/usr/bin/env python3
"""LSTM and GRU quantized dynamically by versatil-quantize against PyTorch's own quantize_dynamic on
the same engine, in Debian's python3-torch: scripted models with single and stacked layers, one and
two directions, batch_first or not, quantized with `=xnnpack:dynamic` (QNNPACK) and
`=x86_inductor:dynamic` (oneDNN); the saved model loaded in Python must give the very outputs of
quantize_dynamic given the backend's weight observer, and the report must count the recurrent
layers. Layers LibTorch cannot quantize (an LSTM projection, nn.RNN, no bias) stay float and the
report says why. Usage: check_recurrent.py VERSATIL_QUANTIZE [ENGINE]: with ENGINE (qnnpack or
onednn), only that engine's backend; the sanitizer build runs one, since both go through the
same versatil code and differ only in LibTorch's kernels."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.ao.quantization import PerChannelMinMaxObserver, QConfig, default_dynamic_quant_observer, quantize_dynamic

cli = sys.argv[1]
failures = []
torch.manual_seed(0)


class Recurrent(nn.Module):
    """A recurrent layer (its output sequence) and a linear head, as a tagger or a keyword model has."""

    def __init__(self, layer: nn.Module, features: int):
        super().__init__()
        self.rnn, self.head = layer, nn.Linear(features, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


def model(kind, **options):
    layer = getattr(nn, kind)(8, 16, **options)
    features = options.get("proj_size", 16) or 16
    return Recurrent(layer, features * (2 if options.get("bidirectional") else 1)).eval()


# name: (model, quantized by LibTorch, why not)
MODELS = {
    "lstm": (model("LSTM"), True, None),
    "lstm_stacked_bidirectional_batch_first": (
        model("LSTM", num_layers=2, bidirectional=True, batch_first=True), True, None),
    "gru": (model("GRU"), True, None),
    "gru_stacked_bidirectional_batch_first": (
        model("GRU", num_layers=2, bidirectional=True, batch_first=True), True, None),
    "lstm_projection": (model("LSTM", proj_size=4), False, "has a projection (proj_size)"),
    "rnn": (model("RNN"), False, "LibTorch 1.13 has no quantized RNN op"),
    "lstm_no_bias": (model("LSTM", bias=False), False, "it has no bias"),
}

# The backends' dynamic weights: per-channel symmetric int8, -127..127 for xnnpack (its
# xnnpack_config.hpp), -128..127 for x86_inductor (x86_inductor_config.hpp).
BACKENDS = {"xnnpack:dynamic": ("qnnpack", -127), "x86_inductor:dynamic": ("onednn", -128)}
if len(sys.argv) > 2:
    BACKENDS = {target: backend for target, backend in BACKENDS.items() if backend[0] == sys.argv[2]}
    if not BACKENDS:
        sys.exit(f"check_recurrent: unknown engine {sys.argv[2]!r} (qnnpack or onednn)")


def sample(name, batch_first_shape):
    # (time, batch, features), or (batch, time, features) for batch_first; values spread as an
    # embedding's are, with a tail.
    shape = (3, 6, 8) if batch_first_shape else (6, 3, 8)
    return torch.randn(shape) * 1.5


def reference(float_model, engine, quant_min):
    torch.backends.quantized.engine = engine
    weight = PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                quant_min=quant_min, quant_max=127)
    qconfig = QConfig(activation=default_dynamic_quant_observer, weight=weight)
    return quantize_dynamic(float_model, {nn.LSTM: qconfig, nn.GRU: qconfig})


def run(*args):
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


with tempfile.TemporaryDirectory() as scratch:
    d = Path(scratch)
    for name, (float_model, quantizable, why) in MODELS.items():
        batch_first = getattr(float_model.rnn, "batch_first", False)
        x = sample(name, batch_first)
        model_file, data_file = d / f"{name}.pt", d / f"{name}_data.pt"
        torch.jit.script(float_model).save(str(model_file))

        class Data(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calib", x)
                self.register_buffer("test", x)

            def forward(self):
                return None

        torch.jit.script(Data()).save(str(data_file))
        for target, (engine, quant_min) in BACKENDS.items():
            label = f"{name} {target}"
            out, report_file = d / f"{name}_{engine}_q.pt", d / f"{name}_{engine}.json"
            # The head stays float on both sides: versatil chooses a dynamic linear's weight scheme and
            # reduce_range by measurement (accuracy/dynamic_weight_choice.hpp), which quantize_dynamic's
            # Linear (reduce_range always on) cannot follow; the recurrent layer is this test's subject.
            status, output = run("--model", model_file, "--data", data_file, "--target", "=" + target,
                                 "--target", "head=none", "--no-per-layer", "--out", out, "--report", report_file)
            if status != 0:
                failures.append(f"{label}: exit {status}\n{output}")
                continue
            report = json.loads(report_file.read_text())
            notes = [a["change"] for a in report.get("adjustments", []) if a["module"] == "rnn"]
            # The engine before loading: loading packs the weights for the engine set then.
            torch.backends.quantized.engine = engine
            saved = torch.jit.load(str(out))
            with torch.no_grad():
                ours = saved(x)
                # quantize_dynamic refuses the layers LibTorch cannot quantize (a projection, no bias).
                theirs = reference(float_model, engine, quant_min)(x) if quantizable else None
            quantized_in_graph = "quantized_lstm" in saved.code or "quantized_gru" in saved.code
            # Counted: the recurrent layer and the head, one op each (not one linear per step).
            expected_ops = (1 if quantizable else 0, 2)
            if (report["quantized_ops"], report["quantizable_ops"]) != expected_ops:
                failures.append(f"{label}: {report['quantized_ops']} of {report['quantizable_ops']} ops quantized, "
                                f"expected {expected_ops[0]} of {expected_ops[1]}")
            if quantizable:
                if not quantized_in_graph or notes:
                    failures.append(f"{label}: the recurrent layer was not quantized ({notes})")
                elif not torch.equal(ours, theirs):
                    failures.append(f"{label}: outputs differ from quantize_dynamic's on {engine} by up to "
                                    f"{(ours - theirs).abs().max().item()}")
                else:
                    print(f"ok: {label}: bit-equal to quantize_dynamic")
            else:
                # Stays float: the layer computes what the float model does.
                if quantized_in_graph or not any(why in note and "stays float" in note for note in notes):
                    failures.append(f"{label}: expected the layer float with the reason {why!r}; notes {notes}")
                else:
                    print(f"ok: {label}: stays float ({notes[0]})")

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)

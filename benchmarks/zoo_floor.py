#!/usr/bin/python3
"""How far weight methods can take each zoo classifier under x86_inductor's scheme: its output
SQNR with only the activations quantized (weights left in float) is a ceiling for anything that
changes weights and ranges' rounding but keeps the activations' 8-bit per-tensor grids.

  zoo_floor.py [--only NAMES]

Each torchvision classifier of tests/zoo/make_zoo.py is rebuilt in Python exactly as the zoo
file was made (the script checks the rebuilt model's outputs against the saved TorchScript
file's), then fake-quantized with PyTorch's FX (prepare_fx), the way PyTorch's own tools
simulate a scheme: x86_inductor's activations (quint8 0..255, per tensor, HistogramObserver;
alone also with MinMaxObserver) and weights (int8 per channel, symmetric, nearest rounding),
each alone and both; what the model returns straight from a small conv / linear layer is not
rounded, as x86_inductor leaves it (float_model_outputs.hpp). Models FX cannot trace are left out (--only names them anyway, as skipped
rows). Writes benchmarks/results/architecture_floor.json; zoo_peer.render_methods() puts it in
RESULTS.md beside PyTorch's and versatil's best SQNR from architecture_methods.json.
Needs Debian's python3-torch, python3-torchvision and dataset-fashion-mnist."""
import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.ao.quantization import QConfig, QConfigMapping, HistogramObserver, MinMaxObserver, default_per_channel_weight_observer
from torch.ao.quantization.qconfig_mapping import _FIXED_QPARAMS_OP_TO_OBSERVER
from torch.ao.quantization.quantize_fx import fuse_fx, prepare_fx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import make_zoo  # noqa: E402
from zoo_peer import FLOOR_RESULTS, METHODS_RESULTS, render_methods, sqnr_db, write_results_section  # noqa: E402
# The classifiers FX traces whose activations FX and LibTorch's graph mode observe alike: not
# MobileNetV2 or MobileNetV3, whose conv outputs FX observes before ReLU6 / hardswish and
# versatil as those see them.
MODELS = ["resnet18", "resnext", "squeezenet", "densenet", "mnasnet", "regnet"]


def rebuilt(name, calibration):
    """The zoo's model as make_zoo.write() makes it (same seed, same settling)."""
    torch.manual_seed(0)
    model = make_zoo.CLASSIFIERS[name]().eval()
    make_zoo.randomize_zero_weights(model)
    make_zoo.settle_batch_norm(model, make_zoo.batches_of([calibration]))
    make_zoo.scale_head(model, make_zoo.batches_of([calibration]))
    return model.eval()


def weights_rounded(model):
    """Every conv / linear weight on x86_inductor's grid: int8 per output channel, symmetric."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                w = module.weight
                scale = (w.abs().flatten(1).amax(1) / 127.5).clamp(min=2 ** -12).view([-1] + [1] * (w.dim() - 1))
                module.weight.copy_(torch.clamp(torch.round(w / scale), -128, 127) * scale)
    return model


FLOAT_OUTPUT_WEIGHT_LIMIT = 65536  # float_model_outputs.hpp's float_output_weight_limit


def returned_in_float(prepared):
    """What the model returns straight from a conv / linear layer (fused activation included) of at
    most FLOAT_OUTPUT_WEIGHT_LIMIT weights is not rounded, as versatil's x86_inductor leaves it
    (float_model_outputs.hpp). Values returned from pooling stay rounded, as there."""
    modules = dict(prepared.named_modules())
    output = next(n for n in prepared.graph.nodes if n.op == "output")

    def unrounded(node):
        if isinstance(node, (tuple, list)):
            return type(node)(unrounded(item) for item in node)
        if not (isinstance(node, torch.fx.Node) and node.op == "call_module" and "activation_post_process" in node.target):
            return node
        producer = node.args[0]
        layer = modules.get(producer.target) if producer.op == "call_module" else None
        first = layer[0] if isinstance(layer, nn.Sequential) else layer  # fused conv / linear + relu
        small = isinstance(first, (nn.Conv2d, nn.Linear)) and first.weight.numel() <= FLOAT_OUTPUT_WEIGHT_LIMIT
        return producer if small else node

    output.args = tuple(unrounded(arg) for arg in output.args)
    for node in list(prepared.graph.nodes):
        if node.op == "call_module" and "activation_post_process" in node.target and not node.users:
            prepared.graph.erase_node(node)
    prepared.recompile()


def activations_quantized(model, calibration, observer=HistogramObserver):
    """FX fake quantization of the activations only (x86_inductor's activation spec). The weight
    observer only lets FX match its quantized patterns: a prepared model computes with float
    weights."""
    activation = torch.ao.quantization.FakeQuantize.with_args(observer=observer, quant_min=0, quant_max=255,
                                                              dtype=torch.quint8, reduce_range=False)
    # PyTorch's own mapping for the ops FX quantizes with fixed qparams (sigmoid, hardsigmoid,
    # tanh), as graph mode does too; x86_inductor's spec everywhere else.
    mapping = QConfigMapping().set_global(QConfig(activation=activation, weight=default_per_channel_weight_observer))
    for op, observer in _FIXED_QPARAMS_OP_TO_OBSERVER.items():
        mapping.set_object_type(op, QConfig(activation=observer, weight=default_per_channel_weight_observer))
    prepared = prepare_fx(copy.deepcopy(model), mapping, (calibration[:2],))
    returned_in_float(prepared)
    prepared.apply(torch.ao.quantization.disable_fake_quant)
    with torch.no_grad():
        for start in range(0, calibration.size(0), 16):
            prepared(calibration[start:start + 16])
    prepared.apply(torch.ao.quantization.enable_fake_quant)
    prepared.apply(torch.ao.quantization.disable_observer)
    return prepared


def measure(name, zoo, calibration, test):
    model = rebuilt(name, calibration)
    with torch.no_grad():
        reference = model(test)
        saved = torch.jit.load(str(zoo / f"{name}.pt"))(test)
    if not torch.allclose(reference, saved, rtol=1e-4, atol=1e-5):
        sys.exit(f"{name}: the rebuilt model's outputs differ from the zoo file's")
    fused = fuse_fx(copy.deepcopy(model))
    with torch.no_grad():
        weights_only = sqnr_db(reference, weights_rounded(fused)(test))
        activations_only = sqnr_db(reference, activations_quantized(fused, calibration)(test))
        # The same with min-max ranges (calibration=minmax), the best method on some rows.
        minmax_activations_only = sqnr_db(reference, activations_quantized(fused, calibration, MinMaxObserver)(test))
        both = sqnr_db(reference, activations_quantized(weights_rounded(fused), calibration)(test))
    return {"model": name, "weights_only_db": weights_only, "activations_only_db": activations_only,
            "minmax_activations_only_db": minmax_activations_only, "both_db": both}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or MODELS
    torch.set_num_threads(1)
    calibration = make_zoo.images("train-images-idx3-ubyte", make_zoo.CALIBRATION_SAMPLES)
    test = make_zoo.images("t10k-images-idx3-ubyte", make_zoo.TEST_SAMPLES)
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        zoo = Path(scratch)
        subprocess.run([sys.executable, str(ROOT / "tests" / "zoo" / "make_zoo.py"), scratch, "--only", ",".join(names)],
                       check=True, stdout=subprocess.DEVNULL)
        for name in names:
            try:
                rows.append(measure(name, zoo, calibration, test))
            except (torch.fx.proxy.TraceError, ValueError) as failure:  # untraceable, or fixed-qparams ops
                rows.append({"model": name, "skipped": str(failure).splitlines()[0][:120]})
            print(json.dumps(rows[-1]), flush=True)
    data = {"command": "benchmarks/zoo_floor.py" + (f" --only {args.only}" if args.only else ""),
            "date": time.strftime("%Y-%m-%d %H:%M"), "seconds": round(time.monotonic() - started), "rows": rows}
    FLOOR_RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    if METHODS_RESULTS.exists():
        write_results_section(render_methods(json.loads(METHODS_RESULTS.read_text())))


if __name__ == "__main__":
    main()

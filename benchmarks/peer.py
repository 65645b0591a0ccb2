#!/usr/bin/python3
"""The runtime benchmark, the peer's side: PyTorch's own Python quantization on the models and
data that torch_models (versatil's side) trained and wrote to OUT_DIR.

FX graph mode needs an nn.Module, so each architecture has an nn.Module twin below with the same
module paths; the trained weights are copied from the TorchScript file's state dict, and the twin
must reproduce the C++ float logits before anything is quantized.

  static:  prepare_fx(model, get_default_qconfig_mapping(engine), example) + calibrate + convert_fx
  dynamic: quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
  engines: 'onednn' (versatil's x86_inductor lowers to it), 'qnnpack' (versatil's xnnpack)

Every measurement uses one thread and the same method as versatil's measure helpers. Quantize
time is cold, as torch_models times versatil's: the first quantization of a fresh Python process
(torch imported, the model and data loaded first), the lowest of COLD_PROCESSES processes; the
warm time (the lowest of QUANTIZE_REPEATS later quantizations in that process) beside it.

  /usr/bin/python3 peer.py OUT_DIR      writes OUT_DIR/peer.json
  /usr/bin/python3 peer.py --time-quantization OUT_DIR MODEL ENGINE MODE
                                        one fresh process's cold and warm seconds, as JSON
"""
import copy
import io
import json
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping, quantize_dynamic
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

CALIBRATION_BATCH = 32  # as torch_models.cpp
EVALUATION_BATCH = 250
QUANTIZE_REPEATS = 5  # the lowest of 5, as torch_models.cpp: what the VM adds is not the work
COLD_PROCESSES = 3  # as torch_models.cpp's cold_processes
ENGINES = {"x86_inductor": "onednn", "xnnpack": "qnnpack"}

warnings.filterwarnings("ignore")  # 1.13's FX quantization warns about deprecated observers


# ---- the nn.Module twins of include/versatil/libtorch/demo/models.hpp ------------------------------------

class AddReLU(nn.Module):
    def forward(self, x, y):
        return torch.relu(x + y)


class ResidualBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)
        self.add_relu = AddReLU()

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.add_relu(out, self.downsample(x) if self.downsample is not None else x)


class ResNetCnn(nn.Module):
    def __init__(self, blocks=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = nn.Sequential(*[ResidualBlock(16, 16) for _ in range(blocks)])
        self.layer2 = nn.Sequential(*[ResidualBlock(16 if b == 0 else 32, 32, 2 if b == 0 else 1) for b in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.layer2(self.layer1(self.stem(x))))))


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()

    def forward(self, x):
        return self.relu2(self.bn2(self.pointwise(self.relu1(self.bn1(self.depthwise(x))))))


class MobileNetCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()),
            DepthwiseSeparable(16, 32, 2), DepthwiseSeparable(32, 64, 2), DepthwiseSeparable(64, 64))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.features(x))))


class Mlp(nn.Module):
    def __init__(self, hidden=256, depth=3):
        super().__init__()
        self.flatten = nn.Flatten()
        layers = []
        for layer in range(depth):
            layers += [nn.Linear(28 * 28 if layer == 0 else hidden, hidden), nn.ReLU()]
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(self.layers(self.flatten(x)))


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.out_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        n, t = x.size(0), x.size(1)
        q = self.q_proj(x).reshape(n, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(n, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(n, t, self.heads, self.head_dim).transpose(1, 2)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, -1)
        context = torch.matmul(weights, v).transpose(1, 2).reshape(n, t, self.dim)
        return self.out_proj(context)


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, feedforward):
        super().__init__()
        self.self_attn = SelfAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.linear1 = nn.Linear(dim, feedforward)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(feedforward, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.linear2(self.relu(self.linear1(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Linear(28, dim)
        self.position = nn.Parameter(torch.zeros(28, dim))
        self.encoder = nn.Sequential(*[EncoderBlock(dim, heads, 2 * dim) for _ in range(layers)])
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        h = self.embed(torch.flatten(x, 1, 2)) + self.position
        return self.head(torch.mean(self.encoder(h), 1))


TWINS = {"mlp": Mlp, "transformer_encoder": TransformerEncoder, "resnet_cnn": ResNetCnn,
         "mobilenet_cnn": MobileNetCnn}


def twin_of(path, make):
    """The nn.Module twin with the weights of the TorchScript model at `path`."""
    scripted = torch.jit.load(str(path))
    state = {name: value for name, value in scripted.state_dict().items() if value is not None}
    model = make()
    model.load_state_dict(state, strict=True)
    return model.eval(), scripted.eval()


# ---- measurements, the same method as include/versatil/libtorch/torchscript/metrics.hpp --------------------------

LATENCY_ROUNDS = 3  # as torch_models.cpp: the quietest of 3 medians on a shared machine


def latency_ms(model, x):
    return min(median_latency_ms(model, x) for _ in range(LATENCY_ROUNDS))


def median_latency_ms(model, x, warmup=5, min_runs=20, min_seconds=0.25):
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        times = []
        begin = time.perf_counter()
        while len(times) < min_runs or time.perf_counter() - begin < min_seconds:
            start = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - start) * 1e3)
            if len(times) >= 2000:
                break
    return sorted(times)[len(times) // 2]


def sqnr_db(reference, actual):
    reference, actual = reference.double(), actual.double()
    noise = (reference - actual).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(reference.pow(2).sum().item() / noise)


def run_batches(model, batches):
    with torch.no_grad():
        return torch.cat([model(b).float() for b in batches])


def serialized_bytes(scripted):
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.tell()


def frozen_trace(model, example):
    with torch.no_grad():
        return torch.jit.freeze(torch.jit.trace(model, example).eval())


def fastest(variants, x):
    """(ms, name) of the fastest of {name: model} on x: the peer is timed in whichever form suits it."""
    return min((latency_ms(model, x), name) for name, model in variants.items())


def quantize_static(model, engine, calibration):
    prepared = prepare_fx(model, get_default_qconfig_mapping(engine), example_inputs=(calibration[0],))
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    return convert_fx(prepared)


def static_phases(model, engine, calibration):
    """One more static quantization, timed step by step (as torch_models' phase table)."""
    fresh = copy.deepcopy(model)
    start = time.perf_counter()
    prepared = prepare_fx(fresh, get_default_qconfig_mapping(engine), example_inputs=(calibration[0],))
    prepare_s = time.perf_counter() - start
    start = time.perf_counter()
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    calibrate_s = time.perf_counter() - start
    start = time.perf_counter()
    convert_fx(prepared)
    return {"prepare": prepare_s, "calibrate": calibrate_s, "convert": time.perf_counter() - start}


def quantize_dynamic_linear(model):
    return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)


def timed_quantize(model, quantize):
    """Lowest seconds over QUANTIZE_REPEATS of `quantize` on a fresh copy (the copy is not timed)."""
    seconds, result = [], None
    for _ in range(QUANTIZE_REPEATS):
        fresh = copy.deepcopy(model)
        start = time.perf_counter()
        result = quantize(fresh)
        seconds.append(time.perf_counter() - start)
    return min(seconds), result


def quantizer(mode, engine, calibration):
    if mode == "static":
        return lambda m: quantize_static(m, engine, calibration)
    return quantize_dynamic_linear


def load_calibration(out):
    return list(torch.load(out / "data.pt")["calib"].split(CALIBRATION_BATCH))


def time_quantization(out, name, engine, mode):
    """The child's side: this fresh process's first quantization (cold), then the lowest of QUANTIZE_REPEATS."""
    torch.set_num_threads(1)
    torch.backends.quantized.engine = engine
    model, _ = twin_of(out / name / "model.pt", TWINS[name])
    quantize = quantizer(mode, engine, load_calibration(out))
    fresh = copy.deepcopy(model)
    start = time.perf_counter()
    quantize(fresh)
    cold = time.perf_counter() - start
    warm, _ = timed_quantize(model, quantize)
    print(json.dumps({"cold_seconds": cold, "warm_seconds": warm}))


def cold_and_warm(out, name, engine, mode):
    """(cold, warm) seconds: the lowest of COLD_PROCESSES fresh processes (time_quantization) each."""
    command = [sys.executable, __file__, "--time-quantization", str(out), name, engine, mode]
    timings = [json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
               for _ in range(COLD_PROCESSES)]
    return min(t["cold_seconds"] for t in timings), min(t["warm_seconds"] for t in timings)


def main():
    if sys.argv[1] == "--time-quantization":
        return time_quantization(Path(sys.argv[2]), *sys.argv[3:6])
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    data = torch.load(out / "data.pt")
    calibration = list(data["calib"].split(CALIBRATION_BATCH))
    evaluation = list(data["test"].split(EVALUATION_BATCH))
    labels = data["test_labels"]
    results = {"torch_version": torch.__version__, "threads": torch.get_num_threads(), "models": {}}

    for name, make in TWINS.items():
        model, scripted = twin_of(out / name / "model.pt", make)
        reference = torch.load(out / name / "reference.pt")
        float_out = run_batches(model, evaluation)
        twin_diff = (float_out - reference).abs().max().item()
        scripted_diff = (run_batches(scripted, evaluation) - reference).abs().max().item()
        entry = {"twin_max_abs_diff": twin_diff, "scripted_in_python_max_abs_diff": scripted_diff,
                 "float_top1": (reference.argmax(1) == labels).double().mean().item(), "runs": []}
        print(f"{name:20s} twin vs C++ float logits: max abs diff {twin_diff:.2e}", flush=True)
        if not twin_diff < 1e-3:
            raise SystemExit(f"{name}: the nn.Module twin does not reproduce the C++ model ({twin_diff})")

        float_variants = {"eager": model, "traced+frozen": frozen_trace(model, evaluation[0][:1])}
        float_latency = {b: fastest(float_variants, data["test"][:b].contiguous()) for b in (1, 8)}
        for backend, engine in ENGINES.items():
            torch.backends.quantized.engine = engine
            for mode in ("static", "dynamic"):
                run = {"backend": backend, "engine": engine, "mode": mode}
                try:
                    quantized = quantizer(mode, engine, calibration)(copy.deepcopy(model))
                    if mode == "static":
                        run["method"] = f"prepare_fx/convert_fx, get_default_qconfig_mapping('{engine}')"
                        run["phases"] = static_phases(model, engine, calibration)
                    else:
                        run["method"] = "quantize_dynamic({nn.Linear}, qint8)"
                    seconds, run["quantize_seconds_warm"] = cold_and_warm(out, name, engine, mode)
                    run["quantize_seconds"] = seconds
                    output = run_batches(quantized, evaluation)
                    run["sqnr_db"] = sqnr_db(reference, output)
                    run["max_abs_diff"] = (reference - output).abs().max().item()
                    run["quantized_top1"] = (output.argmax(1) == labels).double().mean().item()
                    traced = frozen_trace(quantized, evaluation[0][:1])
                    run["quantized_bytes"] = serialized_bytes(traced)
                    kinds = [node.kind() for node in traced.graph.nodes()]
                    run["quantize_nodes"] = kinds.count("aten::quantize_per_tensor")
                    run["dequantize_nodes"] = kinds.count("aten::dequantize")
                    variants = {"eager": quantized, "traced+frozen": traced}
                    for b in (1, 8):
                        x = data["test"][:b].contiguous()
                        run[f"float_ms_b{b}"], run[f"float_form_b{b}"] = float_latency[b]
                        run[f"quantized_ms_b{b}"], run[f"quantized_form_b{b}"] = fastest(variants, x)
                    # versatil's lowered model in this same harness: the latency comparison without the
                    # difference between a C++ and a Python timing loop.
                    ours = out / name / f"versatil_{backend}_{mode}.pt"
                    if ours.exists():
                        lowered = torch.jit.load(str(ours)).eval()
                        for b in (1, 8):
                            run[f"versatil_in_python_ms_b{b}"] = latency_ms(lowered, data["test"][:b].contiguous())
                    print(f"  {backend:13s} {mode:8s} SQNR {run['sqnr_db']:6.2f} dB  top-1 "
                          f"{100 * run['quantized_top1']:.2f} %  quantize {seconds:.3f} s cold, "
                          f"{run['quantize_seconds_warm']:.3f} warm  b1 "
                          f"{run['float_ms_b1']:.3f} -> {run['quantized_ms_b1']:.3f} ms "
                          f"({run['quantized_form_b1']})", flush=True)
                except Exception as failure:  # recorded: a failure is a result too
                    run["error"] = f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
                    print(f"  {backend:13s} {mode:8s} FAILED: {run['error']}", flush=True)
                entry["runs"].append(run)
        results["models"][name] = entry

    torch.backends.quantized.engine = "onednn"
    results["scaling"] = []
    calibration_scaling = calibration
    for path in sorted((out / "scaling").glob("mlp_*.pt"), key=lambda p: int(p.stem.split("_")[1])):
        linears = int(path.stem.split("_")[1])
        model, _ = twin_of(path, lambda: Mlp(128, linears - 1))
        seconds, _ = timed_quantize(model, lambda m: quantize_static(m, "onednn", calibration_scaling))
        results["scaling"].append({"linears": linears, "quantize_seconds": seconds})
        print(f"scaling: {linears:2d} linear layers quantize in {seconds:.3f} s", flush=True)

    (out / "peer.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

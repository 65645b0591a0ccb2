#!/usr/bin/env python3
"""versatil-quantize end to end: the embedded default, real files, and every bad input the
CLI must refuse with exit status 2, a message naming the problem, no partial output and the
input files unchanged; exit 1 for an engine that cannot run the converted model and for an
unforeseen error (one line, the whole message with --verbose); --version.
Usage: check_cli.py VERSATIL_QUANTIZE EXPORT_PROGRAM VERSION [runs|refusals]
(VERSION: meson's project version, which --version must print; no part runs both)"""
import hashlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

cli, export, project_version = sys.argv[1:4]
failures = []


def fm_default_calibration(report):
    return json.loads(report.read_text())["targets"][0]["calibration"]


def run(*args, expect_status=0, expect_text=None):
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    label = " ".join(map(str, args)) or "(no arguments)"
    if result.returncode != expect_status:
        failures.append(f"{label}: exit {result.returncode}, expected {expect_status}\n{output}")
    elif expect_text and expect_text not in output:
        failures.append(f"{label}: output lacks {expect_text!r}\n{output}")
    else:
        print(f"ok: {label}")
    return output


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# An encoder layer as versatil's demo transformer_encoder(seed, 32, 2, 1) builds it (post-norm,
# q/k/v/out projections), in Python: the module paths match (encoder.0.self_attn.q_proj).
ENCODER_SOURCE = """
class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))
    def forward(self, x):
        n, t = x.size(0), x.size(1)
        q = self.q_proj(x).reshape([n, t, self.heads, self.head_dim]).transpose(1, 2)
        k = self.k_proj(x).reshape([n, t, self.heads, self.head_dim]).transpose(1, 2)
        v = self.v_proj(x).reshape([n, t, self.heads, self.head_dim]).transpose(1, 2)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.head_dim ** -0.5, -1)
        return self.out_proj(torch.matmul(weights, v).transpose(1, 2).reshape([n, t, self.heads * self.head_dim]))
class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.self_attn, self.norm1 = SelfAttention(dim, 2), nn.LayerNorm(dim)
        self.linear1, self.relu, self.linear2 = nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)
        self.norm2 = nn.LayerNorm(dim)
    def forward(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.linear2(self.relu(self.linear1(x))))
class Encoder(nn.Module):
    def __init__(self, dim: int = 32):
        super().__init__()
        self.embed, self.encoder, self.head = nn.Linear(28, dim), nn.Sequential(Block(dim)), nn.Linear(dim, 10)
        self.position = nn.Parameter(torch.randn(28, dim) * 0.02)
    def forward(self, x):
        return self.head(torch.mean(self.encoder(self.embed(torch.flatten(x, 1, 2)) + self.position), [1]))
"""
NO_SINGLE_SOURCE = """
class NoSingle(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(28 * 28, 10)
    def forward(self, x):
        if x.size(0) == 1:
            raise RuntimeError("this model takes batches of two or more")
        return self.fc(x.flatten(1))
"""


def check_torch_save_data(d, model, data):
    """A data file written by torch.save (a dict of tensors) gives the report the TorchScript data
    file of the same tensors gives; a misnamed tensor, a hostile pickle and a pickled model are
    refused with exit 2 and a message saying what to do."""
    script = ("import os, sys, torch\n"
              "d, scripted = sys.argv[1], torch.jit.load(sys.argv[2])\n"
              "tensors = {name: t for name, t in scripted.named_buffers()}\n"
              "torch.save(tensors, d + '/saved_data.pt')\n"
              "torch.save({'calibration': tensors['calib']}, d + '/misnamed_data.pt')\n"
              "class Hostile:\n"
              "    def __reduce__(self): return (os.system, ('touch ' + d + '/hostile_ran',))\n"
              "torch.save({'calib': Hostile()}, d + '/hostile_data.pt')\n"
              "torch.save(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10)),\n"
              "           d + '/pickled_model.pt')\n")
    (d / "make_saved.py").write_text(script)
    subprocess.run(["/usr/bin/python3", d / "make_saved.py", d, data], check=True, timeout=300)
    reports = {}
    for form, file in (("torch.jit.save", data), ("torch.save", d / "saved_data.pt")):
        run("--model", model, "--data", file, "--target", "=xnnpack", "--no-per-layer", "--report", d / "form.json")
        reports[form] = json.loads((d / "form.json").read_text())
    same = ("quantized_ops", "sqnr_db", "max_abs_diff", "evaluation_samples", "float_accuracy", "quantized_accuracy")
    if [reports["torch.save"].get(k) for k in same] != [reports["torch.jit.save"].get(k) for k in same]:
        failures.append(f"torch.save data gave another report than the same tensors as TorchScript: "
                        f"{[(k, reports['torch.save'].get(k), reports['torch.jit.save'].get(k)) for k in same]}")
    run("--model", model, "--data", d / "misnamed_data.pt", "--no-per-layer", expect_status=2,
        expect_text="holds 'calibration', a name versatil does not read. It holds 'calibration' [")
    run("--model", model, "--data", d / "hostile_data.pt", "--no-per-layer", expect_status=2,
        expect_text="is refused before it is read: it calls posix.system")
    if (d / "hostile_ran").exists():
        failures.append("the hostile pickle's command ran")
    run("--model", d / "pickled_model.pt", "--data", data, "--no-per-layer", expect_status=2,
        expect_text="not as TorchScript: script it with torch.jit.script")


def check_report_provenance(d, model, data):
    """The JSON report says what it describes (model path, command line, versatil's and LibTorch's
    versions, the engine), and the saved line says which engine Python must set to run the model."""
    args = ["--model", model, "--data", data, "--target", "=xnnpack", "--no-per-layer", "--report", d / "prov.json",
            "--out", d / "prov.pt"]
    out = run(*args, expect_text=f"saved {d / 'prov.pt'} (to run it in Python, set "
                                 f"torch.backends.quantized.engine = 'qnnpack' first)")
    report = json.loads((d / "prov.json").read_text())
    expected = {"model_path": str(model), "command_line": [cli, *map(str, args)], "versatil_version": project_version,
                "engine": "qnnpack"}
    if any(report.get(k) != v for k, v in expected.items()) or \
            not re.fullmatch(r"\d+\.\d+\.\d+", str(report.get("libtorch_version"))):
        failures.append(f"report provenance: {[(k, report.get(k)) for k in [*expected, 'libtorch_version']]}")
    # The line's advice works: Python's torch runs the saved model once the engine is set.
    check = subprocess.run(["/usr/bin/python3", "-c", "import sys, torch\n"
                            "torch.backends.quantized.engine = 'qnnpack'\n"
                            "m, x = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2]).calib[:2]\n"
                            "print(m(x).shape)", d / "prov.pt", data], capture_output=True, text=True, timeout=300)
    if check.returncode != 0:
        failures.append(f"the saved model does not run in Python with the engine the CLI named:\n{check.stderr}")


def check_traced_like_scripted(d):
    """A model from torch.jit.trace (its convolutions are aten::_convolution, its modules called
    with every argument spelled out) is counted and analysed as its torch.jit.script copy is: the
    same op counts, the same per-layer rows with the same figures (one quantization, one data)."""
    script = ("import sys, torch\nfrom torch import nn\n"
              "class Block(nn.Module):\n"
              "    def __init__(self):\n"
              "        super().__init__()\n"
              "        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)\n"
              "    def forward(self, x): return torch.relu(self.bn(self.conv(x)))\n"
              "class CNN(nn.Module):\n"
              "    def __init__(self):\n"
              "        super().__init__()\n"
              "        self.stem, self.b1, self.b2 = nn.Conv2d(1, 8, 3, padding=1), Block(), Block()\n"
              "        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)\n"
              "    def forward(self, x):\n"
              "        return self.fc(torch.flatten(self.pool(self.b2(self.b1(torch.relu(self.stem(x))))), 1))\n"
              "torch.manual_seed(0)\n"
              "m, x = CNN().eval(), torch.randn(16, 1, 28, 28)\n"
              "d = sys.argv[1]\n"
              "torch.jit.save(torch.jit.trace(m, x[:2]), d + '/traced.pt')\n"
              "torch.jit.save(torch.jit.script(m), d + '/scripted.pt')\n"
              "torch.save({'calib': x, 'test': torch.randn(8, 1, 28, 28)}, d + '/cnn_data.pt')\n")
    (d / "make_traced.py").write_text(script)
    subprocess.run(["/usr/bin/python3", d / "make_traced.py", d], check=True, timeout=300)
    seen = {}
    for form in ("traced", "scripted"):
        run("--model", d / f"{form}.pt", "--data", d / "cnn_data.pt", "--target", "=xnnpack", "--report",
            d / f"{form}.json")
        report = json.loads((d / f"{form}.json").read_text())
        seen[form] = (report["quantized_ops"], report["quantizable_ops"], report["sqnr_db"],
                      sorted((layer["name"], layer["sqnr_db"]) for layer in report["per_layer"]))
    # Four layers (stem, b1.conv, b2.conv, fc), all quantized: counted by hand from the model above.
    if seen["traced"] != seen["scripted"] or seen["scripted"][:2] != (4, 4) or len(seen["scripted"][3]) != 4:
        failures.append(f"a traced model is reported otherwise than its scripted copy: {seen}")


def check_float_layers_named(d):
    """Every conv/linear layer left float is named with why (text and JSON), and a warning says when
    most of the model stays float: a layer called in a loop (which LibTorch's observer insertion does
    not enter, and used to crash on), and a layer the user excluded."""
    (d / "make_float.py").write_text(
        "import sys, torch\nfrom torch import nn\n"
        "class Looped(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.stem, self.body, self.head = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)\n"
        "    def forward(self, x):\n"
        "        x = torch.relu(self.stem(x))\n"
        "        for _ in range(3):\n"
        "            x = torch.relu(self.body(x))\n"
        "        return self.head(x)\n"
        "class Plain(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b, self.c = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)\n"
        "    def forward(self, x): return self.c(torch.relu(self.b(torch.relu(self.a(x)))))\n"
        "torch.manual_seed(0)\n"
        "torch.jit.save(torch.jit.script(Looped().eval()), sys.argv[1] + '/looped.pt')\n"
        "torch.jit.save(torch.jit.script(Plain().eval()), sys.argv[1] + '/plain.pt')\n"
        "torch.save({'calib': torch.randn(32, 16), 'test': torch.randn(16, 16)}, sys.argv[1] + '/vec_data.pt')\n")
    subprocess.run(["/usr/bin/python3", d / "make_float.py", d], check=True, timeout=300)
    # Counted by hand from the models: the loop runs body 3 times, so 5 linear calls of which
    # stem and head are quantized (2 of 5: most stay float); Plain quantizes a and c (2 of 3).
    cases = [("looped", [], "body", "prim::Loop", (2, 5), True),
             ("plain", ["--target", "b=none"], "b", "excluded by the targets", (2, 3), False)]
    for name, extra, layer, reason, counts, warned in cases:
        table = run("--model", d / f"{name}.pt", "--data", d / "vec_data.pt", "--target", "=xnnpack", *extra,
                    "--no-per-layer", "--report", d / f"{name}.json", expect_text=f"float (aten::linear): ")
        if not (d / f"{name}.json").exists():
            continue
        report = json.loads((d / f"{name}.json").read_text())
        named = [(f["name"], reason in f["reason"]) for f in report["float_layers"]]
        has_warning = any("most of the model stays float" in w for w in report["warnings"])
        if named != [(layer, True)] or (report["quantized_ops"], report["quantizable_ops"]) != counts or \
                has_warning != warned or ("warning: most of the model stays float" in table) != warned:
            failures.append(f"{name}: float layers {report['float_layers']}, ops {report['quantized_ops']} of "
                            f"{report['quantizable_ops']}, warnings {report['warnings']}\n{table}")


def check_libtorch_warnings_folded(d):
    """LibTorch's repeated warnings are folded into the report: a model whose forward resizes a
    one-element out= tensor makes LibTorch warn on every call (calibration, evaluation, timing),
    and each distinct text comes once, as "LibTorch warned N times: ...", never as a flood."""
    (d / "make_warns.py").write_text(
        "import sys, torch\nfrom torch import nn\n"
        "class Warns(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(16, 4)\n"
        "    def forward(self, x):\n"
        "        y = torch.empty([1])\n"
        "        torch.abs(self.fc(x), out=y)\n"
        "        return y\n"
        "torch.jit.save(torch.jit.script(Warns().eval()), sys.argv[1] + '/warns.pt')\n")
    subprocess.run(["/usr/bin/python3", d / "make_warns.py", d], check=True, timeout=300)
    output = run("--model", d / "warns.pt", "--data", d / "vec_data.pt", "--target", "=xnnpack", "--no-per-layer",
                 "--report", d / "warns.json", expect_text="LibTorch warned ")
    if not (d / "warns.json").exists():
        return
    warnings = json.loads((d / "warns.json").read_text())["libtorch_warnings"]
    resized = [w for w in warnings if "was resized" in w["text"]]
    flooded = [line for line in output.splitlines() if "was resized" in line and not line.startswith("LibTorch warned")]
    # Calibration alone runs the forward on the 32 calibration samples, so the model warns more
    # than once; every text is listed once.
    if not resized or sum(w["count"] for w in resized) < 2 or flooded or \
            len({w["text"] for w in warnings}) != len(warnings):
        failures.append(f"LibTorch's warnings not folded: {warnings}, {len(flooded)} raw lines")


def check_version():
    """--version: versatil's version as meson.build has it, LibTorch's, and the engines the two
    backends lower to (x86_inductor: onednn, xnnpack: qnnpack)."""
    version = run("--version", expect_text=f"versatil {project_version}\nLibTorch ")
    engines = re.search(r"^LibTorch \d+\.\d+\.\d+\nquantized engines:(.*)$", version, re.M)
    if not engines or not {"onednn", "qnnpack"} <= set(engines.group(1).split()):
        failures.append(f"--version lacks the LibTorch version or the onednn and qnnpack engines:\n{version}")


def fashion_mnist_files(d):
    """A real model and data file (Fashion-MNIST, trained by the export example) in d."""
    subprocess.run([export, d, "--steps", "150"], check=True, timeout=600)
    return d / "model.pt", d / "data.pt"


def check_runs(d):
    """Runs that succeed: the embedded default, the Fashion-MNIST model with each kind of option,
    accuracy targets, --per-layer-samples, QAT's --freeze-observers-after."""
    # The embedded default: table on stdout, JSON report and model written.
    out = run("--report", d / "r.json", "--out", d / "q.pt", expect_text="output SQNR")
    report = json.loads((d / "r.json").read_text())
    for key in ("targets", "quantized_ops", "quantizable_ops", "max_abs_diff", "mean_abs_diff", "sqnr_db", "per_layer",
                "float_bytes", "quantized_bytes", "compression_ratio", "float_ms", "quantized_ms", "speedup",
                "quantize_seconds", "batch_size", "threads"):
        if key not in report:
            failures.append(f"report lacks {key}")
    # The embedded default (small_cnn_mlp, seeded, x86_inductor, one thread) measured 40.2 dB with
    # its 2 convolutions and first linear quantized and its last linear, whose output the model
    # returns, on int8 input and weights with a float output (float_model_outputs.hpp); the floor
    # is 1 dB under it, as in tests/torch/pipeline.cpp (oneDNN held to AVX2 moved the figure by
    # less than 0.35 dB). The figure is the library's own, so this guards the CLI's path against a
    # change (an option dropped on the way, a layer left float); tests/torch/metrics.cpp checks the
    # SQNR computation on hand-worked tensors.
    kept_float = [a["module"] for a in report.get("adjustments", [])
                  if "output the model returns kept in float" in a["change"]]
    if (report["quantized_ops"], report["quantizable_ops"]) != (3, 4) or kept_float != ["classifier.fc2"] \
            or report["sqnr_db"] is None or report["sqnr_db"] < 39.2:
        failures.append(f"default run quantized poorly: {report['quantized_ops']}/{report['quantizable_ops']} ops, "
                        f"float outputs {kept_float}, {report['sqnr_db']} dB (measured 40.2 dB, 3/4 ops, "
                        f"classifier.fc2's output float)")
    if not (d / "q.pt").is_file():
        failures.append("--out wrote no model")

    run("--target", "features=xnnpack", "--target", "classifier=xnnpack:per_tensor", "--target",
        "classifier.fc2=none", "--no-per-layer", expect_text="classifier.fc2")
    run("--target", "=xnnpack:dynamic", "--batch", "4", "--threads", "2", "--no-per-layer",
        expect_text="batch 4, 2 threads")

    model, data = fashion_mnist_files(d)
    out = run("--model", model, "--data", data, "--target", "=xnnpack", "--report", d / "fm.json", "--out",
              d / "fm_q.pt", "--no-per-layer", expect_text="top-1")
    # QAT: the qat option trains on the data file's train_inputs / train_labels first.
    run("--model", model, "--data", data, "--target", "=xnnpack:qat", "--steps", "40", "--lr", "5e-4",
        "--report", d / "qat.json", "--no-per-layer", expect_text="QAT training")
    qat = json.loads((d / "qat.json").read_text())
    if qat["qat_steps"] != 40 or qat["quantized_ops"] != qat["quantizable_ops"]:
        failures.append(f"QAT run: {qat['qat_steps']} steps, {qat['quantized_ops']}/{qat['quantizable_ops']} ops")
    # The accuracy steps: the options reach the report, with what each step did.
    run("--model", model, "--data", data, "--target", "=xnnpack:per_tensor,cle,bias_correction", "--report",
        d / "steps.json", "--no-per-layer", expect_text="xnnpack:per_tensor,cle,bias_correction")
    steps = json.loads((d / "steps.json").read_text())
    changes = " | ".join(a["change"] for a in steps["adjustments"])
    if steps["targets"][0]["options"] != "per_tensor,cle,bias_correction" \
            or "cle: weight ranges equalized" not in changes or "bias correction: " not in changes:
        failures.append(f"cle,bias_correction run: options {steps['targets'][0]['options']!r}, changes: {changes}")
    # AdaRound: the report says it was used, and each layer's output error before and after.
    run("--model", model, "--data", data, "--target", "=xnnpack:adaround", "--report", d / "adaround.json",
        "--no-per-layer", expect_text="xnnpack:adaround")
    rounded = [a["change"] for a in json.loads((d / "adaround.json").read_text())["adjustments"]]
    per_layer = [c for c in rounded if c.startswith("adaround: layer output error on the calibration samples")]
    if not any(" layer(s) rounded on " in c for c in rounded) or not per_layer:
        failures.append(f"adaround run: changes {rounded}")
    # A calibration method: named in the report, text and JSON.
    run("--model", model, "--data", data, "--target", "=xnnpack:calibration=entropy", "--report",
        d / "entropy.json", "--no-per-layer", expect_text="(calibration: entropy)")
    entropy = json.loads((d / "entropy.json").read_text())
    if entropy["targets"][0]["calibration"] != "entropy" \
            or fm_default_calibration(d / "fm.json") != "histogram (default)":
        failures.append(f"calibration run: {entropy['targets'][0]}")
    fm = json.loads((d / "fm.json").read_text())
    if fm["float_accuracy"] is None or fm["quantized_accuracy"] is None:
        failures.append("accuracy missing with labelled test data")
    elif fm["float_accuracy"] - fm["quantized_accuracy"] > 0.01:
        failures.append(f"xnnpack lost more than 1 point: {fm['float_accuracy']} -> {fm['quantized_accuracy']}")
    if fm["quantized_ops"] != fm["quantizable_ops"] or fm["quantizable_ops"] == 0:
        failures.append(f"Fashion-MNIST run left ops in float: {fm['quantized_ops']}/{fm['quantizable_ops']}")

    # An accuracy target (embedded default, x86_inductor): one already met keeps nothing in float
    # and says so; one no step can meet exits 2 naming it and writes nothing.
    run("--min-sqnr", "0", "--report", d / "target.json", expect_text="accuracy target (SQNR >= 0.00 dB)")
    target = json.loads((d / "target.json").read_text())
    if target["accuracy_target"] != "SQNR >= 0.00 dB" or target["kept_in_float"] != [] \
            or [step["met"] for step in target["target_steps"]] != [True]:
        failures.append(f"a met target's report: {target['accuracy_target']}, {target['target_steps']}")
    run("--min-sqnr", "200", "--out", d / "unmet.pt", "--report", d / "unmet.json", expect_status=2,
        expect_text="SQNR >= 200.00 dB is not met even with ")
    if (d / "unmet.pt").exists() or (d / "unmet.json").exists():
        failures.append("an unmet accuracy target left output behind")

    # --per-layer-samples reaches the analysis: the report measures every layer on that many samples
    # (the default is at least 128).
    run("--per-layer-samples", "8", "--report", d / "per_layer8.json", expect_text="worst first; 8 samples)")
    per_layer8 = json.loads((d / "per_layer8.json").read_text())
    if per_layer8["per_layer_samples"] != 8 or len(per_layer8["per_layer"]) != 4 \
            or report["per_layer_samples"] < 128:
        failures.append(f"--per-layer-samples 8: {per_layer8['per_layer_samples']} samples, "
                        f"{len(per_layer8['per_layer'])} rows (default run: {report['per_layer_samples']})")
    # --freeze-observers-after changes what QAT converts: the embedded default's QAT run is
    # deterministic (two runs give the same SQNR), and ranges frozen after the first step give another.
    qat_runs = {}
    for name, extra in (("qat_a", []), ("qat_b", []), ("qat_frozen", ["--freeze-observers-after", "1"])):
        run("--target", "=x86_inductor:qat", "--steps", "20", "--no-per-layer", "--report", d / f"{name}.json", *extra,
            expect_text="QAT training")
        qat_runs[name] = json.loads((d / f"{name}.json").read_text())["sqnr_db"]
    if not qat_runs["qat_a"] == qat_runs["qat_b"] != qat_runs["qat_frozen"]:
        failures.append(f"--freeze-observers-after 1 made no difference, or QAT is not repeatable: {qat_runs}")
    # A top-1 target needs labelled held-out data, which the embedded default has not.
    run("--max-accuracy-drop", "1", "--no-per-layer", expect_status=2,
        expect_text="error (no_evaluation_data): a maximum top-1 drop is measured on labelled held-out data")
    # --data without --model, and an accuracy target across processes: refused before any work.
    run("--data", d / "absent.data.pt", expect_status=2, expect_text="--data needs --model")
    run("--min-sqnr", "0", "--WORLD_SIZE", "2", "--RANK", "0", "--MASTER_ADDR", "127.0.0.1", "--MASTER_PORT", "1",
        expect_status=2, expect_text="an accuracy target quantizes again per step")



def check_refusals(d):
    """Bad input: exit 2, a message naming the problem, nothing written, inputs untouched; exit 1
    for an engine that cannot run the converted model and for an unforeseen error."""
    model, data = fashion_mnist_files(d)
    model_digest, data_digest = digest(model), digest(data)
    run("--target", "features=tensorrt", expect_status=2, expect_text="unknown backend 'tensorrt'")
    run("--target", "features=xnnpack:reduce_range", expect_status=2, expect_text="unknown option 'reduce_range'")
    run("--target", "features", expect_status=2, expect_text="is not PATH=BACKEND")
    run("--target", "=xnnpack:calibration=kl", expect_status=2,
        expect_text="unknown calibration method 'kl' in 'xnnpack:calibration=kl' (methods: minmax, moving_minmax, "
                    "histogram, percentile, entropy, auto, output)")
    run("--target", "=x86_inductor:qat,calibration=auto", expect_status=2,
        expect_text="options 'calibration' and 'qat' do not combine")
    run("--target", "=xnnpack:dynamic,bias_correction", expect_status=2,
        expect_text="options 'bias_correction' and 'dynamic' do not combine")
    run("--target", "=x86_inductor:gptq,adaround", expect_status=2,
        expect_text="options 'adaround' and 'gptq' do not combine")
    run("--target", "features=xnnpack", "--target", "features.0=xnnpack", expect_status=2, expect_text="overlap")
    run("--target", "features..0=xnnpack", expect_status=2, expect_text="invalid module path")
    run("--target", "features.9=xnnpack", expect_status=2, expect_text="'features' has no child '9'")
    run("--target", "features=xnnpack", "--target", "classifier=x86_inductor", expect_status=2,
        expect_text="different quantized engines")
    run("--model", d / "absent.pt", expect_status=2, expect_text="does not exist")
    (d / "corrupt.pt").write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    run("--model", d / "corrupt.pt", "--data", data, expect_status=2, expect_text="not a readable TorchScript archive")
    (d / "corrupt_data.pt").write_bytes(b"\x00garbage")
    run("--model", model, "--data", d / "corrupt_data.pt", expect_status=2,
        expect_text="not a readable TorchScript archive")
    # The fuzzer's finding: an intact archive whose pickle names memo entry 1.6 billion (LibTorch
    # would allocate 26 GB for it), as model and as data; the file is read, never changed.
    lying = Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "model_file" / "memo_index_26gb.pt"
    before = digest(lying)
    run("--model", lying, "--data", data, expect_status=2, expect_text="memo index")
    run("--model", model, "--data", lying, expect_status=2, expect_text="memo index")
    if digest(lying) != before:
        failures.append(f"{lying} changed")
    # Source LibTorch's compiler crashes on: the CLI reports it and exits 2, it does not crash.
    run("--model", lying.with_name("untyped_class_attribute.pt"), "--data", data, expect_status=2,
        expect_text="is not a valid TorchScript file: LibTorch c")
    run("--model", model, expect_status=2, expect_text="no data")
    run("--model", model, "--data", data, "--out", d / "no-such-dir" / "q.pt", "--no-per-layer", expect_status=2,
        expect_text="does not exist")
    run("--model", model, "--data", data, "--out", model, "--no-per-layer", expect_status=2,
        expect_text="is the input model")
    run("--model", model, "--data", data, "--target", "=xnnpack", "--target", "=x86_inductor", expect_status=2,
        expect_text="overlap")
    run("--model", model, "--data", data, "--target", "=cortex_m", "--export", model, "--no-per-layer",
        expect_status=2, expect_text="is the input model")
    # A top-1 target on labelled data: one already met (a drop of up to 100 points) keeps nothing
    # in float; one no step can meet (top-1 above the float model's) exits 2 and writes nothing.
    run("--model", model, "--data", data, "--target", "=xnnpack", "--max-accuracy-drop", "100", "--no-per-layer",
        "--report", d / "drop.json", expect_text="accuracy target (top-1 drop <= 100.00 points)")
    drop = json.loads((d / "drop.json").read_text())
    if drop["accuracy_target"] != "top-1 drop <= 100.00 points" or drop["kept_in_float"] != [] \
            or [step["met"] for step in drop["target_steps"]] != [True]:
        failures.append(f"a met top-1 target's report: {drop['accuracy_target']}, {drop['target_steps']}")
    run("--model", model, "--data", data, "--target", "=xnnpack", "--max-accuracy-drop", "-50", "--no-per-layer",
        "--out", d / "unmet_drop.pt", expect_status=2, expect_text="top-1 drop <= -50.00 points is not met even with ")
    if (d / "unmet_drop.pt").exists():
        failures.append("an unmet top-1 target left output behind")
    # Models written by Debian's python3-torch from the classes in `source`; `name`: the one saved.
    def python_model(file, source, name):
        (d / "make_model.py").write_text(f"import sys, torch\nfrom torch import nn\n{source}\n"
                                         f"torch.manual_seed(0)\n"
                                         f"torch.jit.save(torch.jit.script({name}().eval()), sys.argv[1])\n")
        subprocess.run(["/usr/bin/python3", d / "make_model.py", d / file], check=True, timeout=300)
        return d / file
    # The engine failing on the converted model is lowering_failed, exit 1 (not the input's fault,
    # 2), nothing written. QNNPACK cannot run this encoder with xnnpack:dynamic and its first
    # q_proj left in float (tests/torch/pipeline.cpp, the same case on the C++ demo encoder), and
    # runs it with every projection quantized: the control, so the failure is the configuration's.
    encoder = python_model("encoder.pt", ENCODER_SOURCE, "Encoder")
    run("--model", encoder, "--data", data, "--target", "=xnnpack:dynamic", "--no-per-layer", expect_text="output SQNR")
    run("--model", encoder, "--data", data, "--target", "=xnnpack:dynamic", "--target",
        "encoder.0.self_attn.q_proj=none", "--no-per-layer", "--out", d / "lowering.pt", "--report",
        d / "lowering.json", expect_status=1,
        expect_text="error (lowering_failed): the qnnpack engine cannot run the lowered model")
    if (d / "lowering.pt").exists() or (d / "lowering.json").exists():
        failures.append("a lowering failure left output behind")
    # An exception this layer did not foresee: one line, exit 1, and LibTorch's whole message
    # (here the model's TorchScript traceback) with --verbose. A model that raises on a batch of
    # one is the way there today: the latency measurement runs batch 1 unguarded (if that becomes
    # a foreseen error, this case needs another way in).
    no_single = python_model("no_single.pt", NO_SINGLE_SOURCE, "NoSingle")
    brief = run("--model", no_single, "--data", data, "--no-per-layer", expect_status=1,
                expect_text="internal error: builtins.RuntimeError: this model takes batches of two or more "
                            "(--verbose shows LibTorch's full message)")
    verbose = run("--model", no_single, "--data", data, "--no-per-layer", "--verbose", expect_status=1,
                  expect_text="Traceback of TorchScript")
    if "Traceback" in brief or "--verbose shows" in verbose:
        failures.append(f"--verbose: the short message has the traceback, or the long one the hint\n{brief}\n{verbose}")
    # Data files with one thing wrong each, written by Debian's python3-torch in one process (each
    # interpreter that imports torch costs a second and a half).
    images = "torch.randn(8, 1, 28, 28)"
    broken = {"test_only.pt": {"test": images},
              "empty.pt": {"calib": "torch.empty(0, 1, 28, 28)", "test": images},
              "inf.pt": {"calib": "torch.full((4, 1, 28, 28), float('inf'))"},
              "nan.pt": {"calib": "torch.full((4, 1, 28, 28), float('nan'))"},
              "shape.pt": {"calib": "torch.randn(4, 3, 28, 28)"},
              "dtype.pt": {"calib": "torch.ones(4, 1, 28, 28, dtype=torch.long)"},
              "both.pt": {"calib": images, "calib_0": images},
              "ragged.pt": {"calib_0": images, "calib_1": "torch.randn(7, 4)"}}
    script = ("import sys, torch\n"
              "class D(torch.nn.Module):\n"
              "    def __init__(self, tensors):\n"
              "        super().__init__()\n"
              "        for k, v in tensors.items(): self.register_buffer(k, v)\n"
              "    def forward(self): return None\n"
              + "".join(f"torch.jit.save(torch.jit.script(D({{{', '.join(f'{k!r}: {v}' for k, v in t.items())}}})), "
                        f"sys.argv[1] + '/{name}')\n" for name, t in broken.items()))
    # From a file: torch.jit.script reads the class's source, which `python -c` has none of.
    (d / "make_data.py").write_text(script)
    subprocess.run(["/usr/bin/python3", d / "make_data.py", d], check=True, timeout=300)
    run("--model", model, "--data", d / "test_only.pt", "--no-per-layer", expect_status=2,
        expect_text="static quantization needs calibration batches")
    run("--model", model, "--data", d / "empty.pt", "--no-per-layer", expect_status=2,
        expect_text="'calib' ([0, 1, 28, 28] Float) holds no sample")
    for name in ("inf.pt", "nan.pt"):
        run("--model", model, "--data", d / name, "--no-per-layer", expect_status=2,
            expect_text="calibration batch 0 holds NaN or Inf")
    run("--model", model, "--data", d / "shape.pt", "--no-per-layer", expect_status=2,
        expect_text="calibration batch 0 ([4, 3, 28, 28] Float) does not fit the model")
    run("--model", model, "--data", d / "dtype.pt", "--no-per-layer", expect_status=2,
        expect_text="([4, 1, 28, 28] Long) does not fit the model: RuntimeError")
    run("--model", model, "--data", d / "both.pt", "--no-per-layer", expect_status=2,
        expect_text="has both 'calib' and 'calib_0'")
    run("--model", model, "--data", d / "ragged.pt", "--no-per-layer", expect_status=2,
        expect_text="'calib_1' has 7 rows, 'calib_0' 8")
    # An output directory nobody may write: /proc refuses new files even to root (CI runs as
    # root, for whom a chmod 555 directory is still writable).
    run("--model", model, "--data", data, "--out", "/proc/versatil-q.pt", "--no-per-layer", expect_status=2,
        expect_text="cannot write '/proc/versatil-q.pt'")
    check_torch_save_data(d, model, data)
    check_report_provenance(d, model, data)
    check_traced_like_scripted(d)
    check_float_layers_named(d)
    check_libtorch_warnings_folded(d)
    if digest(model) != model_digest or digest(data) != data_digest:
        failures.append("an input file changed")
    leftovers = [p.name for p in d.iterdir() if ".tmp" in p.name or p.name == "no-such-dir"]
    if leftovers:
        failures.append(f"partial output left behind: {leftovers}")



# What the CLI writes to standard error when a signal stops it (cleanup_on_signals.hpp).
STOPPED_BY_SIGINT = "versatil-quantize: stopped by SIGINT; temporary files removed, no output half written"


def interrupted_at(args, stage, tmpdir):
    """Runs the CLI with standard error on a pty, so its progress bars are drawn as at a terminal, and
    sends SIGINT, as Ctrl-C does, once `stage`'s bar shows. Returns the process, its stdout, all it
    drew on the pty, and whether the signal went out while the run was still going."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([cli, *map(str, args)], stdout=subprocess.PIPE, stderr=follower, text=True,
                               env=dict(os.environ, TMPDIR=str(tmpdir)))
    os.close(follower)
    seen = b""
    while stage.encode() not in seen:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty closed: the run ended before the stage
            chunk = b""
        if not chunk:
            break
        seen += chunk
    sent = stage.encode() in seen and process.poll() is None
    if sent:
        process.send_signal(signal.SIGINT)
    stdout, _ = process.communicate(timeout=600)
    while True:  # what the run drew until it ended
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process, stdout, seen.decode(errors="replace"), sent


def check_interrupted():
    """Ctrl-C in a long run, once while calibrating and once in the per-layer analysis (the model is
    mobilenet_cnn: 8 layers and 16 calibration batches, enough for both bars): the process ends by
    SIGINT itself, which a shell shows as status 130 (and which stops a shell loop running it, as an
    exit(130) would not), standard error says so in one line after the bars, and nothing is left: no
    output, no temporary beside them or in TMPDIR, nothing saved."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        subprocess.run([export, d, "--model", "mobilenet_cnn", "--steps", "1"], check=True, timeout=600,
                       capture_output=True)
        (d / "out").mkdir()
        (d / "tmp").mkdir()
        for stage, label in (("calibrating", "SIGINT while calibrating"),
                             ("per-layer analysis", "SIGINT during the per-layer analysis")):
            args = ["--model", d / "model.pt", "--data", d / "data.pt", "--target", "=xnnpack", "--out",
                    d / "out" / "q.pt", "--report", d / "out" / "r.json"]
            process, stdout, drawn, sent = interrupted_at(args, stage, d / "tmp")
            lines = [line for line in re.split(r"[\r\n]+", drawn) if line.strip()]
            steps = [tuple(map(int, step)) for step in re.findall(stage + r" \[[= ]*\] (\d+)/(\d+)", drawn)]
            problems = []
            if not sent:
                problems.append("the run ended before the signal could be sent")
            if process.returncode != -signal.SIGINT:
                problems.append(f"exit {process.returncode}, not ended by SIGINT ({-signal.SIGINT})")
            if not lines or lines[-1] != STOPPED_BY_SIGINT or drawn.count(STOPPED_BY_SIGINT) != 1:
                problems.append(f"standard error does not end with the one line {STOPPED_BY_SIGINT!r}")
            others = [line for line in lines[:-1] if not re.match(r"(calibrating|per-layer analysis) \[", line)]
            if others:
                problems.append(f"standard error holds more than the bars and the line: {others}")
            if not steps or steps[-1][0] >= steps[-1][1]:
                problems.append(f"not stopped mid-{stage}: the bar showed {steps[-1:] or 'no step'}")
            left = sorted(p.name for p in [*(d / "out").iterdir(), *(d / "tmp").iterdir()])
            if left or "saved" in stdout:
                problems.append(f"left behind: {left}, stdout: {stdout!r}")
            if problems:
                failures.append(f"{label}: {'; '.join(problems)}\n{drawn}")
            else:
                print(f"ok: {label} (at step {steps[-1][0]} of {steps[-1][1]})")


def check_per_layer_top():
    """--per-layer-top N: the table shows the N worst layers of the per-layer analysis, the JSON all."""
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "top.json"
        table = run("--per-layer-top", "2", "--report", report_path, expect_text="2 more layers not shown")
        if not report_path.exists():
            return  # run() has recorded the failure
        rows = json.loads(report_path.read_text())["per_layer"]  # worst first
        if len(rows) != 4:
            failures.append(f"--per-layer-top 2: the JSON report holds {len(rows)} rows, not the embedded model's 4")
            return
        lines = table.split("per layer (", 1)[-1].splitlines()[1:]  # the per-layer rows, after their heading
        shown = [row["name"] for row in rows if any(line.split()[:1] == [row["name"]] for line in lines)]
        if shown != [row["name"] for row in rows[:2]]:
            failures.append(f"--per-layer-top 2: the table shows {shown}, the worst two are {rows[0]['name']}, "
                            f"{rows[1]['name']}\n{table}")


# Two halves, each a meson test of its own (examples/meson.build), so that the suite runs them side
# by side: "runs" and "refusals"; no part given runs both.
part = sys.argv[4] if len(sys.argv) > 4 else "all"
if part not in ("all", "runs", "refusals"):
    sys.exit(f"check_cli.py: unknown part {part!r} (runs, refusals)")
if part in ("all", "runs"):
    with tempfile.TemporaryDirectory() as scratch:
        check_runs(Path(scratch))
if part in ("all", "refusals"):
    check_version()
    with tempfile.TemporaryDirectory() as scratch:
        check_refusals(Path(scratch))
    check_per_layer_top()
    check_interrupted()

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)

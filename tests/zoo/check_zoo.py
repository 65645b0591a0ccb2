#!/usr/bin/python3
"""The architecture zoo through versatil-quantize, as a user runs it: every model of
make_zoo.py x {x86_inductor, xnnpack} x {static, dynamic}. Each run must end in a report
(exit 0) whose op counts are the truth and whose SQNR clears its floor (PyTorch's own graph-mode
figure on the same model, less a margin; see sqnr_floor), or, for the configurations listed in
EXPECTED_REFUSALS with their reason, in a typed error (exit 2); never a crash, never a backtrace.
A few models again with the gptq option, whose every quantized layer must be rounded. Every
ReLU6 / hardtanh of a saved static model that reads a quantized conv, linear or add must read a
grid within its own interval.

The truth is measured in Python, independently of versatil: the float model's conv/linear ops
are counted by PyTorch's profiler on one forward (make_zoo.py), and the quantized ops by
loading the saved quantized model with torch.jit.load and profiling one forward of it.

  check_zoo.py VERSATIL_QUANTIZE [--zoo DIR] [--only NAMES] [--crossed] [--jobs N] [--keep DIR]

--crossed runs each model in two configurations instead of four: static on one backend and
dynamic on the other, the backends swapping from one model to the next (the sanitizer run's
choice: the two backends share the code that quantizes a graph, so the model, not the backend,
picks the paths it runs).

Without --zoo it writes the zoo first (make_zoo.py, about 20 s). --keep keeps every report
(REPORT_DIR/<model>.<backend>.<mode>.json) for benchmarks/zoo_peer.py. Needs Debian's
python3-torch and python3-torchvision (/usr/bin/python3)."""
import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from make_zoo import save_data

HERE = Path(__file__).resolve().parent
BACKENDS = ["x86_inductor", "xnnpack"]
MODES = ["static", "dynamic"]
ENGINES = {"onednn": "onednn", "qnnpack": "qnnpack", "fbgemm": "fbgemm", "x86": "x86"}
# Per-layer analysis on these: every conv/linear module gets a row, and each row with a figure
# measures its layer quantized (below FLOAT_LIKE_DB). resnet18 and vit reach their layers through
# methods they call on themselves (self._forward_impl, self._process_input), as Python models do;
# regnet names its blocks "block1-0".
PER_LAYER = {"encoder", "squeezenet", "multitask", "resnet18", "vit", "regnet"}
# A row at or above this measured no quantization: 8-bit grids on a layer's input, weights and
# output cost more (float's own rounding, batch norm folded, is at ~110 dB).
FLOAT_LIKE_DB = 80.0
# Also quantized with a target on one submodule, reached through such methods: every conv/linear
# (static) or linear (dynamic) under it must be quantized, and nothing else; a target holding
# none must say so in the report.
NESTED = {"mobilenet_v2": "classifier", "resnet18": "layer4", "regnet": "trunk_output.block1.block1-0"}
# Also quantized with the gptq option (x86_inductor, static), one model per kind of layer it
# unfolds: grouped and squeeze-excitation convs, depthwise ones, a strided patch convolution and
# attention's linear layers, token ids, two inputs. Every quantized layer must be rounded.
GPTQ = {"regnet", "mobilenet_v3_small", "vit", "text", "two_inputs"}
TORCH_STATE = threading.Lock()  # the quantized engine and the profiler are process-wide

# Refusals the zoo expects, (model, backend, mode) -> why this LibTorch cannot quantize it. Any
# other refusal (exit 2, unsupported_model) fails, and so does a listed one that no longer happens.
EXPECTED_REFUSALS = {}

# SQNR floors, from a source other than versatil: PyTorch's own graph mode (quantize_jit with the
# engine's default qconfig, quantize_dynamic_jit) on the same zoo file and batches, as
# benchmarks/zoo_peer.py recorded it. A floor is that figure less 3 dB, i.e. twice PyTorch's
# noise power (versatil's ranges come from another observer, so it may land a little under), and
# never below 0 dB, where the noise is as strong as the signal (a zero output scores 0 dB).
PEER_FIGURES = HERE.parent.parent / "benchmarks" / "results" / "architectures.json"
PEER_MARGIN_DB = 3.0
# Where PyTorch's graph mode refuses the model (its `if` branches observed inconsistently), the
# floor is taken from the zoo models of the same kind of block that it does quantize: the lowest
# of their PyTorch figures on the backend and mode, less the same margin.
SIBLINGS = {"efficientnet": ("mnasnet", "mobilenet_v3_small"),  # MBConv: inverted residual, depthwise
            "text": ("vit",)}  # nn.TransformerEncoderLayer's attention and MLP blocks


def peer_figures():
    rows = json.loads(PEER_FIGURES.read_text())["rows"]
    return {(r["model"], r["backend"], r["mode"]): r["pytorch"].get("sqnr_db") for r in rows}


def sqnr_floor(figures, name, backend, mode):
    """(floor in dB, reason); an infinite floor means nothing may be quantized."""
    peer = figures.get((name, backend, mode))
    if peer == float("inf"):
        return peer, "PyTorch's graph mode leaves the outputs as they are (nothing to quantize)"
    if peer is not None:
        return max(0.0, peer - PEER_MARGIN_DB), f"PyTorch graph mode {peer:.2f} dB less {PEER_MARGIN_DB} dB"
    known = [(figures.get((s, backend, mode)), s) for s in SIBLINGS.get(name, ())]
    known = [(f, s) for f, s in known if f is not None]
    if not known:
        return None, f"no PyTorch figure for {name} {backend} {mode} in {PEER_FIGURES.name} and no sibling"
    lowest, sibling = min(known)
    return (max(0.0, lowest - PEER_MARGIN_DB),
            f"PyTorch refuses {name}; its sibling {sibling}'s graph-mode {lowest:.2f} dB less {PEER_MARGIN_DB} dB")


def load_quantized(saved, engine):
    """The saved model, loaded under its engine (unpickling repacks the weights for it)."""
    torch.backends.quantized.engine = engine
    return torch.jit.load(str(saved))


def quantized_ops_in(model, data_file):
    """Quantized conv/linear ops one forward of the loaded model runs, by PyTorch's profiler."""
    data = torch.jit.load(str(data_file))
    if hasattr(data, "test"):
        inputs = (data.test[:2],)
    else:
        inputs, i = [], 0
        while hasattr(data, f"test_{i}"):
            inputs.append(getattr(data, f"test_{i}")[:2])
            i += 1
    with torch.no_grad(), torch.autograd.profiler.profile() as profile:
        model(*inputs)
    return sum(1 for e in profile.function_events
               if e.name.startswith("quantized::") and ("conv" in e.name or "linear" in e.name)
               and "prepack" not in e.name and "unpack" not in e.name)


def clamps_reading_wider_ranges(model):
    """The ReLU6 / hardtanh nodes of the saved model that read a quantized conv, linear or add
    output whose grid reaches beyond the clamp's interval by more than one step: versatil
    observes a value only clamps read as they see it, so its 256 levels lie within the clamp."""
    graph = model.forward.graph
    nodes = list(graph.nodes())
    quantize = [n for n in nodes if n.kind() == "aten::quantize_per_tensor"]
    if not quantize:
        return []
    # The activations' dtype, as the model's input is quantized: quint8 0..255 or qint8 -128..127.
    # (A dtype constant reads back as its ScalarType code, 13 for quint8.)
    lowest_level = 0 if list(quantize[0].inputs())[3].toIValue() in (torch.quint8, 13) else -128
    wider = []
    for node in nodes:
        if node.kind() not in ("aten::hardtanh", "aten::hardtanh_"):
            continue
        inputs = list(node.inputs())
        producer = inputs[0].node()
        if producer.kind() not in ("quantized::conv2d", "quantized::linear", "quantized::add"):
            continue
        low, high = (i.toIValue() for i in inputs[1:3])
        scale, zero_point = (i.toIValue() for i in list(producer.inputs())[2:4])
        bottom = (lowest_level - zero_point) * scale
        if bottom < low - scale or bottom + 255 * scale > high + scale:
            wider.append(f"{producer.kind()} output on [{bottom:.3g}, {bottom + 255 * scale:.3g}] read by "
                         f"hardtanh({low}, {high})")
    return wider


def under(path, modules):
    return [m for m in modules if m == path or m.startswith(path + ".")]


def run_case(cli, zoo, entry, backend, mode, scratch, keep, figures, options="", path=""):
    name = entry["name"]
    label = (f"{name}" + (f" {path}=" if path else "") + f" {backend} {mode}" + (f" {options}" if options else ""))
    target = f"{path}={backend}" + (":dynamic" if mode == "dynamic" else "") + (f":{options}" if options else "")
    stem = f"{name}.{backend}.{mode}" + (f".{options}" if options else "") + (f".{path}" if path else "")
    report_path = (keep or scratch) / f"{stem}.json"
    out_path = scratch / f"{stem}.q.pt"
    args = [cli, "--model", zoo / entry["model"], "--data", zoo / entry["data"], "--target", target,
            "--report", report_path, "--out", out_path]
    per_layer = name in PER_LAYER and mode == "static" and not options and not path
    if not per_layer:
        args.append("--no-per-layer")
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    problems = []
    if "frame #" in output or "Exception raised from" in output:
        problems.append("printed a LibTorch backtrace")
    refusal = EXPECTED_REFUSALS.get((name, backend, mode)) if not options and not path else None
    if result.returncode == 2 and "error (unsupported_model)" in output:
        said = output.strip().splitlines()[-1]
        if refusal:
            return label, problems, f"refused as expected ({refusal}): {said}"
        return label, problems + [f"refused, and no refusal is expected: {said}"], None
    if refusal:
        problems.append(f"quantized, but listed in EXPECTED_REFUSALS ({refusal}): take it off the list")
    if result.returncode != 0:
        return label, problems + [f"exit {result.returncode}:\n{output[-3000:]}"], None
    report = json.loads(report_path.read_text())
    expected = entry["executed_ops"]["linear" if mode == "dynamic" else "conv_linear"]
    if report["quantizable_ops"] != expected:
        problems.append(f"quantizable_ops {report['quantizable_ops']}, the float model runs {expected}")
    metadata_engine = report["engine"]
    with TORCH_STATE:
        saved = load_quantized(out_path, ENGINES.get(metadata_engine, metadata_engine))
        measured = quantized_ops_in(saved, zoo / entry["data"])
    if report["quantized_ops"] != measured:
        problems.append(f"quantized_ops {report['quantized_ops']}, the saved model runs {measured}")
    if path:
        targeted = len(under(path, entry["linear_modules" if mode == "dynamic" else "weighted_modules"]))
        if report["quantized_ops"] != targeted:
            problems.append(f"quantized_ops {report['quantized_ops']}, the target {path} holds {targeted}")
        idle = any("this target quantizes nothing" in a["change"] for a in report["adjustments"])
        if idle != (targeted == 0):
            problems.append(f"the report {'says' if idle else 'does not say'} the target quantizes nothing")
    # The report writes null for identical outputs (an infinite SQNR). A configuration that
    # quantizes nothing must leave the outputs as float computes them: identical, or apart by
    # float rounding alone (batch norm folded into a conv moves them, FLOAT_LIKE_DB). A target on a
    # submodule, or the gptq option, is held to its model's floor: quantizing part of a model, or
    # rounding better, adds no noise.
    targeted_none = path and not under(path, entry["linear_modules" if mode == "dynamic" else "weighted_modules"])
    floor, reason = (float("inf"), "the target holds no layer to quantize") if targeted_none else \
        sqnr_floor(figures, name, backend, mode)
    sqnr = report["sqnr_db"]
    if floor is None:
        problems.append(f"no SQNR floor: {reason}")
    elif floor == float("inf"):
        if sqnr is not None and not sqnr >= FLOAT_LIKE_DB:
            problems.append(f"SQNR {sqnr:.2f} dB, where the outputs must stay float's ({reason})")
    elif sqnr is None:
        problems.append(f"no SQNR in the report (identical outputs), where a floor of {floor:.2f} dB applies "
                        f"({reason})")
    elif not sqnr >= floor:
        problems.append(f"SQNR {sqnr:.2f} dB below its floor {floor:.2f} dB ({reason})")
    if mode == "static":
        problems += clamps_reading_wider_ranges(saved)
    if "gptq" in options:
        notes = [a["change"] for a in report["adjustments"]]
        rounded = [n for n in notes if n.startswith("gptq: ") and "layer(s) rounded on" in n]
        if not rounded or rounded[0].startswith("gptq: 0 layer(s)"):
            problems.append(f"no gptq note of rounded layers in {notes}")
        problems += [f"a layer left to nearest rounding: {n}" for n in notes
                     if n.startswith("gptq: rounded to nearest")]
    if per_layer:
        rows = {layer["name"] for layer in report["per_layer"]}
        missing = [m for m in entry["weighted_modules"] if m not in rows]
        if missing:
            problems.append(f"per-layer SQNR lacks {missing}")
        # (A null row, identical outputs, is a layer LibTorch leaves float: attention's out_proj,
        # whose weight nn.MultiheadAttention hands to a function instead of calling the module.
        # The report marks it float, since the float-layer list names the attention holding it.)
        unmeasured = [f"{layer['name']} {layer['sqnr_db']}" for layer in report["per_layer"]
                      if layer["sqnr_db"] is not None and layer["sqnr_db"] >= FLOAT_LIKE_DB]
        if unmeasured:
            problems.append(f"per-layer rows where the layer stayed float: {unmeasured}")
        unmarked = [layer["name"] for layer in report["per_layer"] if (layer["sqnr_db"] is None) != layer["float"]]
        if unmarked:
            problems.append(f"per-layer rows whose float mark disagrees with their identical outputs: {unmarked}")
    summary = (f"{report['quantized_ops']}/{report['quantizable_ops']} ops, SQNR "
               f"{report['sqnr_db'] if report['sqnr_db'] is None else round(report['sqnr_db'], 2)} dB"
               + (f" (floor {floor:.2f})" if floor is not None and floor != float("inf") else "")
               + (f", {len(report['outputs'])} outputs" if report["outputs"] else "")
               + (f", {len(report['per_layer'])} per-layer rows" if per_layer else ""))
    return label, problems, summary


def check_float64_data(cli, zoo, scratch):
    """A float64 data file for a float32 model is converted, and the report says so."""
    data = torch.jit.load(str(zoo / "encoder.data.pt"))
    path = scratch / "encoder.float64.data.pt"
    save_data(path, {name: getattr(data, name).double() for name in ("calib", "test")})
    report_path = scratch / "float64.json"
    result = subprocess.run([str(cli), "--model", str(zoo / "encoder.pt"), "--data", str(path), "--no-per-layer",
                             "--report", str(report_path)], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        return [f"float64 data: exit {result.returncode}\n{result.stdout + result.stderr}"]
    notes = [a["change"] for a in json.loads(report_path.read_text())["adjustments"]]
    if not any("converted from Double to the model's Float" in n for n in notes):
        return [f"float64 data: no conversion note in {notes}"]
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli")
    parser.add_argument("--zoo")
    parser.add_argument("--only", default="")
    parser.add_argument("--crossed", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        zoo = Path(args.zoo) if args.zoo else scratch / "zoo"
        if not args.zoo:
            command = [sys.executable, str(HERE / "make_zoo.py"), str(zoo)] + (
                ["--only", args.only] if args.only else [])
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        keep = Path(args.keep) if args.keep else None
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
        entries = json.loads((zoo / "zoo.json").read_text())
        wanted = [n for n in args.only.split(",") if n]
        entries = [e for e in entries if not wanted or e["name"] in wanted]
        figures = peer_figures()
        failures = passed = 0
        # The module-path grammars are checked against tests/fuzz/module_names.txt in the plain run
        # (tests/fuzz/grammar_names.cpp); that list must hold every name the zoo's models have.
        listed = set((HERE.parent / "fuzz" / "module_names.txt").read_text().split())
        unlisted = sorted({m for e in entries for m in e["module_names"]} - listed)
        print(("FAIL " if unlisted else "ok   ") + "every module name in tests/fuzz/module_names.txt"
              + (f": {unlisted[:5]} missing; regenerate it with make_zoo.py --module-names" if unlisted else ""))
        failures, passed = (1, 0) if unlisted else (0, 1)
        if args.crossed:
            cases = [(e, BACKENDS[(i + j) % 2], m, "", "") for i, e in enumerate(entries) for j, m in enumerate(MODES)]
        else:
            cases = [(e, b, m, "", "") for e in entries for b in BACKENDS for m in MODES]
        cases += [(e, "x86_inductor", "static", "gptq", "") for e in entries if e["name"] in GPTQ]
        cases += [(e, b, m, "", NESTED[e["name"]])
                  for e in entries if e["name"] in NESTED for b in BACKENDS for m in MODES]
        if "encoder" in [e["name"] for e in entries]:
            problems = check_float64_data(args.cli, zoo, scratch)
            print(("FAIL " if problems else "ok   ") + "encoder with float64 data" +
                  (": " + "; ".join(problems) if problems else ""))
            failures, passed = (failures + 1, passed) if problems else (failures, passed + 1)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_case, args.cli, zoo, e, b, m, scratch, keep, figures, o, p)
                       for e, b, m, o, p in cases]
            for future in futures:
                label, problems, summary = future.result()
                if problems:
                    failures += 1
                    print(f"FAIL {label}: " + "; ".join(problems), flush=True)
                else:
                    passed += 1
                    print(f"ok   {label}: {summary}", flush=True)
        print(f"zoo: {passed} passed, {failures} failed")
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

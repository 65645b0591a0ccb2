#!/usr/bin/env python3
"""Writes benchmarks/RESULTS.md and benchmarks/latency.png from the measurements benchmarks/run
collected in OUT_DIR (run.json, policy.json, compile.json, versatil.json, peer.json). Every number
and every statement about the run's results comes from those files; text that is fixed is a
description of the method, and says so ("Method:"), or names what was checked by hand.

  report.py --out OUT_DIR --root ROOT --command C --started D --seconds S --load-before L --load-after L
      records the run (those arguments and this machine) in OUT_DIR/run.json, then renders
  report.py --out benchmarks/results --root .
      renders again from a run already recorded (run.json read, nothing measured)"""
import argparse
import json
import sys
import math
import platform
import re
import subprocess
from pathlib import Path

MODELS = ("mlp", "transformer_encoder", "resnet_cnn", "mobilenet_cnn")
CONFIGS = (("x86_inductor", "static"), ("xnnpack", "static"), ("x86_inductor", "dynamic"), ("xnnpack", "dynamic"))
PEER_ENGINE = {"x86_inductor": "onednn", "xnnpack": "qnnpack"}


def load(path):
    return json.loads(path.read_text()) if path.exists() else None


def shell(command):
    try:
        return subprocess.run(command, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def fmt(value, digits=2):
    if value is None:
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def find_run(runs, backend, mode):
    for run in runs or []:
        if run["backend"] == backend and run["mode"] == mode:
            return run
    return None


def ok(run):
    """A run with measurements (possibly after a fallback: then it also records the first error)."""
    return run is not None and "sqnr_db" in run


def label(backend, run):
    return f"{backend} (fallback: `{run['spec']}`)" if run and run.get("fallback_from") else backend


# ---- sections ------------------------------------------------------------------------------------

def record_run(args):
    """The run's own facts, kept in run.json beside its measurements: the command, when it
    started, how long it took, how busy the machine was, and what the machine is."""
    flags = shell("grep -m1 '^flags' /proc/cpuinfo")
    return {
        "command": args.command,
        "date": args.started,
        "seconds": args.seconds,
        "load_before": [float(x) for x in args.load_before.split()],
        "load_after": [float(x) for x in args.load_after.split()],
        "cpu": shell("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "cores": int(shell("nproc") or 0),
        "isa": [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
                if re.search(rf"\b{f}\b", flags)],
        "memory_gb": int(shell("free -g | awk '/Mem:/ {print $2}'") or 0),
        "os": f"{shell('. /etc/os-release && echo $PRETTY_NAME')} ({platform.release()})",
        "compiler": shell("c++ --version | head -1"),
        "benchmark_library": shell("pkg-config --modversion benchmark") or None,
        # LibTorch's float linear and convolution call libblas.so.3, whichever Debian alternative
        # provides it: the reference BLAS is ~20x slower than OpenBLAS (tools/install-deps).
        "blas": shell("readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3"),
    }


def float_latency_spread(versatil):
    """Noise, measured: every configuration row of a model times the same float model again.
    The largest relative spread (max / min - 1) of those timings, and its model, at b1 and b8."""
    spread = {}
    for batch in (1, 8):
        worst = (0.0, "–")
        for name, model in versatil["models"].items():
            times = [r[f"float_ms_b{batch}"] for r in model["runs"] if r.get(f"float_ms_b{batch}")]
            if len(times) > 1:
                worst = max(worst, (max(times) / min(times) - 1, name))
        spread[batch] = worst
    return spread


def machine_section(run, versatil, peer, compile_data):
    cfg = versatil["config"]
    spread = float_latency_spread(versatil)
    rows = len(CONFIGS)
    threads = f"{cfg['threads']} (versatil), {peer['threads'] if peer else '–'} (peer)"
    lines = [
        "## Machine and command",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{run['command']}` (from the repository root) |",
        f"| started | {run['date']} |",
        f"| CPU | {run['cpu']}, {run['cores']} cores, {', '.join(run['isa']) or 'no AVX2'}; {run['memory_gb']} GB memory |",
        f"| OS | {run['os']} |",
        f"| compiler | {run['compiler']} (release build, `-O3`) |",
        f"| LibTorch / python3-torch | Debian's {peer['torch_version'] if peer else '(peer not run)'}, CPU |",
        f"| BLAS (float linear, convolution) | `{run.get('blas') or 'not recorded'}` |",
        f"| threads | {threads}, for every latency, training and quantize time |",
        f"| whole run | {run['seconds'] // 60} min {run['seconds'] % 60} s |",
        f"| load average | {' '.join(f'{x:.2f}' for x in run['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in run['load_after'])} after (1, 5, 15 min) |",
        "",
        f"Method: latencies are medians of many runs, quantize times the lowest of {cfg['quantize_repeats']} runs, "
        f"compile times medians of {compile_data['repeats'] if compile_data else '–'}. Other jobs may have run on "
        "the machine during the measurement; the load averages above say how busy it was.",
        "",
        f"Noise, measured in this run: each model's float latency is timed again in each of its {rows} rows; "
        f"those timings differ by up to {fmt(100 * spread[1][0], 0)} % at batch 1 ({spread[1][1]}) and "
        f"{fmt(100 * spread[8][0], 0)} % at batch 8 ({spread[8][1]}). Differences of that size between versatil "
        "and the peer are within the noise.",
        "",
    ]
    return lines


def policy_section(policy, run):
    if not policy:
        return ["## 1. Policy layer", "", "Not run (no Google Benchmark).", ""], None
    medians, repetitions = {}, set()
    for bench in policy["benchmarks"]:
        if bench.get("aggregate_name") == "median":
            scale = {"ns": 1, "us": 1e3, "ms": 1e6}[bench["time_unit"]]
            medians[bench["run_name"]] = bench["real_time"] * scale
            repetitions.add(bench["repetitions"])
    library = run.get("benchmark_library") or "version not recorded"
    lines = ["## 1. Policy layer", "",
             f"Google Benchmark ({library}; its library reports a {policy['context']['library_build_type']} build), "
             f"median of {'/'.join(map(str, sorted(repetitions)))} repetitions, ns per iteration. Method: a debug "
             "build of the library only adds the harness's own overhead, the same for every case. `constant/` is "
             "the answer as a literal, `versatil/` the policy layer as a user writes it, `virtual/` the ABC-style "
             "baseline written like the Python original (abstract backend class, composable quantizer holding "
             "(path, backend object) pairs), `raw/` hand-written getenv/setenv/unsetenv with save and restore. "
             "Inputs meant to be known only at run time go through `benchmark::DoNotOptimize` first, results after.",
             "", "| case | ns | versatil / baseline |", "|---|---:|---|"]
    pairs = {
        "versatil/backend_names[0]": "constant/backend_name",
        "versatil/quantizer_for(literal)": "constant/backend_name",
        "versatil/config_query": "constant/backend_name",
        "versatil/create_quantizer(runtime path)": "virtual/create_quantizer(runtime path)",
        "versatil/Quantizer::quantizer_for(runtime name)": "virtual/quantizer_for(runtime name)",
        "versatil/runtime_quantizer::quantizer_for(runtime name)": "virtual/quantizer_for(runtime name)",
        "versatil/environment_context enter+exit (process)": "raw/getenv+setenv+unsetenv (same two variables)",
    }
    for name, ns in medians.items():
        base = pairs.get(name)
        note = f"{fmt(ratio(ns, medians.get(base)))}× `{base}`" if base in medians else ""
        lines.append(f"| `{name}` | {fmt(ns)} | {note} |")
    constant = medians.get("constant/backend_name")
    queries = {k: medians.get(k) for k in ("versatil/backend_names[0]", "versatil/quantizer_for(literal)",
                                           "versatil/config_query")}
    worst = max((v - constant for v in queries.values() if v is not None), default=None) if constant else None
    lines += ["", "Queries answered while compiling (" + ", ".join(f"`{k.split('/')[1]}` {fmt(v)} ns"
                                                              for k, v in queries.items() if v is not None)
              + f") against {fmt(constant)} ns for the literal: at most {fmt(worst)} ns more. The virtual baseline's "
              f"literal lookup takes {fmt(medians.get('virtual/quantizer_for(literal)'))} ns and a config query "
              f"{fmt(medians.get('virtual/config_query'))} ns (by construction it walks its list on every call).",
              "",
              "Checked by hand in the disassembly of `benchmarks/policy_layer.cpp` when this section was written, "
              "not by each run: the compile-time cases' loops only store the constant result through "
              "`DoNotOptimize` (for `quantizer_for`, the four fields of the `optional<backend_quantizer>` as "
              "immediates) where the literal case stores one pointer and a length; no lookup is left at run time.",
              ""]
    return lines, (queries, constant, worst)


def compile_noise(compile_data):
    """The largest spread between repeated compiles of one TU, in seconds and relative to its median."""
    spreads = [(max(u["all_seconds"]) - min(u["all_seconds"]), u["seconds"])
               for u in compile_data["translation_units"] if len(u.get("all_seconds", [])) > 1]
    seconds = max((a for a, _ in spreads), default=0.0)
    relative = max((a / m for a, m in spreads if m > 0), default=0.0)
    return seconds, relative


def compile_section(compile_data):
    if not compile_data:
        return ["## 2. Compile-time cost", "", "Not run.", ""]
    units = {u["name"]: u for u in compile_data["translation_units"]}
    umbrella = units["umbrella"]["seconds"]
    lines = ["## 2. Compile-time cost", "",
             f"`{compile_data['flags']}` ({compile_data['compiler']}), median of {compile_data['repeats']} "
             "compiles. Method: each generated TU composes N targets (alternating `XNNPACK<>` and `X86Inductor<>` "
             "on paths `module0`…), checks two queries with `static_assert`, and keeps a run-time lookup and an "
             "environment scope so there is code in the object.", "",
             "| translation unit | compile s | over the umbrella include, s | per target, ms | .text B | .data+.bss B |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in ("empty", "umbrella"):
        u = units[name]
        label = "empty file" if name == "empty" else '`#include "versatil/versatil.hpp"` only'
        lines.append(f"| {label} | "
                     f"{fmt(u['seconds'])} | | | {u['size']['text']} | {u['size']['data'] + u['size']['bss']} |")
    points = []
    for u in compile_data["translation_units"]:
        if u["targets"]:
            over = u["seconds"] - umbrella
            points.append((u["targets"], over))
            lines.append(f"| N = {u['targets']} | {fmt(u['seconds'])} | {fmt(over)} | {fmt(1e3 * over / u['targets'], 1)} | "
                         f"{u['size']['text']} | {u['size']['data'] + u['size']['bss']} |")
    sized = [(u["targets"], u["size"]["text"], u["size"]["data"] + u["size"]["bss"])
             for u in compile_data["translation_units"] if u["targets"]]
    if len(sized) >= 3:
        (n1, text1, _), (n2, text2, data2), (nl, textl, datal) = sized[0], sized[1], sized[-1]
        lines += ["", f"Method: N = {n1} holds only an `XNNPACK<>` target, which sets no environment variable; from "
                  "N = 2 on, the `X86Inductor<>` environment scope (the process store with its lock and layers) is in "
                  f"the object. Measured: .text grows by {text2 - text1} B from N = {n1} to N = {n2}, then by "
                  f"{fmt((textl - text2) / (nl - n2), 1)} B per further target up to N = {nl}, while .data+.bss grows "
                  f"by {fmt((datal - data2) / (nl - n2), 1)} B per target."]
    # Growth: the log-log slope of the cost above the umbrella include between successive N.
    slopes = []
    for (n0, t0), (n1, t1) in zip(points, points[1:]):
        if t0 > 0 and t1 > 0:
            slopes.append((n0, n1, math.log(t1 / t0) / math.log(n1 / n0)))
    noise = compile_noise(compile_data)
    lines += ["", "Growth exponent of the cost above the umbrella include (log-log slope between successive N; "
              "1 is linear, 2 quadratic): " + ", ".join(f"N {a}→{b}: {fmt(s)}" for a, b, s in slopes) + ". "
              f"Repeated compiles of one TU differ by up to {fmt(noise[0])} s ({fmt(100 * noise[1], 0)} %); the cost "
              "above the umbrella include is " + ", ".join(f"{fmt(t)} s at N = {n}" for n, t in points) + ".", ""]
    firmware = compile_data.get("firmware")
    if firmware:
        s = firmware["size"]
        lines += [f"Cortex-M4 object of `examples/firmware/quantizer_check.cpp` (arm-none-eabi-g++, "
                  f"`{firmware['flags']}`, as `tests/firmware/build.py` builds it): .text {s['text']} B, .data "
                  f"{s['data']} B, .bss {s['bss']} B; compiled in {fmt(firmware['seconds'])} s.", ""]
    return lines, slopes


def runtime_sections(versatil, peer):
    lines = ["## 3–4. Runtime, side by side with PyTorch's own quantization", ""]
    cfg = versatil["config"]
    lines += [
        f"Method: each model is built and trained in C++ (`include/versatil/libtorch/demo/models.hpp`, `training.hpp`; "
        f"Adam, {cfg['steps']} steps of 64 on the first {cfg['train_images']} Fashion-MNIST training images, "
        f"{cfg['threads']} thread(s)) and saved as TorchScript. Calibration: {cfg['calibration_images']} training images in "
        f"batches of 32 (static only). Evaluation: the first {cfg['test_images']} test images (held out).",
        "",
        "Method: **the peer** (`benchmarks/peer.py`, Debian's python3-torch in the same run) gets the same "
        "weights and data: each architecture has an `nn.Module` twin with the same module paths, and the "
        "trained weights are loaded from the C++ model's state dict. Static: `prepare_fx` with "
        "`get_default_qconfig_mapping(engine)`, calibration on the same batches, `convert_fx`; dynamic: "
        "`quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`. Engines: `onednn` opposite versatil's "
        "`x86_inductor` (which lowers to oneDNN), `qnnpack` opposite `xnnpack` (which lowers to QNNPACK "
        "with int8 activations). The peer's latency is the faster of its eager GraphModule and a "
        "traced + frozen TorchScript module (which one is noted); versatil's is its lowered (frozen) "
        "TorchScript module. Float latency: versatil's float TorchScript module; the peer's float "
        "nn.Module (the faster of eager and traced + frozen).", "",
        "Method: both sides time a single forward with the same method (5 warm-up runs, then at least 20 runs and "
        f"0.25 s; the median), repeated {cfg.get('latency_rounds', 1)} times, keeping the lowest median (the "
        "machine is shared; the quietest round is the closest to the model's own cost). Quantize time: prepare + calibrate + "
        "convert (+ lower, for versatil; dynamic targets: the direct path with each layer's weights chosen on the "
        "calibration data, as versatil-quantize does with a data file), **cold**: the first quantization of a fresh "
        "process (LibTorch or torch imported, model and data loaded first), what every versatil-quantize run pays, the "
        f"lowest of {cfg.get('cold_processes', 1)} processes per side; warm beside it: the lowest of "
        f"{cfg['quantize_repeats']} later quantizations in those processes (the same work each run: what the shared "
        "machine adds, page faults above all, is left out). The peer's copy of the model is made outside its timing. "
        "versatil's phase table is warm, from the same processes. Each configuration in processes of its own: "
        "LibTorch 1.13's quantization passes grow a static list on every call (`isSingleInputGeneralAtenFunction`, "
        "searched linearly), so each quantization in a process slows the next. SQNR: "
        "10·log10(Σref² / Σ(ref − q)²) of the logits on the evaluation images against the C++ float model's.",
        ""]
    if peer:
        lines += ["**The twins reproduce the C++ float model** (max |Δ| of the logits on the evaluation images; "
                  "the C++ TorchScript file loaded in Python gives the second column):", "",
                  "| model | nn.Module twin vs C++ | TorchScript in Python vs C++ |", "|---|---:|---:|"]
        for model in MODELS:
            p = peer["models"].get(model)
            if p:
                lines.append(f"| {model} | {p['twin_max_abs_diff']:.1e} | {p['scripted_in_python_max_abs_diff']:.1e} |")
        lines.append("")

    lines += ["### Float models", "", "| model | float top-1 | training s | float size KiB |", "|---|---:|---:|---:|"]
    for model in MODELS:
        m = versatil["models"][model]
        lines.append(f"| {model} | {fmt(100 * m['float_top1'])} % | {fmt(m['train_seconds'], 1)} | "
                     f"{fmt(m['float_bytes'] / 1024, 1)} |")
    lines.append("")

    quality = ["### Accuracy and SQNR", "",
               "Δ dB is the ratio of the two quantization noise powers on a log scale: +3 dB means half the "
               "peer's noise. Quantized ops: conv / linear ops running quantized out of those in the model "
               "(dynamic quantization leaves convolutions in float, on both sides).", "",
               "| model | backend | mode | versatil SQNR dB | peer SQNR dB | Δ dB (v − p) | versatil top-1 % | "
               "peer top-1 % | Δ pp | quantized ops (versatil) |",
               "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    speed = ["### Latency, size and quantize time (1 thread)", "",
             "ms per forward. Ratios are versatil / peer: below 1 versatil is faster. As a check on the two "
             "timing loops (C++ for versatil, Python for the peer), peer.py also times versatil's saved lowered "
             "model in its own Python loop (\"v quant in peer's harness\").", "",
             "| model | backend | mode | b1 float v / p | b1 quant v / p | **b1 ratio** | b8 float v / p | b8 quant v / p | "
             "**b8 ratio** | peer form (b1, b8) | v quant in peer's harness, b1 / b8 | size KiB v / p | quantize s cold v / p "
             "(warm v / p) | **cold quantize ratio** |",
             "|---|---|---|---|---|---:|---|---|---:|---|---|---|---|---:|"]
    failures = []
    summary = []
    for model in MODELS:
        vm = versatil["models"][model]
        pm = peer["models"].get(model) if peer else None
        for backend, mode in CONFIGS:
            v = find_run(vm["runs"], backend, mode)
            p = find_run(pm["runs"], backend, mode) if pm else None
            for side, run in (("versatil", v), ("peer", p)):
                if run is not None and "error" in run:
                    what = run["error"].splitlines()[0][:300]
                    if run.get("fallback_from"):
                        what = f"{what}` — measured instead with `{run['spec']}"
                    failures.append((model, backend, mode, side, what))
            vq = v if ok(v) else None
            pq = p if ok(p) else None
            g = lambda run, key: run.get(key) if run else None  # noqa: E731
            sqnr_d = None if not (vq and pq) else vq["sqnr_db"] - pq["sqnr_db"]
            top_d = None if not (vq and pq) else 100 * (vq["quantized_top1"] - pq["quantized_top1"])
            ops = f"{vq['quantized_ops']}/{vq['quantizable_ops']}" if vq else "failed"
            quality.append(
                f"| {model} | {label(backend, v)} | {mode} | {fmt(g(vq, 'sqnr_db'))} | {fmt(g(pq, 'sqnr_db'))} | {fmt(sqnr_d)} | "
                f"{fmt(100 * vq['quantized_top1'] if vq else None)} | {fmt(100 * pq['quantized_top1'] if pq else None)} | "
                f"{fmt(top_d)} | {ops} |")
            r1 = ratio(g(vq, "quantized_ms_b1"), g(pq, "quantized_ms_b1"))
            r8 = ratio(g(vq, "quantized_ms_b8"), g(pq, "quantized_ms_b8"))
            rq = ratio(g(vq, "quantize_seconds"), g(pq, "quantize_seconds"))
            form = f"{pq['quantized_form_b1']}, {pq['quantized_form_b8']}" if pq else "–"
            speed.append(
                f"| {model} | {label(backend, v)} | {mode} | {fmt(g(vq, 'float_ms_b1'), 3)} / {fmt(g(pq, 'float_ms_b1'), 3)} | "
                f"{fmt(g(vq, 'quantized_ms_b1'), 3)} / {fmt(g(pq, 'quantized_ms_b1'), 3)} | {fmt(r1)} | "
                f"{fmt(g(vq, 'float_ms_b8'), 3)} / {fmt(g(pq, 'float_ms_b8'), 3)} | "
                f"{fmt(g(vq, 'quantized_ms_b8'), 3)} / {fmt(g(pq, 'quantized_ms_b8'), 3)} | {fmt(r8)} | {form} | "
                f"{fmt(g(pq, 'versatil_in_python_ms_b1'), 3)} / {fmt(g(pq, 'versatil_in_python_ms_b8'), 3)} | "
                f"{fmt(g(vq, 'quantized_bytes') / 1024 if vq else None, 1)} / "
                f"{fmt(g(pq, 'quantized_bytes') / 1024 if pq else None, 1)} | "
                f"{fmt(g(vq, 'quantize_seconds'), 3)} / {fmt(g(pq, 'quantize_seconds'), 3)} "
                f"({fmt(g(vq, 'quantize_seconds_warm'), 3)} / {fmt(g(pq, 'quantize_seconds_warm'), 3)}) | {fmt(rq)} |")
            summary.append({"model": model, "backend": backend, "mode": mode, "v": vq, "p": pq, "sqnr_d": sqnr_d,
                            "top_d": top_d, "r1": r1, "r8": r8, "rq": rq, "v_failed": v is not None and "error" in v,
                            "p_failed": p is not None and not pq})
    lines += quality + [""] + speed + [""]
    if failures:
        lines += ["### Failures", "", "| model | backend | mode | side | error (first line) |", "|---|---|---|---|---|"]
        lines += [f"| {m} | {b} | {mo} | {s} | `{e.replace('|', '/')}` |" for m, b, mo, s, e in failures]
        lines.append("")
    return lines, summary


def phases_section(versatil, peer):
    lines = ["### Where versatil's quantize time goes, and what the lowered graphs hold", "",
             "Method: one extra quantization per configuration, timed step by step (seconds; the peer's dynamic path has no "
             "steps to split; versatil's dynamic targets take the direct path, `dynamic.hpp`, whose whole time is under "
             "lower). forward: not a phase, the float model run over the calibration batches (1 thread), which "
             "calibrating cannot take less than. per-layer: the per-layer SQNR analysis `quantize()` runs after by default "
             "(one evaluation pass per layer on the first samples of the evaluation data: at least 128 a layer, about "
             "one pass in all; dynamic targets switch each layer on in the direct path's model, packed once). CLI "
             "default / --no-per-layer: `quantize()` with `per_layer` on and off on the same data (calibration and the "
             "test images, as `versatil-quantize --data` runs it, without loading and saving the files), median of 3, "
             "interleaved; every sample: the same with `--per-layer-samples 0`. q / dq: "
             "`aten::quantize_per_tensor` / `aten::dequantize` nodes left in the final graph (versatil's lowered "
             "module, the peer's traced + frozen one); every pair is a float round trip at run time.", "",
             "| model | backend | mode | forward | prepare v / p | calibrate v / p | convert v / p | lower v | per-layer v | "
             "CLI default / --no-per-layer s | **CLI ratio** | ratio, every sample | q / dq versatil | q / dq peer |",
             "|---|---|---|---:|---|---|---|---:|---:|---|---:|---:|---|---|"]
    for model in MODELS:
        pm = peer["models"].get(model) if peer else None
        for backend, mode in CONFIGS:
            v = find_run(versatil["models"][model]["runs"], backend, mode)
            p = find_run(pm["runs"], backend, mode) if pm else None
            if not ok(v):
                continue
            ph = v.get("phases", {})
            peer_nodes = f"{p['quantize_nodes']} / {p['dequantize_nodes']}" if ok(p) and "quantize_nodes" in p else "–"
            pp = p.get("phases", {}) if ok(p) else {}
            both = lambda key: f"{fmt(ph.get(key), 3)} / {fmt(pp.get(key), 3)}"  # noqa: E731
            cli = v.get("cli_seconds", {})
            lines.append(f"| {model} | {label(backend, v)} | {mode} | {fmt(ph.get('float_forward'), 3)} | "
                         f"{both('prepare')} | {both('calibrate')} | "
                         f"{both('convert')} | {fmt(ph.get('lower'), 3)} | {fmt(ph.get('per_layer'), 3)} | "
                         f"{fmt(cli.get('default'), 2)} / {fmt(cli.get('no_per_layer'), 2)} | "
                         f"{fmt(ratio(cli.get('default'), cli.get('no_per_layer')))} | "
                         f"{fmt(ratio(cli.get('every_sample'), cli.get('no_per_layer')))} | {v.get('quantize_nodes', '–')} / "
                         f"{v.get('dequantize_nodes', '–')} | {peer_nodes} |")
    return lines + [""]


def scaling_section(versatil, peer):
    lines = ["### Quantize time against depth", "",
             "Method: untrained MLPs (width 128) of L linear layers, static `x86_inductor` (peer: FX with the onednn "
             "mapping), same calibration batches; the lowest of 5.", "",
             "| linear layers | versatil s | peer s | versatil / peer | versatil s per layer |",
             "|---:|---:|---:|---:|---:|"]
    peer_by = {e["linears"]: e["quantize_seconds"] for e in (peer or {}).get("scaling", [])}
    points = [(e["linears"], e["quantize_seconds"]) for e in versatil.get("scaling", [])]
    for layers, seconds in points:
        lines.append(f"| {layers} | {fmt(seconds, 3)} | {fmt(peer_by.get(layers), 3)} | "
                     f"{fmt(ratio(seconds, peer_by.get(layers)))} | {fmt(seconds / layers, 4)} |")
    fit = None
    if len(points) >= 3:
        n = len(points)
        mx = sum(x for x, _ in points) / n
        my = sum(y for _, y in points) / n
        sxx = sum((x - mx) ** 2 for x, _ in points)
        slope = sum((x - mx) * (y - my) for x, y in points) / sxx
        intercept = my - slope * mx
        ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in points)
        ss_tot = sum((y - my) ** 2 for _, y in points)
        fit = (slope, intercept, 1 - ss_res / ss_tot if ss_tot else 1.0)
        lines += ["", f"Least-squares line for versatil: {fmt(1e3 * slope, 1)} ms per layer + {fmt(1e3 * intercept, 0)} ms, "
                  f"R² = {fit[2]:.4f} (1 is a perfect line: linear growth)."]
    return lines + [""], fit


def goals_section(summary, policy, slopes, fit, test_images, compile_noise_seconds):
    lines = ["## What it shows", "",
             "The goals from the issue, each against this run's numbers. A ✗ is a loss, written down as measured.", ""]
    both = [s for s in summary if s["v"] and s["p"]]
    acc = [s for s in both if s["top_d"] is not None]
    worst_acc = min(acc, key=lambda s: s["top_d"]) if acc else None
    worst_sqnr = min(both, key=lambda s: s["sqnr_d"]) if both else None
    lat = [s for s in both if s["r1"] is not None]
    losses_lat = [s for s in lat if s["r1"] > 1.1 or (s["r8"] or 0) > 1.1]
    q_static = [s for s in both if s["mode"] == "static" and s["rq"] is not None]
    q_dynamic = [s for s in both if s["mode"] == "dynamic" and s["rq"] is not None]
    failed = [s for s in summary if s["v_failed"]]
    peer_failed = [s for s in summary if s["p_failed"]]
    name = lambda s: f"{s['model']} {s['backend']} {s['mode']}"  # noqa: E731
    mark = lambda good: "✓" if good else "✗"  # noqa: E731

    def listing(items, key, unit):
        return ", ".join(f"{name(s)} ({fmt(s[key])} {unit})" for s in items)
    if worst_acc:
        below = [s for s in acc if s["top_d"] < 0]
        lines.append(f"- {mark(not below and not failed)} **Accuracy at least the peer's everywhere.** "
                     f"{len(acc) - len(below)} of {len(acc)} configurations match or beat the peer's top-1; "
                     f"worst Δ {fmt(worst_acc['top_d'])} pp ({name(worst_acc)}); one test image is "
                     f"{fmt(100 / test_images)} pp of the {test_images}."
                     + (" Below the peer: " + listing(below, "top_d", "pp") + "." if below else "")
                     + (" The default composition failed on " + ", ".join(name(s) for s in failed)
                        + (" (measured with the fallback in its row)" if all(s["v"] for s in failed) else "")
                        + "." if failed else ""))
        lower_sqnr = [s for s in both if s["sqnr_d"] < 0]
        lines.append(f"- {mark(not lower_sqnr)} **SQNR.** versatil's SQNR is at least the peer's in "
                     f"{len(both) - len(lower_sqnr)} of {len(both)} configurations; worst Δ {fmt(worst_sqnr['sqnr_d'])} dB "
                     f"({name(worst_sqnr)})." + (" Lower: " + listing(lower_sqnr, "sqnr_d", "dB") + "." if lower_sqnr else ""))
    if lat:
        lines.append(f"- {mark(not losses_lat)} **Quantized latency no worse than the peer's.** "
                     f"{len(lat) - len(losses_lat)} of {len(lat)} configurations within 10 % of the peer or faster at "
                     f"both batch sizes." + (" Slower by more than 10 %: " + ", ".join(
                         f"{name(s)} (×{fmt(s['r1'])} at b1, ×{fmt(s['r8'])} at b8)" for s in losses_lat) + "." if losses_lat else ""))
    if q_static:
        met = [s for s in q_static if s["rq"] <= 0.5]
        lines.append(f"- {mark(len(met) == len(q_static))} **Static quantize time, cold, at most 0.5× FX's** (prepare_fx + "
                     f"calibration + convert_fx on the same batches, each the first of a fresh process). {len(met)} of {len(q_static)} configurations; "
                     f"versatil / peer from {fmt(min(s['rq'] for s in q_static))} to {fmt(max(s['rq'] for s in q_static))}"
                     + (". Over: " + listing([s for s in q_static if s not in met], "rq", "×") if len(met) < len(q_static) else "")
                     + ".")
    if q_dynamic:
        met = [s for s in q_dynamic if s["rq"] <= 2.0 or s["v"]["quantize_seconds"] < 0.020]
        lines.append(f"- {mark(len(met) == len(q_dynamic))} **Dynamic quantize time, cold, at most 2× "
                     f"`quantize_dynamic`'s or under 20 ms.** {len(met)} of {len(q_dynamic)} configurations; versatil "
                     f"{fmt(1e3 * min(s['v']['quantize_seconds'] for s in q_dynamic), 1)}–"
                     f"{fmt(1e3 * max(s['v']['quantize_seconds'] for s in q_dynamic), 1)} ms, versatil / peer from "
                     f"{fmt(min(s['rq'] for s in q_dynamic))} to {fmt(max(s['rq'] for s in q_dynamic))}"
                     + (". Missed: " + listing([s for s in q_dynamic if s not in met], "rq", "×") if len(met) < len(q_dynamic) else "")
                     + ".")
    cli = [s for s in summary if s["v"] and s["v"].get("cli_seconds")]
    if cli:
        for s in cli:
            s["cli_ratio"] = s["v"]["cli_seconds"]["default"] / s["v"]["cli_seconds"]["no_per_layer"]
        met = [s for s in cli if s["cli_ratio"] <= 2.0]
        lines.append(f"- {mark(len(met) == len(cli))} **The CLI's default run (per-layer analysis included) at most 2× "
                     f"its run with `--no-per-layer`.** {len(met)} of {len(cli)} configurations; from "
                     f"{fmt(min(s['cli_ratio'] for s in cli))} to {fmt(max(s['cli_ratio'] for s in cli))}"
                     + (". Over: " + listing([s for s in cli if s not in met], "cli_ratio", "×") if len(met) < len(cli) else "")
                     + ".")
    if policy and policy[2] is not None:
        queries, constant, worst = policy
        lines.append(f"- {mark(worst < 1.0)} **Zero cost of the policy layer against a constant** (✓ when under one "
                     f"nanosecond more). Compile-time queries take at most {fmt(worst)} ns more than a literal "
                     f"({fmt(constant)} ns)" + (": no lookup is left at run time (section 1)." if worst < 1.0 else ".")
                     + " Run-time lookups and the process environment scope are not constants; section 1 compares "
                     "them with their hand-written baselines.")
    if slopes:
        worst = max(s for _, _, s in slopes)
        lines.append(f"- {mark(worst <= 1.0)} **Compile time grows no faster than linearly in the number of targets** "
                     f"(✓ when every exponent is ≤ 1). Growth exponents {', '.join(fmt(s) for _, _, s in slopes)}; "
                     f"section 2 gives the compile-time noise ({fmt(compile_noise_seconds)} s between repeated "
                     "compiles of one TU) beside the cost above the umbrella include.")
    if fit:
        lines.append(f"- {mark(fit[2] > 0.98)} **Quantize time linear in the number of layers** (✓ when R² > 0.98). "
                     f"R² = {fit[2]:.4f} for a straight line, {fmt(1e3 * fit[0], 1)} ms per layer.")
    if peer_failed:
        lines.append(f"- The peer failed on: {', '.join(name(s) for s in peer_failed)}.")
    return lines + [""]


def why_section(summary, slopes, compile_noise_figures, latency_spread):
    """Where versatil loses, with the mechanism (read from the code) and this run's numbers."""
    lines = ["## Where versatil loses, and why", "",
             "Figures are this run's; the mechanism given for each is read from the code, not measured.", ""]
    static = [s for s in summary if s["v"] and s["p"] and s["mode"] == "static" and "phases" in s["v"]
              and "phases" in s["p"]]
    if static:
        steps = ("prepare", "calibrate", "convert", "lower")  # the phases: per_layer and float_forward are not
        share = [s["v"]["phases"]["calibrate"] / sum(s["v"]["phases"][k] for k in steps) for s in static]
        cal = [s["v"]["phases"]["calibrate"] / s["p"]["phases"]["calibrate"] for s in static
               if s["p"]["phases"]["calibrate"] > 0]
        lines.append(
            "- **Static quantize time.** Calibration is "
            f"{fmt(100 * min(share), 0)}–{fmt(100 * max(share), 0)} % of versatil's static quantize time, and "
            f"versatil calibrates {fmt(min(cal))}–{fmt(max(cal))}× as long as the peer on the same batches. Both "
            "sides observe activations with the same HistogramObserver algorithm; versatil's observers are TorchScript "
            "modules whose statistics and range search are compiled LibTorch operators "
            "(`include/versatil/libtorch/observers/observers.hpp`), called by the TorchScript interpreter once per "
            "observed value. Prepare (clone, conv-bn folding, "
            "InsertObservers) and convert/lower (InsertQuantDeQuant, Finalize: freezing and weight packing) are "
            "LibTorch graph passes over the whole module, which the phase table times.")
        floored = [s for s in static if "float_forward" in s["v"]["phases"]]
        if floored:
            over_floor = [s["v"]["phases"]["calibrate"] / s["v"]["phases"]["float_forward"] for s in floored]
            # Half the peer's quantize time, against what versatil cannot go below: the float
            # forward over the calibration batches plus prepare, convert and lower as measured.
            bound = [s for s in floored if s["v"]["phases"]["float_forward"] > 0.5 * s["p"]["quantize_seconds"]]
            lines.append(
                f"  Calibrating takes {fmt(min(over_floor))}–{fmt(max(over_floor))}× the float model's own forward over "
                "the same batches (column forward), the least any calibration can take. "
                + (f"In {len(bound)} of {len(floored)} static configurations that forward alone is more than half the "
                   "peer's whole quantize time, so no calibration can bring them under 0.5×: "
                   + ", ".join(f"{s['model']} {s['backend']} ({fmt(s['v']['phases']['float_forward'], 3)} s against "
                               f"{fmt(s['p']['quantize_seconds'], 3)} s)" for s in bound) + "."
                   if bound else "The forward alone is under half the peer's quantize time in every static configuration."))
    dynamic = [s for s in summary if s["v"] and s["p"] and s["mode"] == "dynamic" and s["rq"]]
    slow = [s for s in dynamic if s["rq"] > 2.0 and s["v"]["quantize_seconds"] >= 0.020]
    if slow:
        lines.append(
            f"- **Dynamic quantize time** ({fmt(min(s['rq'] for s in slow))}–{fmt(max(s['rq'] for s in slow))}× the "
            "peer's where over the goal). `quantize_dynamic` swaps each `nn.Linear` for a dynamic one in place: no "
            "graph, no copy. versatil's direct path (`dynamic.hpp`) skips observers and calibration but still clones "
            "the module, folds it and freezes it (inlining every method), then packs each weight: the price of a "
            "frozen, self-contained TorchScript module.")
    if any(s["v_failed"] and s["model"] == "transformer_encoder" and s["backend"] == "xnnpack" for s in summary):
        lines.append(
            "- **transformer_encoder under the default `xnnpack` (static) fails in prepare.** Under `xnnpack`, "
            "`prepare.hpp`'s `qconfig_dict` gives every module that calls `aten::linear` its own per-tensor "
            "QConfig (XNNPACK's int8 linear kernel has no per-channel variant), built anew for each path. LibTorch "
            "1.13 tells QConfigs apart by the identity of their observer modules, so (a) the one activation "
            "feeding `q_proj`, `k_proj` and `v_proj` is configured with several observers (with one encoder "
            "block: \"Expecting all values in the graph only configured with one observer\"), and (b) the two "
            "encoder blocks, which share one TorchScript class, need different child types (with two blocks: "
            "the \"is not compatible with the type ... for the field 'q_proj'\" error above). `xnnpack:per_tensor` "
            "(no per-path entries) prepares both (checked by hand with one and two blocks)"
            + ("; the row is measured with it, which is also what the peer's qnnpack qconfig does (per-tensor "
               "weights)" if any(s["v"] and s["v"].get("fallback_from") for s in summary) else "")
            + ". A likely fix in the LibTorch layer: build the per-tensor "
            "QConfig once per target, sharing the target's activation observer module, and reuse that one value "
            "for every linear path.")
    if slopes and max(x for _, _, x in slopes) > 1.0:
        lines.append(
            "- **Compile time grows faster than linearly somewhere** (exponents "
            + ", ".join(f"N {a}→{b}: {fmt(x)}" for a, b, x in slopes if x > 1.0) + "). The composition rules "
            "(`check_composition`, `include/versatil/core/composition.hpp`) run in O(N log N) in the constant "
            "evaluator (one pass over the sorted paths); what else grows with N is the compiler's work on N "
            f"distinct `Target` types and their descriptors. Repeated compiles of one TU differ by up to "
            f"{fmt(compile_noise_figures[0])} s ({fmt(100 * compile_noise_figures[1], 0)} %) in this run: section 2 "
            "puts that beside the cost above the umbrella include.")
    lat = [s for s in summary if s["v"] and s["p"] and s["r1"] and (s["r1"] > 1.1 or (s["r8"] or 0) > 1.1)]
    if lat:
        def in_harness(s):
            a = ratio(s["p"].get("versatil_in_python_ms_b1"), s["p"].get("quantized_ms_b1"))
            b = ratio(s["p"].get("versatil_in_python_ms_b8"), s["p"].get("quantized_ms_b8"))
            return f"{s['model']} {s['backend']} {s['mode']} (C++ loop ×{fmt(s['r1'])} / ×{fmt(s['r8'])}, " \
                   f"peer's loop ×{fmt(a)} / ×{fmt(b)} at b1 / b8)"
        lines.append(
            "- **Latency losses.** Rows slower than the peer by more than 10 %: " + "; ".join(in_harness(s) for s in lat)
            + ". The second pair of ratios times versatil's saved lowered model in the peer's own Python loop, "
            "freshly loaded, right after the peer's model. LibTorch 1.13's oneDNN quantized convolution caches "
            "one oneDNN primitive per packed weight, for the input shape of its first call, and rebuilds it on "
            "every call of any other shape; versatil's lower() and quantize() therefore run their checks and "
            "evaluation on deep copies, and the C++ loop times a fresh copy whose first call has the timed "
            f"batch size. Noise in this run: the same float model, timed again in each of its rows, varies by up to "
            f"{fmt(100 * latency_spread[1][0], 0)} % at b1 and {fmt(100 * latency_spread[8][0], 0)} % at b8 "
            "(section \"Machine and command\").")
    return lines + [""]


def plot(summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [s for s in summary if s["v"] or s["p"]]
    fig, axes = plt.subplots(2, 1, figsize=(max(10, 0.75 * len(rows)), 8.5), sharex=True)
    width = 0.2
    series = (("versatil float", "v", "float_ms", "#9ecae1"), ("versatil quantized", "v", "quantized_ms", "#08519c"),
              ("peer float", "p", "float_ms", "#fdae6b"), ("peer quantized", "p", "quantized_ms", "#a63603"))
    for ax, batch in zip(axes, (1, 8)):
        for k, (label, side, key, color) in enumerate(series):
            xs, ys = [], []
            for i, s in enumerate(rows):
                run = s[side]
                if run and run.get(f"{key}_b{batch}"):
                    xs.append(i + (k - 1.5) * width)
                    ys.append(run[f"{key}_b{batch}"])
            ax.bar(xs, ys, width, label=label, color=color)
        ax.set_yscale("log")
        ax.set_ylabel(f"ms per forward, batch {batch}")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=4, fontsize=8, loc="upper left")
    axes[0].set_title("Float vs quantized latency, 1 thread (lower is better): versatil against PyTorch FX / quantize_dynamic")
    axes[1].set_xticks(range(len(rows)))
    axes[1].set_xticklabels([f"{s['model']}\n{s['backend']} {s['mode']}" for s in rows], rotation=60, ha="right",
                            fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def qat_section(versatil):
    """Issue 4: the time of a QAT training step (fake quantization on weights and activations)
    against the same float step."""
    rows = [(name, model["qat"]) for name, model in versatil["models"].items() if "qat" in model]
    if not rows:
        return []
    lines = ["## QAT training step", "",
             "Method: one Adam step on a batch of 64 Fashion-MNIST images, one thread, mean of 30 steps after 5 "
             "warm-up steps: the float model against the same model prepared for QAT (fake-quantize modules "
             "on every weight and activation, batch norm folded).", "",
             "| model | float step | x86_inductor:qat | overhead | xnnpack:qat | overhead |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, qat in rows:
        f = qat["float_step_ms"]
        x, n = qat["x86_inductor_step_ms"], qat["xnnpack_step_ms"]
        lines.append(f"| {name} | {f:.1f} ms | {x:.1f} ms | {x / f:.2f}x | {n:.1f} ms | {n / f:.2f}x |")
    return lines + [""]


def loading_section(versatil):
    """Issue 6: what loading a file checked costs against plain torch::jit::load, which trusts it."""
    rows = versatil.get("loading", [])
    if not rows:
        return []
    resident = versatil.get("loading_resident_mb", 0)
    lines = ["## Loading a file, checked", "",
             "Method: plain `torch::jit::load` trusts the file. `load_model` / `load_quantized` check it: the zip "
             "layout, every record's CRC-32 and pickle, every tensor within its storage (column *checked*, "
             "`compile_source::in_process`); by default they also compile the source only in a child process, "
             "which saves the module again for this process to load (column *with child*): LibTorch's compiler "
             "crashes on some source. The fork's cost grows with the loading process's resident memory, "
             f"{resident:.0f} MB here (the benchmark holds the datasets and models). Median of 7 interleaved "
             "loads each.", "",
             "| file | size | torch::jit::load | checked | ratio | with child | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        plain = row["plain_ms"]
        lines.append(f"| {row['model']} | {row['bytes'] / 1e6:.2f} MB | {plain:.1f} ms | "
                     f"{row['in_process_ms']:.1f} ms | {row['in_process_ms'] / plain:.2f}x | "
                     f"{row['in_child_ms']:.1f} ms | {row['in_child_ms'] / plain:.2f}x |")
    return lines + [""]


def accuracy_steps_section(data, versatil, peer):
    """Issue 12: the cle and bias_correction options, measured by benchmarks/accuracy_steps on its own."""
    if not data:
        return []
    config = data["config"]
    same = [name for name, model in data["models"].items()
            if versatil and name in versatil["models"] and abs(model["float_top1"] - versatil["models"][name]["float_top1"]) < 1e-9]
    differ = [name for name in data["models"] if name not in same]
    weights = ("Float top-1 equals the runtime section's for every model, so the weights are that section's and the "
               "PyTorch column applies to them." if not differ else
               "Float top-1 differs from the runtime section's for " + ", ".join(differ) +
               ": those models were trained differently here, and the PyTorch column is not theirs.")
    lines = ["## Accuracy steps: cross-layer equalization and bias correction", "",
             f"Command: `{data['command']}` ({data['date']}; load average {data['load_before']} before, "
             f"{data['load_after']} after). Method: the four models above, trained the same way "
             f"({config['steps']} steps, one thread), each quantized with the `cle` and `bias_correction` options "
             f"off, alone and together; the same {config['calibration_images']} calibration images (bias correction "
             f"measures on the first {config['bias_correction_samples']}) and {config['test_images']} held-out test "
             "images. SQNR of the logits against the float model; *mean output bias* is |E[q − f]| per logit, "
             "averaged over the logits (what bias correction removes); *time added* is the median of "
             f"{config['quantize_repeats']} quantizations (prepare, calibrate, convert, bias correction, lower) with "
             "the step minus the median without. " + weights + " PyTorch: the peer's static SQNR from the runtime "
             "section (its qnnpack qconfig has per-tensor weights, so it stands beside both xnnpack rows).", "",
             "| model | configuration | SQNR dB | + cle | + bias_correction | + both | best − plain | PyTorch | "
             "top-1 % plain → both | mean output bias plain → bias_correction | time added s: cle / bc / both |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    gains, losses, peer_rows = [], [], []
    dynamic_lines = []
    for name, model in data["models"].items():
        runs = {run["spec"]: run for run in model["runs"]}
        bases = []
        for run in model["runs"]:
            if run["base"] not in bases:
                bases.append(run["base"])
        for base in bases:
            def spec(steps):
                return base if not steps else base + (":" if ":" not in base else ",") + steps
            plain = runs[spec("")]
            found = {steps: runs.get(spec(steps)) for steps in ("cle", "bias_correction", "cle,bias_correction")}
            added = {steps: (run["quantize_seconds"] - plain["quantize_seconds"]) if run else None
                     for steps, run in found.items()}
            if "dynamic" in base:
                cle = found["cle"]
                dynamic_lines.append(f"| {name} | `{base}` | {fmt(plain['sqnr_db'])} | {fmt(cle['sqnr_db'])} | "
                                     f"{cle['sqnr_db'] - plain['sqnr_db']:+.2f} | {added['cle']:+.3f} |")
                continue
            sqnrs = {steps: run["sqnr_db"] for steps, run in found.items()}
            best_steps = max(sqnrs, key=sqnrs.get)
            best = sqnrs[best_steps] - plain["sqnr_db"]
            for steps, value in sqnrs.items():
                (gains if value > plain["sqnr_db"] else losses).append((f"{name} `{spec(steps)}`", value - plain["sqnr_db"]))
            backend = base.split(":")[0]
            peer_run = find_run(peer["models"][name]["runs"], backend, "static") if peer and name in same else None
            peer_sqnr = peer_run["sqnr_db"] if ok(peer_run) else None
            if peer_sqnr is not None:
                peer_rows.append((name, base, plain["sqnr_db"] - peer_sqnr, max(sqnrs.values()) - peer_sqnr, best_steps))
            both = found["cle,bias_correction"]
            lines.append(
                f"| {name} | `{base}` | {fmt(plain['sqnr_db'])} | {fmt(sqnrs['cle'])} | {fmt(sqnrs['bias_correction'])} | "
                f"{fmt(sqnrs['cle,bias_correction'])} | {best:+.2f} ({best_steps.replace(',', ' + ')}) | {fmt(peer_sqnr)} | "
                f"{100 * plain['quantized_top1']:.2f} → {100 * both['quantized_top1']:.2f} | "
                f"{plain['mean_output_bias']:.4f} → {found['bias_correction']['mean_output_bias']:.4f} | "
                f"{added['cle']:+.3f} / {added['bias_correction']:+.3f} / {added['cle,bias_correction']:+.3f} |")
    lines.append("")
    static_count = len(gains) + len(losses)
    lines.append(f"Of the {static_count} static configurations with a step, {len(gains)} gain SQNR over the same "
                 "configuration without it" + (", and these lose: " + ", ".join(f"{k} ({d:+.2f} dB)" for k, d in losses)
                                               if losses else "") + ".")
    if peer_rows:
        below_before = [r for r in peer_rows if r[2] < 0]
        below_after = [r for r in peer_rows if r[3] < 0]
        lines.append(f"Against PyTorch: {len(below_before)} of {len(peer_rows)} static rows are below the peer "
                     "without the steps" + (" (" + ", ".join(f"{n} `{b}` {d:+.2f} dB" for n, b, d, _, _ in below_before) + ")"
                                            if below_before else "") +
                     f"; with the best step per row, {len(below_after)}" +
                     (" (" + ", ".join(f"{n} `{b}` {a:+.2f} dB" for n, b, _, a, _ in below_after) + ")" if below_after else "") +
                     ". Choosing the step per model is left to the accuracy-target work of issue 12.")
    lines += ["",
              "Mechanisms, read from the code: `cle` equalizes weight ranges, not activation ranges. Dividing a "
              "channel's weights by s_i multiplies the relu activation after it by 1/s_i, so where the first layer's "
              "weights were the narrower ones the per-tensor activation range between the two layers widens. Checked "
              "by hand when this section was written, not by each run: on resnet_cnn `xnnpack:per_tensor`, the "
              "activation scale between layer2.1's conv1 and conv2 goes from 0.023 to 0.042 with `cle` while the two "
              "weight scales move from 0.0011 and 0.0022 to 0.0013 each; on mobilenet_cnn the depthwise weight scales "
              "halve (0.015–0.018 to 0.0077) and the activation scales move by under 30 % either way. On mlp and "
              "transformer_encoder `xnnpack` and `xnnpack:per_tensor` are one configuration: XNNPACK's int8 linear "
              "kernel in this LibTorch is per-tensor only, so every linear layer gets per-tensor weights under "
              "`xnnpack` (README, \"What this LibTorch imposes\"). Bias correction's time is one forward per layer "
              "over its samples, each stopped at the layer it measures: it grows with depth times model cost "
              "(transformer_encoder, 14 linear layers, adds the most).", ""]
    if dynamic_lines:
        lines += ["Dynamic quantization takes no calibration data, so only `cle` applies (to linear → relu → linear "
                  "chains; convolutions stay float):", "",
                  "| model | configuration | SQNR dB | + cle | Δ | time added s |", "|---|---|---:|---:|---:|---:|"]
        lines += dynamic_lines + [""]
    return lines


def main():
    parser = argparse.ArgumentParser()
    for name in ("out", "root"):
        parser.add_argument("--" + name, required=True)
    for name in ("command", "started", "load-before", "load-after"):
        parser.add_argument("--" + name)
    parser.add_argument("--seconds", type=int)
    args = parser.parse_args()
    out, root = Path(args.out), Path(args.root)
    if args.seconds is not None:
        (out / "run.json").write_text(json.dumps(record_run(args), indent=1) + "\n")
    run = load(out / "run.json")
    if run is None:
        sys.exit(f"{out / 'run.json'} is missing: pass the run's --command, --started, --seconds, --load-before "
                 "and --load-after to record it")
    policy, compile_data = load(out / "policy.json"), load(out / "compile.json")
    versatil, peer = load(out / "versatil.json"), load(out / "peer.json")

    lines = ["# Benchmarks", "",
             "versatil against what a user would use instead, measured in one run of "
             f"`{run['command']}` on the machine below. Written by `benchmarks/report.py` from the run's "
             "measurements (kept in `benchmarks/results/`): every figure, and every statement about what the run "
             "found, is computed from them. Fixed text describes the method (marked \"Method:\") or the mechanism "
             "behind a figure, as read from the code, or names what was checked by hand. Ratios are versatil / "
             "baseline: below 1 versatil is faster.", ""]
    lines += machine_section(run, versatil, peer, compile_data)
    runtime, summary = runtime_sections(versatil, peer)
    scaling, fit = scaling_section(versatil, peer)
    compile_lines, slopes = compile_section(compile_data) if compile_data else (["## 2. Compile-time cost", "", "Not run.", ""], [])
    policy_lines, policy_summary = policy_section(policy, run)
    noise = compile_noise(compile_data) if compile_data else (0.0, 0.0)
    lines += goals_section(summary, policy_summary, slopes, fit, versatil["config"]["test_images"], noise[0])
    lines += why_section(summary, slopes, noise, float_latency_spread(versatil))
    has_plot = plot(summary, root / "benchmarks" / "latency.png")
    if has_plot:
        lines += ["![Float vs quantized latency per model and backend, versatil against the peer](latency.png)", ""]
    lines += policy_lines + compile_lines + runtime + phases_section(versatil, peer) + scaling + qat_section(versatil) + loading_section(versatil)
    lines += accuracy_steps_section(load(root / "benchmarks" / "results" / "accuracy_steps.json"), versatil, peer)
    architectures = root / "benchmarks" / "results" / "architectures.json"
    if architectures.exists():  # measured by benchmarks/zoo_peer.py, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        from zoo_peer import render
        lines += render(json.loads(architectures.read_text()))
    firmware = root / "benchmarks" / "results" / "firmware.json"
    if firmware.exists():  # measured by benchmarks/firmware.py, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        import firmware as firmware_benchmark
        lines += firmware_benchmark.render(json.loads(firmware.read_text()))
    firmware_kernels = root / "benchmarks" / "results" / "firmware_kernels.json"
    if firmware_kernels.exists():  # measured by benchmarks/firmware_kernels.py, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        import firmware_kernels as firmware_kernels_benchmark
        lines += firmware_kernels_benchmark.results_section(json.loads(firmware_kernels.read_text()))
    mlperf_tiny = root / "benchmarks" / "results" / "mlperf_tiny.json"
    if mlperf_tiny.exists():  # measured by benchmarks/mlperf_tiny.py
        sys.path.insert(0, str(root / "benchmarks"))
        import mlperf_tiny as mlperf_tiny_benchmark
        lines += mlperf_tiny_benchmark.render(json.loads(mlperf_tiny.read_text()))
    calibration_methods = root / "benchmarks" / "results" / "calibration_methods.json"
    if calibration_methods.exists():  # measured by benchmarks/calibration_methods, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        import calibration_methods as calibration_methods_benchmark
        lines += calibration_methods_benchmark.render(json.loads(calibration_methods.read_text()), peer, versatil)
    architecture_methods = root / "benchmarks" / "results" / "architecture_methods.json"
    if architecture_methods.exists():  # measured by benchmarks/zoo_peer.py --methods, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        from zoo_peer import render_methods
        lines += render_methods(json.loads(architecture_methods.read_text()))
    scale_out = root / "benchmarks" / "results" / "scale_out.json"
    if scale_out.exists():  # measured by benchmarks/scale_out.py, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        import scale_out as scale_out_benchmark
        lines += scale_out_benchmark.render(json.loads(scale_out.read_text()))
    scale_out_qat = root / "benchmarks" / "results" / "scale_out_qat.json"
    if scale_out_qat.exists():  # measured by benchmarks/scale_out.py --qat-steps, on its own
        sys.path.insert(0, str(root / "benchmarks"))
        import scale_out as scale_out_benchmark
        lines += scale_out_benchmark.render_qat(json.loads(scale_out_qat.read_text()))
    (root / "benchmarks" / "RESULTS.md").write_text("\n".join(lines).rstrip() + "\n")


if __name__ == "__main__":
    main()

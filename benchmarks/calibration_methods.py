"""RESULTS.md's "Calibration methods" section from benchmarks/calibration_methods's JSON.

    /usr/bin/python3 benchmarks/calibration_methods.py [RESULTS.json [PEER.json [VERSATIL.json]]]

Defaults: benchmarks/results/calibration_methods.json, and the runtime section's peer.json and
versatil.json beside it (PyTorch's FX static SQNR on the same weights, checked by float top-1).
Replaces the section in benchmarks/RESULTS.md (report.py renders it the same way when it rewrites
the whole file). Every figure is computed here from the JSON.
"""
import json
import statistics
import sys
from pathlib import Path

METHODS = ["histogram (default)", "minmax", "moving_minmax", "percentile", "entropy", "auto", "output"]
STEPS = ["", "cle", "cle,bias_correction", "gptq", "cle,bias_correction,gptq"]
TITLE = "## Calibration methods"


def steps_label(steps):
    return "+ " + steps.replace(",", " + ") if steps else "none"


def peer_sqnr(peer, versatil, name, model, base):
    """PyTorch's FX static SQNR for this backend, if the peer measured the same weights."""
    if not peer or not versatil or name not in peer["models"] or name not in versatil["models"]:
        return None
    if abs(model["float_top1"] - versatil["models"][name]["float_top1"]) > 1e-9:
        return None
    backend = base.split(":")[0]
    for run in peer["models"][name]["runs"]:
        if run["backend"] == backend and run["mode"] == "static" and "sqnr_db" in run:
            return run["sqnr_db"]
    return None


def best_per_configuration(data, peer, versatil):
    """(configuration, its best SQNR over every run minus PyTorch's) for each model and base that
    PyTorch measured on the same weights: the issue's target counts these."""
    deltas = []
    for name, model in data["models"].items():
        for base in dict.fromkeys(run["base"] for run in model["runs"]):
            reference = peer_sqnr(peer, versatil, name, model, base)
            measured = [run["sqnr_db"] for run in model["runs"] if run["base"] == base and "sqnr_db" in run]
            if measured and reference is not None:
                deltas.append((f"{name} `{base}`", max(measured) - reference))
    return deltas


def load(paths=()):
    """calibration_methods.json, peer.json and versatil.json: `paths` first, then the defaults."""
    results = Path(__file__).resolve().parent / "results"
    paths = [Path(p) for p in paths]
    paths += [results / "calibration_methods.json", results / "peer.json", results / "versatil.json"][len(paths):]
    return tuple(json.loads(p.read_text()) if p.exists() else None for p in paths)


def fmt(value):
    return "—" if value is None else f"{value:.2f}"


def median_line(label, deltas):
    below = [f"{where} {delta:+.2f}" for where, delta in deltas if delta < 0]
    values = [delta for _, delta in deltas]
    return (f"{label}: median {statistics.median(values):+.2f} dB over {len(values)} configurations, worst "
            f"{min(values):+.2f}; {len(below)} below PyTorch" + (f" ({', '.join(below)})" if below else "") + ".")


def render(data, peer, versatil):
    lines = [TITLE, "",
             f"Command: `{data['command']}`, then `/usr/bin/python3 benchmarks/calibration_methods.py` for this "
             f"section (release build, {data['date']}; load average {data.get('load_before', '?')} before, "
             f"{data.get('load_after', '?')} after, on 2 cores: above 2, other jobs shared them and the times are "
             f"loose). Method: the four models of the runtime section, trained the same way ({data['steps']} steps, "
             "one thread), each quantized with each `calibration=` method (the first column is the backend default, "
             "the histogram search; naming `calibration=histogram` gives the same observers), alone and combined "
             "with the accuracy steps `cle`, `cle,bias_correction`, `gptq` and `cle,bias_correction,gptq`; 256 calibration images, SQNR dB of the logits "
             "on the 2000 held-out test images. PyTorch: the peer's FX static SQNR on the same weights (checked by "
             "float top-1; its qnnpack qconfig has per-tensor weights, so it stands beside both xnnpack rows).", "",
             "| model | configuration | accuracy steps | " + " | ".join(METHODS) + " | best (method) | PyTorch |",
             "|---|---|---|" + "---:|" * len(METHODS) + "---|---:|"]
    plain_deltas, default_deltas, best_deltas, refused = [], [], [], []
    distinct_deltas, seen_results = [], set()
    time_lines = []
    for name, model in data["models"].items():
        runs = {(run["base"], run.get("accuracy_steps", ""), run["method"]): run for run in model["runs"]}
        bases = list(dict.fromkeys(run["base"] for run in model["runs"]))
        for base in bases:
            reference = peer_sqnr(peer, versatil, name, model, base)
            best_overall = None
            for steps in STEPS:
                row = [runs.get((base, steps, method)) for method in METHODS]
                if all(run is None for run in row):
                    continue
                measured = [(run["sqnr_db"], method) for run, method in zip(row, METHODS) if run and "sqnr_db" in run]
                refused += [run["spec"] for run in row if run and "error" in run]
                best = max(measured) if measured else None
                if best and (best_overall is None or best[0] > best_overall[0][0]):
                    best_overall = (best, steps)
                if steps == "" and best and reference is not None:
                    plain_deltas.append((f"{name} `{base}`", best[0] - reference))
                    default_deltas.append((f"{name} `{base}`", row[0]["sqnr_db"] - reference))
                cells = [fmt(run.get("sqnr_db")) if run else "—" for run in row]
                lines.append(f"| {name} | `{base}` | {steps_label(steps)} | " + " | ".join(cells) +
                             f" | {fmt(best[0]) if best else '—'} ({best[1] if best else '—'}) | {fmt(reference)} |")
                if steps == "":
                    time_lines.append(f"| {name} | `{base}` | " + " | ".join(
                        f"{run['quantize_seconds']:.2f}" if run and "quantize_seconds" in run else "—" for run in row) + " |")
            if best_overall and reference is not None:
                (sqnr, method), steps = best_overall
                best_deltas.append((f"{name} `{base}` ({method}, {steps_label(steps)})", sqnr - reference))
                # Two configurations that quantize alike (every run's SQNR equal) count once here.
                results = (name, tuple(sorted((run.get("accuracy_steps", ""), run["method"], run.get("sqnr_db"))
                                              for run in model["runs"] if run["base"] == base)))
                if results not in seen_results:
                    seen_results.add(results)
                    distinct_deltas.append((f"{name} `{base}`", sqnr - reference))
    lines.append("")
    if refused:
        lines += ["Refused by the backend, so not measured: " + ", ".join(f"`{spec}`" for spec in refused) + ".", ""]
    if best_deltas:
        best_median = statistics.median(delta for _, delta in best_deltas)
        lines += ["Against the issue's target (\"no configuration below PyTorch's SQNR, and the median configuration "
                  "+3 dB above it, with the best method per model\"), per configuration, best minus PyTorch:", "",
                  "- " + median_line("default alone", default_deltas),
                  "- " + median_line("best calibration method, no accuracy steps", plain_deltas),
                  "- " + median_line("best of every method × accuracy steps", best_deltas),
                  "  Per configuration: " + "; ".join(f"{where} {delta:+.2f}" for where, delta in best_deltas) + ".",
                  "- " + median_line("the same, counting once the configurations whose every run gives the same SQNR "
                                     "(on mlp and transformer_encoder `xnnpack` and `xnnpack:per_tensor` are one: "
                                     "XNNPACK's int8 linear kernel here is per-tensor only)", distinct_deltas),
                  "",
                  "The +3 dB median is " + ("**reached**" if best_median >= 3.0 else "**not reached**") +
                  f" ({best_median:+.2f} dB) with the best configuration per model, and "
                  + ("no" if all(delta >= 0 for _, delta in best_deltas) else "some") +
                  " configuration is below PyTorch.", ""]
    entropy = [(run["sqnr_db"], name) for name, model in data["models"].items() for run in model["runs"]
               if run["method"] == "entropy" and "sqnr_db" in run]
    if entropy:
        gaps = []
        for name, model in data["models"].items():
            for base in dict.fromkeys(run["base"] for run in model["runs"]):
                plain = {run["method"]: run["sqnr_db"] for run in model["runs"]
                         if run["base"] == base and not run.get("accuracy_steps") and "sqnr_db" in run}
                if "entropy" in plain:
                    gaps.append(max(v for k, v in plain.items() if k != "entropy") - plain["entropy"])
        lines += [f"`entropy` (TensorRT's KL search, on a fixed-width histogram searched at each end of the affine "
                  f"range; see README \"Calibration methods\") ranges from {min(entropy)[0]:.2f} to "
                  f"{max(entropy)[0]:.2f} dB here, {min(gaps):.2f} to {max(gaps):.2f} dB below the best other method "
                  "of the same configuration (no accuracy steps). Mechanism, read from the code: it minimises the KL "
                  "divergence between the clipped histogram and its quantized version, not the squared error that "
                  "SQNR measures; the per-tensor errors that `torch_tests -sf='*calibration.cpp' -s` prints show which "
                  "activations it clips harder than the other methods.", ""]
    lines += ["Quantize time in seconds (one quantization: prepare, calibrate, convert, lower; no accuracy steps), so "
              "what a method adds is its time minus the default's:", "",
              "| model | configuration | " + " | ".join(METHODS) + " |", "|---|---|" + "---:|" * len(METHODS)]
    lines += time_lines + [""]
    return lines


def splice(path, section):
    text = path.read_text()
    start = text.index(TITLE + "\n")
    end = text.find("\n## ", start + len(TITLE))
    tail = text[end + 1:] if end != -1 else ""
    path.write_text(text[:start] + "\n".join(section).rstrip() + "\n\n" + tail)


def main():
    data, peer, versatil = load(sys.argv[1:4])
    splice(Path(__file__).resolve().parent / "RESULTS.md", render(data, peer, versatil))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""GPTQ against AdaRound (the gptq and adaround options) on the architecture zoo
(tests/zoo/make_zoo.py): each model's static configurations through versatil-quantize with
neither, with gptq and with adaround, on the same files and batches; the output SQNR against the
float model on the held-out samples (the report's sqnr_db), the quantize time, and how many
layers each rounding rounded (the rest keep nearest rounding, the report says why).

  weight_rounding.py --cli VERSATIL_QUANTIZE --zoo DIR [--only NAMES] [--backends NAMES]
  weight_rounding.py --render

Writes benchmarks/results/weight_rounding.json (with the command that measured it) after each
row and prints the table docs/accuracy.md shows; --render prints it again from the JSON."""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "weight_rounding.json"
ROUNDINGS = ["", "gptq", "adaround"]


def rounded_layers(report, name):
    """Layers the report says `name` rounded (its per-target note), and those it left to nearest."""
    rounded = left = 0
    for change in report.get("adjustments", []):
        text = change.get("change", "") if isinstance(change, dict) else str(change)
        if text.startswith(name + ": ") and " layer(s) rounded on " in text:
            rounded += int(text[len(name) + 2:].split(" ")[0])
        if text.startswith(name + ": rounded to nearest"):
            left += 1
    return rounded, left


def run(cli, zoo, entry, backend, rounding, scratch):
    target = "=" + backend + (":" + rounding if rounding else "")
    report_path = scratch / f"{entry['name']}.{backend}.{rounding or 'plain'}.json"
    args = [cli, "--model", zoo / entry["model"], "--data", zoo / entry["data"], "--target", target,
            "--report", report_path, "--no-per-layer"]
    start = time.monotonic()
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - start
    if result.returncode != 0:
        return {"error": (result.stdout + result.stderr).strip().splitlines()[-1]}
    report = json.loads(report_path.read_text())
    row = {"sqnr_db": report["sqnr_db"], "seconds": round(seconds, 1)}
    if rounding:
        row["layers_rounded"], row["layers_left"] = rounded_layers(report, rounding)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli")
    parser.add_argument("--zoo")
    parser.add_argument("--render", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--backends", default="x86_inductor,xnnpack")
    args = parser.parse_args()
    if args.render:
        print(render(json.loads(RESULTS.read_text())["rows"]))
        return
    if not args.cli or not args.zoo:
        parser.error("--cli and --zoo are needed to measure")
    zoo = Path(args.zoo)
    entries = json.loads((zoo / "zoo.json").read_text())
    entries = entries if isinstance(entries, list) else entries["models"]
    only = set(filter(None, args.only.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for entry in entries:
            if only and entry["name"] not in only:
                continue
            for backend in args.backends.split(","):
                row = {"model": entry["name"], "backend": backend}
                for rounding in ROUNDINGS:
                    row[rounding or "nearest"] = run(args.cli, zoo, entry, backend, rounding, Path(scratch))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                write(rows)  # after each row, so that a run cut short keeps what it measured
    print(render(rows))


def write(rows):
    RESULTS.write_text(json.dumps({"command": " ".join(["benchmarks/weight_rounding.py"] + sys.argv[1:]),
                                   "rows": rows}, indent=1) + "\n")


def render(rows):
    def cell(result, key):
        return "error" if "error" in result else f"{result[key]:.2f}" if key == "sqnr_db" else str(result[key])

    lines = ["| model | backend | nearest dB | gptq dB | adaround dB | adaround layers (left to nearest) "
             "| seconds: nearest / gptq / adaround |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        n, g, a = r["nearest"], r["gptq"], r["adaround"]
        layers = "error" if "error" in a else f"{a['layers_rounded']} ({a['layers_left']})"
        seconds = " / ".join("-" if "error" in x else f"{x['seconds']:.1f}" for x in (n, g, a))
        lines.append(f"| {r['model']} | {r['backend']} | {cell(n, 'sqnr_db')} | {cell(g, 'sqnr_db')} | "
                     f"{cell(a, 'sqnr_db')} | {layers} | {seconds} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

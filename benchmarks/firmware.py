#!/usr/bin/env python3
"""The firmware runtime measured on exported models (issue 11): memory plan, code size,
instructions per inference on the Cortex-M4 under QEMU, header compile time. Writes
benchmarks/results/firmware.json; benchmarks/report.py renders it as the "Firmware" section
of RESULTS.md (render() below). About a minute on 2 cores; needs no LibTorch.

  benchmarks/firmware.py [--model NAME=HEADER:NAMESPACE ...] [--proof NAME=PROOF.json ...]
                        [--cxx c++] [--arm arm-none-eabi-g++]

Always measures the synthetic graph of tests/firmware/synthetic_graph.hpp (seed 1: every op
and option, random weights); --model adds exported models (versatil-quantize --export).
--proof adds, for a model, what tests/firmware/check_export.py --device-compiler ... --keep DIR
measured (DIR/fm_cnn/proof.json): the device's top-1 against LibTorch's quantized model on the
embedded test images, and the export's own figures (export time).

The Fashion-MNIST row of RESULTS.md (Debian's python3-torch trains the model, about 2 minutes):

  /usr/bin/python3 tests/firmware/check_export.py --cli build/tools/versatil-quantize --include include \
      --max-lsb 1 --min-top1 0.995 --device-compiler arm-none-eabi-g++ --images 200 --keep fm --compiler c++
  benchmarks/firmware.py --model fm_cnn=fm/fm_cnn/fm_cnn.hpp:fm_cnn --proof fm_cnn=fm/fm_cnn/proof.json
"""
import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "firmware"))
import device  # noqa: E402  (the board build, nm and size helpers of the device test)

HOST_FLAGS = ["-std=c++20", "-O2"]
QEMU_ICOUNT = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel"]


def run(command, **kwargs):
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)


def version(program):
    return run([program, "--version"]).stdout.splitlines()[0]


def timed_compile(command, repeats=3):
    """Median seconds of `command` (a compile with -fsyntax-only)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(command)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def probe_figures(cxx, header, namespace, scratch):
    source = scratch / "probe.cpp"
    source.write_text(f'#include "{header}"\n#include <cstdio>\nint main() {{ using m = {namespace}::model;\n'
                      'std::printf("%zu %zu %zu %zu %zu %zu\\n", m::arena_bytes, m::arena_lower_bound_bytes, '
                      'm::greedy_planner_bytes, m::parameter_bytes, m::input_size, m::output_size); }\n')
    exe = scratch / "probe"
    run([cxx, *HOST_FLAGS, f"-I{ROOT / 'include'}", str(source), "-o", str(exe)])
    keys = ["arena_bytes", "arena_lower_bound_bytes", "greedy_planner_bytes", "parameter_bytes", "input_size",
            "output_size"]
    return dict(zip(keys, map(int, run([str(exe)]).stdout.split())))


def measure(args, name, header, namespace, images, scratch):
    print(f"== {name}", flush=True)
    result = {"name": name, "header_bytes": Path(header).stat().st_size}
    result.update(probe_figures(args.cxx, header, namespace, scratch))
    tu = scratch / f"{name}_tu.cpp"
    tu.write_text(f'#include "{header}"\n')
    result["compile_seconds_host"] = timed_compile([args.cxx, *HOST_FLAGS, f"-I{ROOT / 'include'}", "-fsyntax-only", str(tu)])
    result["compile_seconds_arm"] = timed_compile([args.arm, *device.FLAGS, f"-I{ROOT / 'include'}", "-fsyntax-only", str(tu)])
    defines = [f'VERSATIL_MODEL_HEADER="{header}"', f"VERSATIL_MODEL_NAMESPACE={namespace}",
               f'VERSATIL_IMAGES_HEADER="{images}"']
    build_args = argparse.Namespace(compiler=args.arm, root=str(ROOT), define=defines, include_dir=[],
                                    source=str(ROOT / "benchmarks" / "firmware_inference.cpp"))
    result["variants"] = {}
    for variant in ("dsp", "portable"):
        out = scratch / f"{name}_{variant}"
        out.mkdir()
        elf = device.build(build_args, variant, out)
        forbidden = device.check_symbols(build_args, elf)
        code = device.runtime_code(device.symbols(build_args, elf))
        qemu = subprocess.run(QEMU_ICOUNT + [str(elf)], capture_output=True, text=True, timeout=600)
        if qemu.returncode != 0:
            sys.exit(f"{name} {variant}: QEMU exited {qemu.returncode}: {qemu.stderr}")
        counts = [int(line.split()[-1]) for line in qemu.stdout.splitlines() if line.startswith("inference ")]
        result["variants"][variant] = {
            "sections": device.sections(build_args, elf),
            "runtime_code_bytes": sum(code.values()),
            "runtime_functions": code,
            "forbidden_symbols": forbidden,
            "instructions_per_inference": statistics.median(counts),
            "instructions_min_max": [min(counts), max(counts)],
            "images": len(counts),
        }
        print(f"{variant}: {statistics.median(counts):.0f} instructions per inference, runtime code "
              f"{sum(code.values())} B, .text {result['variants'][variant]['sections'].get('.text')} B", flush=True)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", action="append", default=[], help="NAME=HEADER:NAMESPACE")
    parser.add_argument("--proof", action="append", default=[], help="NAME=PROOF.json (check_export.py --keep)")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--arm", default="arm-none-eabi-g++")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "firmware.json"))
    args = parser.parse_args()
    for program in (args.cxx, args.arm, "qemu-system-arm"):
        if not shutil.which(program):
            sys.exit(f"{program} not found (tools/install-deps installs it)")
    started = time.time()
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        writer = scratch / "write_synthetic_header"
        run([args.cxx, *HOST_FLAGS, f"-I{ROOT / 'include'}", f"-I{ROOT / 'tests' / 'firmware'}",
             str(ROOT / "tests" / "firmware" / "write_synthetic_header.cpp"), "-o", str(writer)])
        synthetic = scratch / "synthetic_model.hpp"
        start = time.perf_counter()
        run([str(writer), "1", "synthetic_model", str(synthetic)])
        generate_seconds = time.perf_counter() - start
        images = scratch / "images.hpp"
        run([sys.executable, str(ROOT / "examples" / "firmware" / "embed_images.py"), "--count", "10", "--out", str(images)])
        models = [measure(args, "synthetic", str(synthetic), "synthetic_model", str(images), scratch)]
        models[0]["generate_seconds"] = generate_seconds
        for spec in args.model:
            name, rest = spec.split("=", 1)
            header, namespace = rest.rsplit(":", 1)
            models.append(measure(args, name, str(Path(header).resolve()), namespace, str(images), scratch))
        for spec in args.proof:
            name, path = spec.split("=", 1)
            model = next((m for m in models if m["name"] == name), None)
            if model is None:
                sys.exit(f"--proof {spec}: no --model named {name}")
            model["proof"] = json.loads(Path(path).read_text())
    data = {
        "command": "benchmarks/firmware.py" + "".join(f" --model {m}" for m in args.model) +
                   "".join(f" --proof {p}" for p in args.proof),
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "host": platform.machine(),
        "compilers": {"host": version(args.cxx), "arm": version(args.arm), "qemu": version("qemu-system-arm")},
        "arm_flags": " ".join(device.FLAGS),
        "models": models,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print("wrote", args.out)


def render(data):
    """The "Firmware" section of RESULTS.md."""
    lines = ["## Firmware", "",
             f"Measured by `{data['command']}` on {data['started']} ({data['seconds']:.0f} s; "
             f"{data['compilers']['arm']}, `{data['arm_flags']}`; {data['compilers']['qemu']}). Method: each model's "
             "header (codegen::header_for) is compiled into a program for the MPS2 AN386 board (Cortex-M4, the "
             "project's startup code and linker script) that runs it on 10 Fashion-MNIST test images under QEMU "
             "with `-icount shift=0`; the SysTick then counts instructions (40 per tick). These are instruction "
             "counts, not cycles: QEMU models neither the pipeline nor memory wait states, and not the DWT cycle "
             "counter, so this machine cannot give a cycle count. *Runtime code* is the size of the functions of "
             "`versatil::` and `model::run` in the linked image (nm); parameters live in `.rodata`, so the image's "
             "`.text` holds no parameter array. The arena figures are the header's own constants (the planner "
             "runs while compiling); *greedy* is TFLite Micro's greedy-by-size planner on the same graph without "
             "in-place layers.", "",
             "| model | arena | live-set bound | greedy planner | parameters | runtime code (DSP / portable) | "
             "image .text | instructions per inference (DSP / portable) | header compile, host / arm |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in data["models"]:
        dsp, portable = m["variants"]["dsp"], m["variants"]["portable"]
        lines.append(
            f"| {m['name']} | {m['arena_bytes']} B | {m['arena_lower_bound_bytes']} B | {m['greedy_planner_bytes']} B | "
            f"{m['parameter_bytes']} B | {dsp['runtime_code_bytes']} / {portable['runtime_code_bytes']} B | "
            f"{dsp['sections'].get('.text', 0)} B | {dsp['instructions_per_inference']:,.0f} / "
            f"{portable['instructions_per_inference']:,.0f} | {m['compile_seconds_host']:.2f} / "
            f"{m['compile_seconds_arm']:.2f} s |")
    lines.append("")
    for m in data["models"]:
        dsp, portable = m["variants"]["dsp"], m["variants"]["portable"]
        at_bound = m["arena_bytes"] == m["arena_lower_bound_bytes"]
        below = m["arena_bytes"] < m["greedy_planner_bytes"]
        bad = dsp["forbidden_symbols"] + portable["forbidden_symbols"]
        lines.append(
            f"- **{m['name']}**: arena {'equal to' if at_bound else 'above'} the live-set bound"
            f"{'' if at_bound else ' by ' + str(m['arena_bytes'] - m['arena_lower_bound_bytes']) + ' B'}, "
            f"{'%.0f %% of' % (100 * m['arena_bytes'] / m['greedy_planner_bytes']) if below else 'not below'} the "
            f"greedy planner's; runtime code {max(dsp['runtime_code_bytes'], portable['runtime_code_bytes'])} B "
            f"({'within' if max(dsp['runtime_code_bytes'], portable['runtime_code_bytes']) <= 8192 else 'over'} the "
            f"8 KiB goal); the DSP path executes {dsp['instructions_per_inference'] / portable['instructions_per_inference']:.2f}x "
            f"the portable path's instructions; "
            f"{'no heap or exception symbol linked' if not bad else 'links ' + ', '.join(sorted(set(bad)))}.")
        proof = m.get("proof")
        if proof:
            f = proof["firmware_report"]
            lines.append(
                f"  Proof (`/usr/bin/python3 tests/firmware/check_export.py --cli build/tools/versatil-quantize --include "
                f"include --max-lsb 1 --min-top1 0.995 --device-compiler arm-none-eabi-g++ --images {proof['images']} "
                f"--keep DIR --compiler c++`, as `meson test firmware_export_fashion_mnist` runs it; DIR/fm_cnn holds "
                f"the header and proof.json given above): top-1 of the device run (QEMU, DSP and portable "
                f"images byte-identical to the host build) equal to LibTorch's quantized model on "
                f"{proof['device_equals_libtorch_top1']} of {proof['images']} test images ({proof['device_correct']} "
                f"correct); float top-1 {100 * proof['float_accuracy']:.2f} %, int8 {100 * proof['quantized_accuracy']:.2f} % "
                f"on 2000; host runtime vs LibTorch on 2000: top-1 {100 * f['top1_agreement']:.2f} %, max "
                f"{f['max_lsb_diff']} LSB ({f['differing_elements']} of {f['compared_elements']} outputs differ); "
                f"export {f['export_seconds']:.3f} s (integer graph to header, in the CLI), header "
                f"{f['header_bytes'] / 1024:.1f} KiB.")
    return lines + [""]


if __name__ == "__main__":
    main()

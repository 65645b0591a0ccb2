#!/usr/bin/python3
"""The firmware export end to end: examples/firmware/fm_cnn.py trains and scripts a Fashion-MNIST
CNN with depthwise and residual layers; versatil-quantize quantizes it for cortex_m and exports
it (--export); the exported header's runtime, built for this host with examples/firmware/classify.cpp,
must agree with LibTorch's quantized model on every test image (top-1 on at least --min-top1 of
them, every int8 output within --max-lsb), as computed here from both sides' raw outputs, and the
report's firmware section must state the same figures; the header must compile with its figures.
Then the refusals: an op firmware cannot run, a CPU target and a bad namespace exit 2 and leave no output behind; and
--export-input-layout hwc (channel_last).
Needs Debian's python3-torch (/usr/bin/python3).

With --device-compiler, the proof on a device (issue 11, item 6): examples/firmware/classify.cpp
with the exported header and the first --images Fashion-MNIST test images, built for the host
and for the MPS2 AN386 board (Cortex-M4, DSP and portable) by device.py, which runs QEMU,
requires the host's bytes and refuses malloc/free/new/__cxa_throw; then every image's top-1 of
the device run must equal LibTorch's quantized model's (the --out model, on the same images).

  check_export.py --cli versatil-quantize --compiler c++ --include DIR --max-lsb N --min-top1 F
                  [--device-compiler arm-none-eabi-g++ --images N] [--keep DIR]

--keep DIR keeps the model, the header, the report and (with the device) proof.json, which
benchmarks/firmware.py --proof reads for the Fashion-MNIST row of RESULTS.md."""
import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "examples/firmware"))
from fm_cnn import DataFile, normalized, read_idx  # noqa: E402  (the data file and images as the example makes them)
FIRMWARE_KEYS = ["namespace", "input_layout", "header_bytes", "arena_bytes", "arena_lower_bound_bytes",
                 "greedy_planner_bytes", "parameter_bytes", "stack_bytes", "compared_samples", "compared_elements",
                 "differing_elements", "max_lsb_diff", "top1_agreement", "export_seconds"]
failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def run(command, **kwargs):
    start = time.monotonic()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    print(f"$ {' '.join(str(c) for c in command)}  ({time.monotonic() - start:.1f} s, exit {result.returncode})")
    return result


def exported_model(args, work):
    """Trains the CNN, exports it, checks the report and compiles the header."""
    trained = run([sys.executable, ROOT / "examples/firmware/fm_cnn.py", work])
    print(trained.stdout.strip())
    if trained.returncode != 0:
        sys.exit("fm_cnn.py failed:\n" + trained.stderr)
    summary = json.loads((work / "fm_cnn.json").read_text())

    quantized = run([args.cli, "--model", work / "fm_cnn.pt", "--data", work / "fm_cnn.data.pt", "--target",
                     "=cortex_m", "--export", work / "fm_cnn.hpp", "--report", work / "report.json", "--out",
                     work / "q.pt", "--no-per-layer"])
    print(quantized.stdout)
    if quantized.returncode != 0:
        sys.exit("versatil-quantize --export failed:\n" + quantized.stderr)
    report = json.loads((work / "report.json").read_text())
    firmware = report["firmware"]
    check(isinstance(firmware, dict) and all(key in firmware for key in FIRMWARE_KEYS),
          f"the report's firmware object has {FIRMWARE_KEYS}")
    check(firmware["namespace"] == "fm_cnn", "the namespace is the header's stem, fm_cnn")
    check(firmware["compared_samples"] == summary["test_images"] == 2000,
          f"the runtime ran on every test image ({firmware['compared_samples']})")
    check(firmware["arena_lower_bound_bytes"] <= firmware["arena_bytes"],
          f"arena {firmware['arena_bytes']} >= live-set lower bound {firmware['arena_lower_bound_bytes']}")
    check(firmware["arena_lower_bound_bytes"] <= firmware["greedy_planner_bytes"],
          f"greedy planner {firmware['greedy_planner_bytes']} >= lower bound")
    # 28x28 by 16 channels is the largest tensor: no plan needs less than that.
    check(firmware["arena_lower_bound_bytes"] >= 16 * 28 * 28, "the lower bound holds the stem's 16x28x28 output")
    # Quantization for the device keeps the float accuracy (measured: 87.15 % -> 86.95 %).
    check(report["quantized_accuracy"] >= report["float_accuracy"] - 0.01,
          f"top-1 {report['float_accuracy']:.4f} float -> {report['quantized_accuracy']:.4f} int8 (within 1 point)")
    check(report["float_accuracy"] >= 0.85, f"the trained model is a real classifier ({report['float_accuracy']:.4f})")
    check(any("contiguous copy" in a["change"] for a in report["adjustments"]),
          "the report names the clamp that reads a contiguous copy (ReLU6 on QNNPACK)")

    # The header compiles for the host with its figures as constants.
    probe = work / "uses_header.cpp"
    probe.write_text(f"""#include "fm_cnn.hpp"
static_assert(fm_cnn::model::input_size == 28 * 28 && fm_cnn::model::output_size == 10);
static_assert(fm_cnn::model::arena_bytes == {firmware['arena_bytes']});
static_assert(fm_cnn::model::arena_lower_bound_bytes == {firmware['arena_lower_bound_bytes']});
static_assert(fm_cnn::model::greedy_planner_bytes == {firmware['greedy_planner_bytes']});
static_assert(fm_cnn::model::parameter_bytes == {firmware['parameter_bytes']});
static_assert(fm_cnn::model::stack_bytes == {firmware['stack_bytes']});
static_assert(fm_cnn::model::arena_bytes <= 32 * 1024);
""")
    compiled = run(args.compiler + ["-std=c++20", "-fsyntax-only", "-I", args.include, "-I", work, probe])
    check(compiled.returncode == 0, "the exported header compiles, its constants equal the report's" +
          ("" if compiled.returncode == 0 else ":\n" + compiled.stderr[-3000:]))
    return work


def header_constant(header, name):
    found = re.search(rf"static constexpr \S+ {name} = ([^;]+);", header)
    if found is None:
        sys.exit(f"the exported header has no constant {name}")
    return float(found.group(1))


def runtime_against_libtorch(args, work, count):
    """The exported header's runtime against LibTorch's quantized model, computed here rather than
    read from the report: examples/firmware/classify.cpp built for this host with the header and
    the data file's `count` test images prints each image's int8 outputs; LibTorch's saved model
    (the --out file) runs the same images, and its outputs are put back on the header's output
    grid. Both the largest difference in LSB and the top-1 agreement must meet their bounds, and
    the report's own figures must be what is measured here."""
    images = work / "fm_test_images.hpp"
    embedded = run([sys.executable, ROOT / "examples/firmware/embed_images.py", "--count", count, "--out", images])
    check(embedded.returncode == 0,
          f"{count} test images embedded" + ("" if embedded.returncode == 0 else ": " + embedded.stderr))
    program = work / "classify_fm_all"
    if not build_classify(args, work, "fm_test_images.hpp", program, ["-O1"],
                          "classify.cpp builds for the host with the exported model and every test image"):
        return
    ran = run([program])
    # "image I label L predicted P outputs O0 ... O9", one line per image
    runtime = [[int(v) for v in line.split()[7:]] for line in ran.stdout.splitlines() if line.startswith("image ")]
    check(ran.returncode == 0 and len(runtime) == count and all(len(o) == 10 for o in runtime),
          f"the runtime printed ten int8 outputs for each of {count} images "
          f"(exit {ran.returncode}, {len(runtime)} lines)")
    if len(runtime) != count:
        return

    header = (work / "fm_cnn.hpp").read_text()
    scale, zero_point = header_constant(header, "output_scale"), header_constant(header, "output_zero_point")
    torch.backends.quantized.engine = "qnnpack"  # the engine cortex_m lowers to
    quantized = torch.jit.load(str(work / "q.pt"))
    with torch.no_grad():
        out = quantized(normalized(read_idx("t10k-images-idx3-ubyte", count)))
    # The saved model ends on a dequantize: (level - zero point) * scale, which dividing back
    # undoes exactly up to float rounding, far below half a level.
    levels = out.int_repr().int() if out.is_quantized else torch.round(out / scale + zero_point).int()
    libtorch = levels.tolist()

    def first_max(values):  # the runtime's and the library's tie rule: the first largest output
        return max(range(len(values)), key=lambda c: (values[c], -c))

    max_lsb = max(abs(a - b) for r, l in zip(runtime, libtorch) for a, b in zip(r, l))
    differing = sum(a != b for r, l in zip(runtime, libtorch) for a, b in zip(r, l))
    agreement = sum(first_max(r) == first_max(l) for r, l in zip(runtime, libtorch)) / count
    check(max_lsb <= args.max_lsb,
          f"every int8 output of the runtime within {max_lsb} <= {args.max_lsb} LSB of LibTorch's, on {count} "
          f"images ({differing} of {10 * count} outputs differ)")
    check(agreement >= args.min_top1, f"top-1 of the runtime and LibTorch agree on {agreement:.4f} >= {args.min_top1}")
    firmware = json.loads((work / "report.json").read_text())["firmware"]
    check((firmware["max_lsb_diff"], firmware["differing_elements"], firmware["top1_agreement"])
          == (max_lsb, differing, agreement),
          f"the report states what is measured here: max {firmware['max_lsb_diff']} LSB, "
          f"{firmware['differing_elements']} differing outputs, top-1 agreement {firmware['top1_agreement']}")


def build_classify(args, work, images_header, program, flags, what):
    """examples/firmware/classify.cpp with the exported fm_cnn header and `images_header`, for the host."""
    built = run(args.compiler + ["-std=c++20", *flags, '-DVERSATIL_MODEL_HEADER="fm_cnn.hpp"',
                                 "-DVERSATIL_MODEL_NAMESPACE=fm_cnn", f'-DVERSATIL_IMAGES_HEADER="{images_header}"',
                                 "-I", args.include, "-I", ROOT / "examples/firmware", "-I", work,
                                 ROOT / "examples/firmware/classify.cpp", "-o", program])
    check(built.returncode == 0, what + ("" if built.returncode == 0 else ":\n" + built.stderr[-3000:]))
    return built.returncode == 0


def device_proof(args, work):
    """classify.cpp with the exported model on the host and under QEMU; top-1 against LibTorch."""
    images = work / "fm_images.hpp"
    embedded = run([sys.executable, ROOT / "examples/firmware/embed_images.py", "--count", args.images,
                    "--out", images])
    check(embedded.returncode == 0,
          f"{args.images} test images embedded" + ("" if embedded.returncode == 0 else ": " + embedded.stderr))
    defines = ['VERSATIL_MODEL_HEADER="fm_cnn.hpp"', "VERSATIL_MODEL_NAMESPACE=fm_cnn",
               'VERSATIL_IMAGES_HEADER="fm_images.hpp"']
    host = work / "classify_fm_host"
    if not build_classify(args, work, "fm_images.hpp", host, ["-O2", "-Wall", "-Wextra", "-Werror"],
                          "classify.cpp builds for the host with the exported model"):
        return
    device = run([sys.executable, HERE / "device.py", "--compiler", args.device_compiler, "--root", ROOT,
                  "--source", ROOT / "examples/firmware/classify.cpp", "--host-program", host,
                  *[a for d in defines for a in ("--define", d)], "--include-dir", work,
                  "--build-dir", work / "device", "--sizes", work / "device" / "sizes.json"])
    print(device.stdout[-4000:])
    check(device.returncode == 0, "on the MPS2 AN386 (DSP and portable): QEMU prints the host's bytes, no allocation "
          "or exception symbol linked" + ("" if device.returncode == 0 else ":\n" + device.stderr[-2000:]))
    if device.returncode != 0:
        return
    printed = [line.split() for line in (work / "device" / "dsp.out").read_text().splitlines()
               if line.startswith("image ")]
    device_top1 = [int(fields[5]) for fields in printed]
    labels = [int(fields[3]) for fields in printed]
    torch.backends.quantized.engine = "qnnpack"  # the engine cortex_m lowers to
    quantized = torch.jit.load(str(work / "q.pt"))
    with torch.no_grad():
        libtorch_top1 = quantized(normalized(read_idx("t10k-images-idx3-ubyte", args.images))).argmax(1).tolist()
    differ = [i for i, (a, b) in enumerate(zip(device_top1, libtorch_top1)) if a != b]
    correct = sum(a == b for a, b in zip(device_top1, labels))
    check(len(device_top1) == args.images and not differ,
          f"top-1 of the device run equals LibTorch's quantized model on {len(device_top1) - len(differ)} of "
          f"{args.images} images (differ: {differ[:10]}); device correct on {correct}")
    sizes = json.loads((work / "device" / "sizes.json").read_text())
    for variant, measured in sizes.items():
        print(f"{variant}: .text {measured['sections'].get('.text', 0)} B, "
              f"runtime code {measured['runtime_code_bytes']} B")
    # What benchmarks/firmware.py --proof reads for its Fashion-MNIST row.
    report = json.loads((work / "report.json").read_text())
    (work / "proof.json").write_text(json.dumps({
        "images": args.images, "device_equals_libtorch_top1": args.images - len(differ),
        "device_correct": correct, "float_accuracy": report["float_accuracy"],
        "quantized_accuracy": report["quantized_accuracy"], "firmware_report": report["firmware"],
        "device_sizes": {variant: {"sections": m["sections"], "runtime_code_bytes": m["runtime_code_bytes"]}
                         for variant, m in sizes.items()}}, indent=1) + "\n")


def refusals(args, work):
    """Each refusal exits 2 with its message and leaves none of the outputs."""
    subprocess.run([sys.executable, HERE / "export_models.py", work], check=True, capture_output=True)
    torch.manual_seed(0)
    images = torch.randn(32, 3, 16, 16)
    torch.jit.save(torch.jit.script(DataFile({"calib": images, "test": images[:8]})), str(work / "gate.data.pt"))
    outputs = [work / "out" / name for name in ("q.pt", "report.json", "gate.hpp")]
    (work / "out").mkdir()
    cases = [
        (["--target", "=cortex_m"],
         "error (unsupported_export): cannot export for firmware: op 'aten::gelu' in module 'act'"),
        (["--target", "=xnnpack"], "error (invalid_argument): --export writes firmware for a microcontroller"),
        (["--target", "=cortex_m", "--export-namespace", "2fast"], "namespace '2fast' is not a C++ namespace name"),
    ]
    for extra, expected in cases:
        refused = run([args.cli, "--model", work / "gate.pt", "--data", work / "gate.data.pt", "--out", outputs[0],
                       "--report", outputs[1], "--export", outputs[2], "--no-per-layer"] + extra)
        check(refused.returncode == 2 and expected in refused.stderr,
              f"refused with exit 2 and '{expected}' (exit {refused.returncode}: {refused.stderr.strip()[-300:]})")
        check(not any(path.exists() for path in outputs) and not any((work / "out").iterdir()),
              "no output written, no temporary left")


def channel_last(args, work):
    """--export-input-layout hwc: the Separable model (3x32x32 images) exported channel-first and
    channel-last; the channel-last header on each image transposed must give the channel-first
    header's bytes (channel_last.cpp, on the host and, with the device compiler, under QEMU),
    so the report compares the same outputs with LibTorch; a model whose input an add reads is
    refused."""
    torch.manual_seed(1)
    images = torch.randn(24, 3, 32, 32)
    torch.jit.save(torch.jit.script(DataFile({"calib": images, "test": images[:8]})), str(work / "rgb.data.pt"))
    reports = {}
    for layout in ("chw", "hwc"):
        exported = run([args.cli, "--model", work / "separable.pt", "--data", work / "rgb.data.pt", "--target",
                        "=cortex_m", "--export", work / f"separable_{layout}.hpp", "--export-input-layout", layout,
                        "--report", work / f"separable_{layout}.json", "--no-per-layer"])
        check(exported.returncode == 0, f"--export-input-layout {layout} exports the Separable model" +
              ("" if exported.returncode == 0 else ": " + exported.stderr[-2000:]))
        if exported.returncode != 0:
            return
        reports[layout] = json.loads((work / f"separable_{layout}.json").read_text())["firmware"]
    keys = ["max_lsb_diff", "differing_elements", "top1_agreement", "compared_elements", "arena_bytes", "stack_bytes"]
    check([reports["hwc"][k] for k in keys] == [reports["chw"][k] for k in keys] and
          (reports["chw"]["input_layout"], reports["hwc"]["input_layout"]) == ("chw", "hwc"),
          "the channel-last report states the layout and the channel-first one's figures "
          f"({[reports['hwc'][k] for k in keys]})")
    check("input_channels_last = true" in (work / "separable_hwc.hpp").read_text() and
          "input_channels_last = true" not in (work / "separable_chw.hpp").read_text(),
          "only the channel-last header's first convolution reads its input channel-last")
    defines = ['VERSATIL_PLANAR_HEADER="separable_chw.hpp"', "VERSATIL_PLANAR_NAMESPACE=separable_chw",
               'VERSATIL_INTERLEAVED_HEADER="separable_hwc.hpp"', "VERSATIL_INTERLEAVED_NAMESPACE=separable_hwc"]
    program = work / "channel_last"
    built = run(args.compiler + ["-std=c++20", "-O1", *[f"-D{d}" for d in defines], "-I", args.include, "-I",
                                 ROOT / "examples/firmware", "-I", work, HERE / "channel_last.cpp", "-o", program])
    check(built.returncode == 0, "channel_last.cpp builds with the two exported headers" +
          ("" if built.returncode == 0 else ":\n" + built.stderr[-3000:]))
    if built.returncode != 0:
        return
    ran = run([program])
    check(ran.returncode == 0, "on the host the channel-last header gives the channel-first one's bytes: " +
          ran.stdout.strip().splitlines()[-1])
    if args.device_compiler:
        device = run([sys.executable, HERE / "device.py", "--compiler", args.device_compiler, "--root", ROOT,
                      "--source", HERE / "channel_last.cpp", "--host-program", program,
                      *[a for d in defines for a in ("--define", d)], "--include-dir", work,
                      "--build-dir", work / "device_channel_last"])
        check(device.returncode == 0, "and under QEMU (DSP and portable), the host's bytes" +
              ("" if device.returncode == 0 else ":\n" + device.stdout[-2000:] + device.stderr[-2000:]))
    refused = run([args.cli, "--model", work / "input_residual.pt", "--data", work / "rgb.data.pt", "--target",
                   "=cortex_m", "--export", work / "input_residual.hpp", "--export-input-layout", "hwc",
                   "--no-per-layer"])
    expected = "is read by layer in the model's own forward (add), which is not a convolution"
    check(refused.returncode == 2 and expected in refused.stderr and not (work / "input_residual.hpp").exists(),
          f"an add reading the input is refused with exit 2 and '{expected}' "
          f"(exit {refused.returncode}: {refused.stderr.strip()[-300:]})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--compiler", required=True, nargs="+")
    parser.add_argument("--include", required=True)
    parser.add_argument("--max-lsb", type=int, required=True)
    parser.add_argument("--min-top1", type=float, required=True)
    parser.add_argument("--device-compiler", help="arm-none-eabi-g++: run the proof on the MPS2 AN386 under QEMU")
    parser.add_argument("--images", type=int, default=200, help="test images the device classifies (default 200)")
    parser.add_argument("--keep", help="write the model, header, report and proof.json under DIR/fm_cnn and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="versatil-export-") as scratch:
        work = exported_model(args, Path(args.keep or scratch) / "fm_cnn")
        runtime_against_libtorch(args, work, json.loads((work / "fm_cnn.json").read_text())["test_images"])
        if args.device_compiler:
            device_proof(args, work)
        (Path(scratch) / "refusals").mkdir()
        refusals(args, Path(scratch) / "refusals")
        channel_last(args, Path(scratch) / "refusals")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()

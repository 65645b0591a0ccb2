#!/usr/bin/env python3
"""The firmware kernels on the six MLPerf Tiny layer shapes of the firmware-speed issue, on the
Cortex-M4 (QEMU mps2-an386, -icount shift=0): instructions per MAC of the reference kernel and
of the fast kernel the exporter picks, at -O2 and at -Os, beside CMSIS-NN's figures as the issue
measured them (CMSIS-NN's source is not in this project; the anchors are that measurement,
cited). Also each fast kernel's code size. Writes benchmarks/results/firmware_kernels.json and
prints a table. About half a minute; needs arm-none-eabi-g++ and qemu-system-arm.

  benchmarks/firmware_kernels.py [--arm arm-none-eabi-g++] [--out FILE]

QEMU counts instructions, not cycles: a load, a taken branch or a multi-register store takes
more than one cycle on a Cortex-M4. Beside the instructions, an ESTIMATE of cycles per MAC from the
executed instruction mix and the Cortex-M4 TRM's timing table (benchmarks/cortex_m4_cycles.py, which
states the model and its assumptions: P=2 pipeline refill, range P=1..3, aligned accesses, zero wait
states). The harness brackets each kernel call with versatil_benchmark_mark(1)/(2) after one empty
calibration pair; the estimate's own instruction count is checked against the harness's SysTick count.
"""
import argparse
import concurrent.futures
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "firmware"))
import device  # noqa: E402  (the board build, nm and size helpers of the device test)
sys.path.insert(0, str(ROOT / "benchmarks"))
import cortex_m4_cycles  # noqa: E402

QEMU_ICOUNT = ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial", "none",
               "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel"]

# Instructions per nominal MAC of ARM's CMSIS-NN s8 kernels on the same shapes, data and board,
# measured side by side with versatil's kernels of main ad55b16 (arm-none-eabi-gcc 12.2,
# -mcpu=cortex-m4): the table of the firmware-speed issue.
CMSIS_NN = {
    "resnet8_conv3x3_32x32_16x16": {"O2": 1.91, "Os": 3.19},
    "dscnn_depthwise3x3_64_25x5": {"O2": 7.12, "Os": 8.55},
    "dscnn_pointwise_64x64_25x5": {"O2": 1.99, "Os": 2.34},
    "mobilenet_depthwise3x3_stride2_32_48x48": {"O2": 7.57, "Os": 9.13},
    "mobilenet_pointwise_16x32_48x48": {"O2": 3.64, "Os": 4.24},
    "autoencoder_linear_640x128": {"O2": 1.95, "Os": 2.94},
}
CMSIS_NN_ALL = {"O2": 2.69, "Os": 3.68}
TARGET_OF_ALL = 0.85  # the issue: over all six, at most 0.85x CMSIS-NN's
FAST_KERNELS = ("conv2d_im2col", "depthwise_conv2d_3x3", "linear_blocked")
LINE = re.compile(r"^layer (\S+) kernel (\S+) macs (\d+) instructions (\d+)$")


def build(arm, level, out):
    """The harness for the board at -O<level>, with device.py's flags otherwise (the dsp image's:
    a Cortex-M4F, its FPU rescaling as QNNPACK does)."""
    flags = [f for f in device.FLAGS if not f.startswith("-O")] + device.FLOAT_FLAGS["dsp"] + [f"-O{level}"]
    board = ROOT / "examples" / "firmware" / "mps2_an386"
    elf = out / f"firmware_kernels_O{level}.elf"
    command = [arm, *flags, "-DVERSATIL_BOARD_MPS2_AN386", f"-I{ROOT / 'include'}",
               f"-I{ROOT / 'examples' / 'firmware'}", "-nostartfiles", "-T", str(board / "mps2_an386.ld"),
               "-Wl,--gc-sections", str(board / "startup.cpp"), str(ROOT / "benchmarks" / "firmware_kernels.cpp"),
               "-o", str(elf)]
    subprocess.run(command, check=True)
    return elf, " ".join(flags)


# Out-of-line helpers that only one kernel calls, counted with it.
HELPER_OF = {"fill_patch": "conv2d_im2col", "requantize_output": "conv2d"}


def kernel_code(arm, elf):
    """Bytes of each kernel's code in the image (the function and what it alone calls)."""
    args = argparse.Namespace(compiler=arm)
    sizes = {}
    for size, kind, name in device.symbols(args, elf):
        if kind.lower() not in ("t", "w") or not name.startswith("versatil::"):
            continue
        base = name.split("(")[0].split("::{lambda")[0].rsplit("::", 1)[-1]
        base = HELPER_OF.get(base, base)
        sizes[base] = sizes.get(base, 0) + size
    return sizes


# The harness's count is read from the SysTick, 40 instructions a tick: the estimate's own count
# of the same region may differ by up to a tick either way (and the calibration's).
ICOUNT_TOLERANCE = 2 * 40


def run(elf, timeout, nm):
    """The harness's lines, each with the estimate's instructions and cycles of its region."""
    output, status, regions = cortex_m4_cycles.run(elf, QEMU_ICOUNT, nm=nm, timeout=timeout)
    if status != 0:
        sys.exit(f"{elf.name}: QEMU exited {status}\n{output}")
    rows = []
    for line in output.splitlines():
        match = LINE.match(line)
        if match:
            rows.append({"layer": match[1], "kernel": match[2], "macs": int(match[3]),
                         "instructions": int(match[4])})
    if len(regions) != len(rows) + 1:
        sys.exit(f"{elf.name}: {len(regions)} marked regions for {len(rows)} measurements; expected one "
                 "calibration region first, then one per measurement")
    overhead = regions[0]
    for row, region in zip(rows, regions[1:]):
        net = region.minus(overhead)
        row["logged_instructions"] = net.instructions
        row["estimated_cycles"] = net.cycles()
        row["estimated_cycles_range"] = [net.cycles(p) for p in cortex_m4_cycles.REFILL_RANGE]
        row["by_class"] = net.as_dict()["by_class"]
        row["priced_as_one_cycle"] = net.unknown  # mnemonics outside the model, if any
        if abs(net.instructions - row["instructions"]) > ICOUNT_TOLERANCE:
            sys.exit(f"{elf.name} {row['layer']} {row['kernel']}: the log counts {net.instructions} instructions, "
                     f"the SysTick {row['instructions']}")
    return rows


def measure_level(arm, level, directory, timeout):
    """Build and run one optimization level (a process of its own: the log parse is Python)."""
    elf, flags = build(arm, level, Path(directory))
    rows = run(elf, timeout, device.tool(arm, "nm"))
    return level, elf, flags, rows


def summarize(rows):
    """Per layer: the reference and the fast kernel's instructions per MAC; and over all six."""
    layers = {}
    for row in rows:
        entry = layers.setdefault(row["layer"], {"macs": row["macs"]})
        role = "fast" if row["kernel"] in FAST_KERNELS else "reference"
        entry[role] = {"kernel": row["kernel"], "instructions": row["instructions"],
                       "per_mac": row["instructions"] / row["macs"],
                       "logged_instructions": row["logged_instructions"],
                       "estimated_cycles": row["estimated_cycles"],
                       "estimated_cycles_per_mac": row["estimated_cycles"] / row["macs"],
                       "estimated_cycles_per_mac_range": [c / row["macs"] for c in row["estimated_cycles_range"]],
                       "by_class": row["by_class"], "priced_as_one_cycle": row["priced_as_one_cycle"]}
    macs = sum(entry["macs"] for entry in layers.values())
    total = {role: sum(entry[role]["instructions"] for entry in layers.values()) / macs
             for role in ("reference", "fast")}
    total.update({f"{role}_estimated_cycles_per_mac":
                  sum(entry[role]["estimated_cycles"] for entry in layers.values()) / macs
                  for role in ("reference", "fast")})
    return layers, total


def render(data):
    lines = ["| layer (MLPerf Tiny shape) | fast kernel | versatil -O2 | CMSIS-NN -O2 | versatil -Os | CMSIS-NN -Os "
             "| reference -O2 | reference -Os |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    o2, os_ = data["levels"]["O2"], data["levels"]["Os"]
    for layer, anchor in CMSIS_NN.items():
        a, b = o2["layers"][layer], os_["layers"][layer]
        lines.append(f"| {layer} | {a['fast']['kernel']} | {a['fast']['per_mac']:.2f} | {anchor['O2']:.2f} | "
                     f"{b['fast']['per_mac']:.2f} | {anchor['Os']:.2f} | {a['reference']['per_mac']:.2f} | "
                     f"{b['reference']['per_mac']:.2f} |")
    lines.append(f"| all six (sum / sum) | | **{o2['all']['fast']:.2f}** | {CMSIS_NN_ALL['O2']:.2f} | "
                 f"**{os_['all']['fast']:.2f}** | {CMSIS_NN_ALL['Os']:.2f} | {o2['all']['reference']:.2f} | "
                 f"{os_['all']['reference']:.2f} |")
    lines.append("")
    lines.append(f"Instructions per MAC under QEMU (-icount shift=0), not cycles. Over all six: "
                 f"{o2['all']['fast'] / CMSIS_NN_ALL['O2']:.2f}x CMSIS-NN at -O2, "
                 f"{os_['all']['fast'] / CMSIS_NN_ALL['Os']:.2f}x at -Os (the issue asks for at most "
                 f"{TARGET_OF_ALL}x).")
    lines.append("")
    lines.append("ESTIMATED cycles per MAC on a Cortex-M4 (not measured: the executed instruction mix priced with the "
                 "Cortex-M4 TRM's timing table, benchmarks/cortex_m4_cycles.py; pipeline refill P=2, in brackets "
                 f"P=1..3; aligned accesses, zero wait states, SDIV/UDIV {cortex_m4_cycles.DIVIDE_CYCLES} cycles), "
                 "beside instructions per MAC:")
    lines.append("")
    lines.append("| layer | fast -O2 instr | fast -O2 est. cycles | fast -Os instr | fast -Os est. cycles "
                 "| reference -O2 instr | reference -O2 est. cycles | reference -Os instr | reference -Os est. cycles |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cell(entry):
        low, high = entry["estimated_cycles_per_mac_range"]
        return f"{entry['per_mac']:.2f} | {entry['estimated_cycles_per_mac']:.2f} ({low:.2f}..{high:.2f})"

    for layer in CMSIS_NN:
        a, b = o2["layers"][layer], os_["layers"][layer]
        lines.append(f"| {layer} | {cell(a['fast'])} | {cell(b['fast'])} | {cell(a['reference'])} | "
                     f"{cell(b['reference'])} |")
    lines.append(f"| all six (sum / sum) | {o2['all']['fast']:.2f} | {o2['all']['fast_estimated_cycles_per_mac']:.2f} | "
                 f"{os_['all']['fast']:.2f} | {os_['all']['fast_estimated_cycles_per_mac']:.2f} | "
                 f"{o2['all']['reference']:.2f} | {o2['all']['reference_estimated_cycles_per_mac']:.2f} | "
                 f"{os_['all']['reference']:.2f} | {os_['all']['reference_estimated_cycles_per_mac']:.2f} |")
    return "\n".join(lines)


def results_section(data):
    """The "Firmware kernels" section of RESULTS.md (benchmarks/report.py)."""
    code = data["levels"]["Os"]["kernel_code_bytes"]
    return ["## Firmware kernels", "",
            f"Measured by `{data['command']}` on {data['started']} ({data['seconds']:.0f} s; {data['compiler']}; "
            f"{data['qemu']}). Method: `benchmarks/firmware_kernels.cpp` runs each MLPerf Tiny layer shape of the "
            "firmware-speed issue on the MPS2 AN386 board (Cortex-M4) under QEMU with `-icount shift=0`, once with "
            "the reference kernel and once with the fast kernel the exporter picks, on the same seeded data with "
            "per-channel multipliers and a ReLU range; the two outputs must be the same bytes. CMSIS-NN's figures are "
            "that issue's side-by-side measurement on the same board and shapes (CMSIS-NN's source is not in this "
            "project): cited, not re-measured here.", "",
            render(data), "",
            "Code of each kernel at -Os (nm; the kernel and the helpers only it calls): " +
            ", ".join(f"{k} {code.get(k, 0)} B" for k in ("conv2d", "linear") + FAST_KERNELS) + ".", ""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", default="arm-none-eabi-g++")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "firmware_kernels.json"))
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--breakdown", action="store_true",
                        help="also print each kernel's instructions and estimated cycles by instruction class")
    args = parser.parse_args()
    for program in (args.arm, "qemu-system-arm"):
        if not shutil.which(program):
            sys.exit(f"{program} not found (tools/install-deps installs it)")
    started = time.time()
    data = {"command": "benchmarks/firmware_kernels.py", "started": time.strftime("%Y-%m-%d %H:%M"),
            "compiler": subprocess.run([args.arm, "--version"], capture_output=True, text=True).stdout.splitlines()[0],
            "qemu": subprocess.run(["qemu-system-arm", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
            "cmsis_nn_anchor": {"source": "the firmware-speed issue's side-by-side measurement on main ad55b16",
                                "per_layer": CMSIS_NN, "all": CMSIS_NN_ALL},
            "levels": {}}
    data["cycle_estimate"] = {
        "what": "ESTIMATED Cortex-M4 cycles from the executed instruction mix (QEMU -d in_asm,exec,nochain) priced "
                "with the Cortex-M4 TRM's timing table (Arm DDI 0439, 3.3 Processor instruction timings)",
        "refill_cycles": cortex_m4_cycles.REFILL, "refill_range": list(cortex_m4_cycles.REFILL_RANGE),
        "divide_cycles": cortex_m4_cycles.DIVIDE_CYCLES,
        "assumptions": "all accesses aligned, zero wait states, IT-conditional instructions priced as executed",
        "model": "benchmarks/cortex_m4_cycles.py"}
    with tempfile.TemporaryDirectory() as directory:
        # The two levels in parallel: each is QEMU writing its log and Python reading it.
        with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
            jobs = [pool.submit(measure_level, args.arm, level, directory, args.timeout) for level in ("2", "s")]
            for job in jobs:
                level, elf, flags, rows = job.result()
                layers, total = summarize(rows)
                data["levels"][f"O{level}"] = {"flags": flags, "layers": layers, "all": total,
                                               "kernel_code_bytes": kernel_code(args.arm, elf)}
    data["seconds"] = round(time.time() - started, 1)
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(render(data))
    for level in ("O2", "Os"):
        for layer, entry in data["levels"][level]["layers"].items():
            for role in ("fast", "reference"):
                run_ = entry[role]
                classes = run_["by_class"]
                if args.breakdown:
                    print(f"-{level} {layer} {run_['kernel']}: per MAC " + ", ".join(
                        f"{name} {classes[name]['instructions'] / entry['macs']:.2f} instr / "
                        f"{classes[name]['estimated_cycles'] / entry['macs']:.2f} est. cyc"
                        for name in cortex_m4_cycles.CLASSES if classes.get(name, {}).get("instructions")))
                if run_["priced_as_one_cycle"]:
                    print(f"-{level} {layer} {run_['kernel']}: not in the cycle model, priced as 1 cycle: "
                          f"{run_['priced_as_one_cycle']}")
    for level in ("O2", "Os"):
        code = data["levels"][level]["kernel_code_bytes"]
        print(f"code at -{level}: " + ", ".join(f"{k} {code.get(k, 0)} B" for k in ("conv2d", "linear") + FAST_KERNELS))


if __name__ == "__main__":
    main()

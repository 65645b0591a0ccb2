#!/usr/bin/env python3
"""versatil-quantize's command-line contract, in seconds: every option error exits 2 with one readable
line (a misspelt option gets the nearest name), --help lists what the catalogue knows and ends with two
examples, outputs are checked before any work (writable, not an input, not another output), a directory
is called one, and a dynamic target without data asks for what it needs. Usage: check_options.py CLI"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

cli = sys.argv[1]
failures = []


def run(*args, expect_status, expect_text=None, absent_text=None):
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    label = " ".join(map(str, args))
    if result.returncode != expect_status:
        failures.append(f"{label}: exit {result.returncode}, expected {expect_status}\n{output}")
    elif expect_text and expect_text not in output:
        failures.append(f"{label}: output lacks {expect_text!r}\n{output}")
    elif absent_text and absent_text in output:
        failures.append(f"{label}: output has {absent_text!r}\n{output}")
    else:
        print(f"ok: {label}")
    return result


# Option errors: exit 2, one line, no 300-digit range (CLI11's own: 105, 109, 114, 107).
for args, text in ((["--bogus"], "unknown option '--bogus'"),
                   (["--modle", "m.pt"], "did you mean --model?"),
                   (["--no-per-layers"], "did you mean --no-per-layer?"),
                   (["--batch", "0"], "--batch: must be at least 1, not 0"),
                   (["--threads", "abc"], "--threads: takes a whole number, not 'abc'"),
                   (["--min-sqnr", "abc"], "--min-sqnr takes a number, not 'abc'"),
                   (["--model"], "--model needs a value"),
                   (["--export-namespace", "fm"], "--export-namespace shapes the firmware header: it needs --export"),
                   (["--export-input-layout", "hwc"], "--export-input-layout shapes the firmware header"),
                   (["--verbose", "yes"], "not expected: yes")):
    result = run(*args, expect_status=2, expect_text=text)
    lines = result.stderr.strip().splitlines()
    if len(lines) != 1 or re.search(r"\d{20}", result.stderr):
        failures.append(f"{args}: not one short line:\n{result.stderr}")

# --help: the backends the catalogue knows (as the target parser lists them) each with its options,
# no garbled lines, two examples at the end.
known = re.search(r"\(known: ([^)]*)\)", run("--target", "=tensorrt", expect_status=2).stderr)
help_text = run("--help", expect_status=0).stdout
if not known:
    failures.append("an unknown backend's error lists no known ones")
else:
    for backend in known.group(1).split(", "):
        accepts = re.search(r"accepts: ([^)]*)\)", run("--target", f"={backend}:bogus", expect_status=2).stderr)
        listed = re.search(rf"{backend}: ([^;]*);", help_text)
        if not accepts or not listed or listed.group(1) != accepts.group(1):
            failures.append(f"--help's options of {backend} differ from the parser's: "
                            f"{listed and listed.group(1)!r} vs {accepts and accepts.group(1)!r}")
for garbled in ("Needs:", "{false}"):
    if garbled in help_text:
        failures.append(f"--help has {garbled!r}")
examples = help_text.rstrip().split("Examples:\n")
if len(examples) != 2 or len(examples[1].splitlines()) != 2:
    failures.append(f"--help does not end with two examples:\n{help_text[-400:]}")

with tempfile.TemporaryDirectory() as scratch:
    d = Path(scratch)
    # A small model and a data file with held-out samples only, from Debian's python3-torch.
    (d / "make.py").write_text(
        "import sys, torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)\n"
        "    def forward(self, x):\n"
        "        return self.fc2(torch.relu(self.fc1(x)))\n"
        "class Data(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('test', torch.randn(64, 16))\n"
        "    def forward(self): return None\n"
        "torch.manual_seed(0)\n"
        "torch.jit.save(torch.jit.script(Net().eval()), sys.argv[1] + '/model.pt')\n"
        "torch.jit.save(torch.jit.script(Data()), sys.argv[1] + '/test_only.pt')\n")
    subprocess.run(["/usr/bin/python3", d / "make.py", d], check=True, timeout=300)
    model, test_only = d / "model.pt", d / "test_only.pt"
    (d / "corrupt.pt").write_bytes(b"not a model")
    os.symlink(model, d / "link.pt")

    # Outputs are checked before the model is read: a corrupt model with a bad output names the output.
    run("--model", d / "corrupt.pt", "--out", d / "absent" / "q.pt", expect_status=2,
        expect_text=f"cannot write '{d / 'absent' / 'q.pt'}': directory")
    run("--model", d / "corrupt.pt", "--out", "/proc/versatil-q.pt", expect_status=2,
        expect_text="cannot write '/proc/versatil-q.pt'")
    run("--model", model, "--out", d / "link.pt", expect_status=2, expect_text="(--out) is the input model")
    run("--model", model, "--data", test_only, "--report", d / "absent" / ".." / "test_only.pt", expect_status=2,
        expect_text="(--report) is the input data file")
    run("--model", model, "--out", d / "q.pt", "--report", d / "." / "q.pt", expect_status=2,
        expect_text="--out and --report name the same file")
    # A directory is called a directory.
    run("--model", d, expect_status=2, expect_text="is a directory")
    run("--model", model, "--data", d, expect_status=2, expect_text="is a directory")
    # Dynamic quantization needs no calibration: without data it asks for 'test', not 'calib', and
    # held-out samples alone are enough.
    run("--model", model, "--target", "=x86_inductor:dynamic", expect_status=2, expect_text="give --data with a 'test'",
        absent_text="'calib'")
    run("--model", model, "--data", test_only, "--target", "=x86_inductor:dynamic", "--no-per-layer",
        "--out", d / "q.pt", expect_status=0, expect_text="output SQNR")
    leftovers = [p.name for p in d.iterdir() if ".tmp" in p.name]
    if leftovers or (d / "absent").exists():
        failures.append(f"left behind: {leftovers}")

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)

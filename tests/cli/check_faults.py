#!/usr/bin/env python3
"""versatil-quantize under faults of the machine, not of its input: each fault ends the run with
one message naming the real cause (never blaming the input model), exit status 2 (or the
signal's own status), no output and no temporary file left anywhere, the inputs unchanged.

Usage: check_faults.py GROUP VERSATIL_QUANTIZE EXPORT_PROGRAM, GROUP one of
  limits     a file-size limit (RLIMIT_FSIZE, as `ulimit -f` sets it), the process checking
             the model killed from outside (SIGKILL, as the OOM killer sends; strace sends it
             as that process opens its checked copy)
  full_disk  a full output directory and a full TMPDIR: a 100 KiB tmpfs mounted in a private
             user and mount namespace (`unshare -rm`, no root needed where the kernel allows it)
  mid_save   SIGINT and SIGTERM while the model, then the report, is being saved: strace
             injects the signal at the fsync that precedes each rename
A group whose mechanism this machine lacks (no user namespaces, no ptrace) exits 77, which
meson counts as skipped."""
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

group, cli, export = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []
SKIPPED = 77


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def leftovers(*directories):
    return sorted(str(entry) for directory in directories for entry in Path(directory).iterdir())


class Scratch:
    """Inputs (a trained Fashion-MNIST model and its data), an empty output directory and an
    empty private TMPDIR: after a failed run, both must be empty again."""

    def __init__(self, root):
        self.root = Path(root)
        subprocess.run([export, self.root, "--steps", "20"], check=True, timeout=600, capture_output=True)
        self.model, self.data = self.root / "model.pt", self.root / "data.pt"
        self.digests = {self.model: digest(self.model), self.data: digest(self.data)}
        self.out, self.tmp = self.root / "out", self.root / "tmp"
        self.out.mkdir()
        self.tmp.mkdir()

    def args(self, out_dir=None):
        out_dir = Path(out_dir or self.out)
        return ["--model", self.model, "--data", self.data, "--no-per-layer", "--out", out_dir / "q.pt", "--report",
                out_dir / "r.json"]

    def env(self, tmpdir=None):
        return dict(os.environ, TMPDIR=str(tmpdir or self.tmp))

    def check(self, label, result, expect_status, expect_text, directories=None):
        """One fault case: the status, the message, nothing left behind, inputs untouched."""
        output = result.stdout + result.stderr
        problems = []
        if result.returncode != expect_status:
            problems.append(f"exit {result.returncode}, expected {expect_status}")
        if expect_text and expect_text not in output:
            problems.append(f"output lacks {expect_text!r}")
        if "not a valid TorchScript file" in output or "invalid_model_file" in output:
            problems.append("the message blames the input model")
        if "terminate called" in output or "Aborted" in output:
            problems.append("the process aborted")
        left = leftovers(*(directories or [self.out, self.tmp]))
        if left:
            problems.append(f"left behind: {left}")
        for path, expected in self.digests.items():
            if digest(path) != expected:
                problems.append(f"{path.name} changed")
        if problems:
            failures.append(f"{label}: {'; '.join(problems)}\n{output}")
        else:
            print(f"ok: {label}: {output.strip().splitlines()[-1] if output.strip() else '(no output)'}")


def run(args, env, preexec_fn=None, timeout=600):
    return subprocess.run(list(map(str, args)), capture_output=True, text=True, env=env, preexec_fn=preexec_fn,
                          timeout=timeout)


def file_size_limited(limit_bytes):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))


# sh -c KILL_AT_OPEN sh TMPDIR COMMAND...: runs COMMAND (the CLI) as this shell's own process,
# once strace has attached to it; strace sends SIGKILL to whichever of its processes first opens
# TMPDIR/versatil-load-PID-0.pt, the run's first temporary file: the checked copy of the model,
# which the child checking it opens once it has read the model.
KILL_AT_OPEN = r"""
copy="$1/versatil-load-$$-0.pt"; shift
strace -f -qq -o /dev/null -e trace=openat -e inject=openat:signal=SIGKILL:when=1 -P "$copy" -p $$ >/dev/null 2>&1 &
tracer=$!
until grep -q "^TracerPid:[[:space:]]*$tracer\$" /proc/$$/status; do
  kill -0 $tracer 2>/dev/null || { echo "strace could not attach" >&2; exit 125; }
  sleep 0.01
done
exec "$@"
"""


def killed_while_checking(scratch):
    """The child process checking the model file killed from outside, as the OOM killer does:
    strace kills it at a known point, mid-check (it has read the model, not yet written its
    copy), so no race with a child that lives a few hundred milliseconds."""
    result = run(["sh", "-c", KILL_AT_OPEN, "sh", scratch.tmp, cli, *scratch.args()], scratch.env())
    scratch.check("checking process killed (SIGKILL)", result, 2, "signal 9, Killed")
    if "machine_fault" not in result.stderr:
        failures.append(f"SIGKILL of the checking process: not a machine_fault\n{result.stderr}")


def limits(scratch):
    require_strace()
    model_bytes = scratch.model.stat().st_size
    # Below the model's size: the child's checked copy of it in TMPDIR hits the limit first.
    result = run([cli, *scratch.args()], scratch.env(), preexec_fn=file_size_limited(model_bytes // 4))
    scratch.check("file-size limit (ulimit -f)", result, 2, f"file size limit of {model_bytes // 4} bytes")
    if "checked copy" not in result.stderr:
        failures.append(f"file-size limit: the message does not say which write failed\n{result.stderr}")

    killed_while_checking(scratch)


def in_namespace_with_tmpfs(script):
    """Runs `script` (sh) with a 100 KiB tmpfs at /mnt, in a private user + mount namespace."""
    return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=100k tmpfs /mnt && " + script],
                          capture_output=True, text=True, timeout=600)


def full_disk(scratch):
    probe = in_namespace_with_tmpfs("true")
    if probe.returncode != 0:
        print(f"this machine cannot mount a private tmpfs (unshare -rm): {probe.stderr.strip()}")
        sys.exit(SKIPPED)
    cli_args = " ".join(f"'{a}'" for a in [cli, *map(str, scratch.args("/mnt"))])
    list_mnt = "; echo \"status=$?\" >&2; ls -A /mnt >&2; exit 0"
    cases = [("output directory full", f"TMPDIR='{scratch.tmp}' {cli_args}", "cannot write '/mnt/q.pt': no space left"),
             ("TMPDIR full", "TMPDIR=/mnt " + " ".join(f"'{a}'" for a in [cli, *map(str, scratch.args())]),
              "no space left on device (set TMPDIR to a directory with space)")]
    for label, command, expect in cases:
        result = in_namespace_with_tmpfs(command + list_mnt)
        lines = result.stderr.strip().splitlines()
        status_line = next((line for line in lines if line.startswith("status=")), "status=?")
        on_mnt = lines[lines.index(status_line) + 1:] if status_line in lines else ["?"]
        status = int(status_line.split("=")[1]) if status_line != "status=?" else -1
        shown = subprocess.CompletedProcess(command, status, result.stdout, result.stderr)
        scratch.check(label, shown, 2, expect)
        if on_mnt:
            failures.append(f"{label}: left on the full filesystem: {on_mnt}")
        if label == "output directory full" and any(p.name in ("q.pt", "r.json") for p in scratch.out.iterdir()):
            failures.append(f"{label}: an output appeared")


def require_strace():
    probe = subprocess.run(["strace", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"strace cannot trace on this machine: {probe.stderr.strip()}")
        sys.exit(SKIPPED)


def mid_save(scratch):
    require_strace()
    # fsync 1 is the model's temporary file, 2 the report's (both exist then, neither renamed).
    for number, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        for when, stage in ((1, "saving the model"), (2, "saving the report")):
            traced = ["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=fsync", "-e",
                      f"inject=fsync:signal={name}:when={when}", cli, *scratch.args()]
            result = run(traced, scratch.env())
            scratch.check(f"{name} while {stage}", result, -number, f"versatil-quantize: stopped by {name}; ")


with tempfile.TemporaryDirectory() as root:
    scratch = Scratch(root)
    {"limits": limits, "full_disk": full_disk, "mid_save": mid_save}[group](scratch)

if failures:
    print("\n".join(["FAILED:"] + failures))
    sys.exit(1)
print(f"{group}: every fault case passed")

#!/usr/bin/python3
"""Every error kind the Python API can meet, raised as its own exception class (a subclass of
versatil.Error) with the library's one-line message; a Python exception from the caller's own
iterable goes on unchanged; nothing aborts. Kinds that need a data file, a fault of the machine or
other processes cannot arise through this API (listed in UNREACHABLE)."""
import ast
import os
import queue
import signal
import sys
import threading
import tempfile
from pathlib import Path

import torch
from torch import nn

import versatil

UNREACHABLE = {"InvalidDataFile": "the API takes tensors, never a data file",
               "MachineFault": "a killed process or no memory: tests/cli/check_faults.py injects them",
               "DistributedFailure": "the API runs one process",
               "Cancelled": "a cancelled run raises what cancelled it (KeyboardInterrupt, the progress callable's own)"}
KINDS = ["InvalidArgument", "MissingModule", "UnsupportedDevice", "UnsupportedComposition", "NoCalibrationData",
         "NoTrainingData", "NoEvaluationData", "InvalidCalibrationData", "InvalidModelFile", "InvalidDataFile",
         "IoError", "LoweringFailed", "UnsupportedModel", "UnsupportedExport", "MachineFault", "DistributedFailure",
         "AccuracyTargetUnmet", "Cancelled"]


def cli_source(name):
    """A model source string of tests/cli/check_cli.py (the encoder QNNPACK cannot lower one way)."""
    tree = ast.parse((Path(__file__).resolve().parent.parent / "cli" / "check_cli.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", None) == name)


class NoTensorOut(nn.Module):
    def forward(self, x):
        return x.size(0)


def main():
    failures = []
    for kind in KINDS:
        if not issubclass(getattr(versatil, kind, type(None)), versatil.Error):
            failures.append(f"versatil.{kind} is not a versatil.Error")
    torch.manual_seed(0)
    cnn = torch.jit.script(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10)).eval())
    x = torch.randn(32, 1, 28, 28)
    raised = set()

    def expect(kind, text, call):
        try:
            call()
        except versatil.Error as e:
            raised.add(type(e).__name__)
            if type(e).__name__ != kind or text not in str(e) or "\n" in str(e):
                failures.append(f"expected {kind} saying '{text}', got {type(e).__name__}: {e}")
            return
        failures.append(f"expected {kind} ('{text}'): nothing raised")

    with tempfile.TemporaryDirectory() as scratch:
        d = Path(scratch)
        # TorchScript reads a class's source from its file: the encoder's, written to one.
        (d / "cli_encoder.py").write_text("import torch\nfrom torch import nn\n" + cli_source("ENCODER_SOURCE"))
        sys.path.insert(0, scratch)
        import cli_encoder
        encoder = torch.jit.script(cli_encoder.Encoder().eval())
        tokens = x
        expect("InvalidArgument", "unknown option 'bogus'",
               lambda: versatil.quantize(cnn, x, targets={"": "xnnpack:bogus"}))
        expect("InvalidArgument", "torch.jit.script", lambda: versatil.quantize(nn.Linear(2, 2), x))
        expect("MissingModule", "'nope'", lambda: versatil.quantize(cnn, x, targets={"nope": "xnnpack"}))
        expect("UnsupportedDevice", "'meta'", lambda: versatil.quantize(torch.jit.script(nn.Linear(4, 2).to("meta")),
                                                                         torch.randn(8, 4)))
        expect("UnsupportedComposition", "lower to different quantized engines",
               lambda: versatil.quantize(cnn, x, targets={"0": "xnnpack", "3": "x86_inductor"}))
        expect("NoCalibrationData", "no data", lambda: versatil.quantize(cnn, None))
        expect("NoTrainingData", "QAT targets train", lambda: versatil.quantize(cnn, x, targets={"": "xnnpack:qat"}))
        expect("NoEvaluationData", "top-1 drop", lambda: versatil.quantize(cnn, x, max_accuracy_drop=1.0))
        expect("InvalidCalibrationData", "NaN",
               lambda: versatil.quantize(cnn, torch.full((4, 1, 28, 28), float("nan"))))
        expect("InvalidCalibrationData", "batch 1", lambda: versatil.quantize(cnn, [x, "not a batch"]))
        (d / "junk.pt").write_bytes(b"not a model")
        expect("InvalidModelFile", "junk.pt", lambda: versatil.load(str(d / "junk.pt")))
        quantized, _ = versatil.quantize(cnn, x, per_layer=False)
        expect("IoError", "does not exist", lambda: versatil.save(quantized, str(d / "no-such-dir" / "q.pt")))
        expect("LoweringFailed", "cannot run the lowered model",
               lambda: versatil.quantize(encoder, tokens, per_layer=False,
                                         targets={"": "xnnpack:dynamic", "encoder.0.self_attn.q_proj": None}))
        expect("UnsupportedModel", "no tensor", lambda: versatil.quantize(torch.jit.script(NoTensorOut()), x))
        expect("UnsupportedExport", "cannot export for firmware",
               lambda: versatil.export_firmware(encoder, tokens, str(d / "encoder.hpp"), per_layer=False))
        if (d / "encoder.hpp").exists():
            failures.append("a refused export left its header behind")
        expect("AccuracyTargetUnmet", "is not met", lambda: versatil.quantize(cnn, x, min_sqnr=300.0))

    # The caller's own exception, from inside its iterable, is not rewritten.
    def broken():
        yield x
        raise KeyError("the caller's own")
    try:
        versatil.quantize(cnn, broken())
        failures.append("an iterable that raises: nothing raised")
    except KeyError as e:
        if "the caller's own" not in str(e):
            failures.append(f"the iterable's KeyError changed: {e}")

    # Ctrl-C in the middle of a run, sent by another Python thread once the run has counted its first
    # step: that thread runs at all only because the pipeline released the GIL, and the run must stop at
    # its next steps (each a cancellation point), long before its last, with KeyboardInterrupt and
    # nothing written. The progress callable is SimpleQueue.put, C code: the run executes no Python
    # bytecode after the signal (which would raise KeyboardInterrupt by itself), so only the binding's
    # own signal check can stop it. The queue holds each step's label; the timer thread waits on it.
    steps = queue.SimpleQueue()
    def interrupt():
        try:
            steps.get(timeout=60)
        except queue.Empty:
            return
        os.kill(os.getpid(), signal.SIGINT)
    with tempfile.TemporaryDirectory() as scratch:
        header = Path(scratch) / "interrupted.hpp"
        timer = threading.Thread(target=interrupt)
        timer.start()
        try:
            versatil.export_firmware(cnn, torch.randn(4096, 1, 28, 28), str(header), progress=steps.put)
            failures.append("Ctrl-C during a run: the call returned")
        except KeyboardInterrupt:
            pass
        timer.join()
        # 4096 samples are 128 calibration batches, then a step per layer analysed: the uninterrupted run
        # counts at least 128 steps. A signal honoured only at the end would let them all through.
        counted = 1 + steps.qsize()
        if counted > 32:  # a quarter of the run: far from its end, with room for a loaded machine
            failures.append(f"Ctrl-C after the first step: the run went on for {counted} steps")
        if header.exists():
            failures.append("an interrupted export wrote its header")
        print(f"Ctrl-C honoured after {counted} of the run's 128 or more steps", flush=True)

    # A progress callable that raises stops the run there with its own exception.
    def refuse(label, done, total):
        raise RuntimeError(f"the caller stops at {label} {done}")
    try:
        versatil.quantize(cnn, x, progress=refuse)
        failures.append("a progress callable that raises: the call returned")
    except RuntimeError as e:
        if str(e) != "the caller stops at calibrating 1":
            failures.append(f"a progress callable that raises: its exception changed: {e}")

    missing = set(KINDS) - raised - set(UNREACHABLE)
    if missing:
        failures.append(f"kinds never raised: {sorted(missing)}")
    print(f"{len(raised)} error kinds raised as their classes; unreachable here: {', '.join(UNREACHABLE)}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

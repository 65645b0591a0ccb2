#!/usr/bin/python3
"""The data forms versatil.quantize reads, on Fashion-MNIST (Debian's dataset-fashion-mnist): a
DataLoader of (images, labels) calibrates and evaluates, its labels giving top-1; the figures must be
those PyTorch computes itself on the same samples (the float model's top-1, and the returned quantized
ScriptModule's), and the same as a tensor and labels= give, batch for batch."""
import gzip
import struct
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "zoo"))
import make_zoo  # noqa: E402

import versatil  # noqa: E402

# LibTorch's warning counts follow the number of timed runs, which the clock decides.
TIMINGS = {"float_ms", "quantized_ms", "float_ms_p10", "float_ms_p90", "quantized_ms_p10", "quantized_ms_p90",
           "latency_runs", "latency_unsteady", "libtorch_warnings", "speedup", "quantize_seconds"}


def labels(name, count):
    with gzip.open(make_zoo.FASHION_MNIST / name, "rb") as f:
        magic, _ = struct.unpack(">II", f.read(8))
        assert magic == 2049, f"{name}: not an IDX label file"
        return torch.frombuffer(bytearray(f.read(count)), dtype=torch.uint8).long()


def top1(scores, truth):
    return (scores.argmax(1) == truth).double().mean().item()  # a fraction, as the report has it


def main():
    failures = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 13 * 13, 10)).eval()
    scripted = torch.jit.script(model)
    train = make_zoo.read_idx_images(make_zoo.find_idx("train-images-idx3-ubyte"), 256)
    train_labels = labels("train-labels-idx1-ubyte.gz", 256)
    test = make_zoo.read_idx_images(make_zoo.find_idx("t10k-images-idx3-ubyte"), 128)
    test_labels = labels("t10k-labels-idx1-ubyte.gz", 128)

    # Batches of 32, as a tensor is split: the two forms must give one calibration.
    loader = DataLoader(TensorDataset(train, train_labels), batch_size=32)
    test_loader = DataLoader(TensorDataset(test, test_labels), batch_size=32)
    quantized, report = versatil.quantize(scripted, loader, evaluation=test_loader, per_layer=False)
    _, from_tensors = versatil.quantize(scripted, train, evaluation=test, labels=test_labels, per_layer=False)

    with torch.no_grad():
        float_top1 = top1(model(test), test_labels)
        torch.backends.quantized.engine = report["engine"]
        quantized_top1 = top1(quantized(test), test_labels)
    if report["evaluation_samples"] != 128 or not report["held_out"]:
        failures.append(f"evaluated on {report['evaluation_samples']} samples, held out {report['held_out']}")
    if report["float_accuracy"] != float_top1:
        failures.append(f"float top-1 {report['float_accuracy']} != PyTorch's {float_top1}")
    if report["quantized_accuracy"] != quantized_top1:
        failures.append(f"quantized top-1 {report['quantized_accuracy']} != the returned module's {quantized_top1}")
    differing = sorted(k for k in report if k not in TIMINGS and report[k] != from_tensors[k])
    if differing:
        failures.append(f"a DataLoader and tensors give different figures: {differing}")

    # Any iterable of batches: a generator of tensors, calibrating without evaluation data.
    _, generated = versatil.quantize(scripted, (train[i:i + 64] for i in range(0, 256, 64)), per_layer=False)
    if generated["evaluation_samples"] != 256 or generated["held_out"]:
        failures.append(f"a generator's batches: {generated['evaluation_samples']} samples, held out "
                        f"{generated['held_out']} (256 calibration samples expected)")
    print(f"DataLoader over Fashion-MNIST: top-1 {report['float_accuracy']:.2f} float, "
          f"{report['quantized_accuracy']:.2f} quantized, as PyTorch counts them")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""A small Fashion-MNIST CNN for a microcontroller, written the way users write one: a
conv-bn-relu stem, max pooling, a depthwise-separable block with a residual add, a strided
conv-bn-relu6, global average pooling and a linear head. Trains it briefly and
deterministically on Debian's dataset-fashion-mnist, scripts it (torch.jit.script) and writes
what versatil-quantize takes:

  fm_cnn.py OUT_DIR [--train N] [--epochs N] [--test N]
  versatil-quantize --model OUT_DIR/fm_cnn.pt --data OUT_DIR/fm_cnn.data.pt --target =cortex_m \\
      --export OUT_DIR/fm_cnn.hpp --export-namespace fm_cnn

The data file holds `calib` (training images), `test` and `test_labels` (the first test
images). Needs Debian's python3-torch (/usr/bin/python3)."""
import argparse
import gzip
import json
import struct
import sys
import time
from pathlib import Path

import torch
from torch import nn

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel mean and deviation (training set)


def read_idx(stem, count):
    """The first `count` records of an IDX file (images: uint8 [count, 1, 28, 28]; labels: int64)."""
    path = next((p for p in (FASHION_MNIST / stem, FASHION_MNIST / (stem + ".gz")) if p.exists()), None)
    if path is None:
        sys.exit(f"Fashion-MNIST is missing ({FASHION_MNIST / stem}): apt-get install dataset-fashion-mnist")
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        if magic == 2051:
            total, rows, cols = struct.unpack(">III", f.read(12))
            count = min(count, total)
            data = f.read(count * rows * cols)
            return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(count, 1, rows, cols)
        if magic == 2049:
            total = struct.unpack(">I", f.read(4))[0]
            count = min(count, total)
            return torch.frombuffer(bytearray(f.read(count)), dtype=torch.uint8).to(torch.int64)
    sys.exit(f"{path}: not an IDX file")


def normalized(images):
    return (images.float() / 255.0 - MEAN) / STD


class SeparableBlock(nn.Module):
    """Depthwise 3x3 then pointwise 1x1, each with batch norm, and the input added back."""

    def __init__(self, channels):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.depthwise_bn = nn.BatchNorm2d(channels)
        self.depthwise_relu = nn.ReLU()
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.pointwise_bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.depthwise_relu(self.depthwise_bn(self.depthwise(x)))
        y = self.pointwise_bn(self.pointwise(y))
        return self.relu(y + x)


class FashionCNN(nn.Module):
    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.block = SeparableBlock(width)
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * width), nn.ReLU6())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.pool(self.stem(x))  # 28x28 -> 14x14
        x = self.block(x)
        x = self.down(x)             # 14x14 -> 7x7
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(x)


def train(model, images, labels, epochs, batch_size=64):
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    steps = epochs * ((images.size(0) + batch_size - 1) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=steps)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(images.size(0))
        for start in range(0, images.size(0), batch_size):
            index = order[start:start + batch_size]
            loss = nn.functional.cross_entropy(model(images[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    return loss.item()


class DataFile(nn.Module):
    """A data file as versatil-quantize reads it: one buffer per tensor."""

    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)

    def forward(self):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--train", type=int, default=60000, help="training images (default: all 60000)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--test", type=int, default=2000, help="test images in the data file (default 2000)")
    parser.add_argument("--calib", type=int, default=512, help="calibration images (default 512)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # Deterministic: fixed seeds and one thread (the order of float sums depends on the thread
    # count; one thread also trains fastest on a machine whose cores are busy with other work).
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    train_images = normalized(read_idx("train-images-idx3-ubyte", args.train))
    train_labels = read_idx("train-labels-idx1-ubyte", args.train)
    test_images = normalized(read_idx("t10k-images-idx3-ubyte", args.test))
    test_labels = read_idx("t10k-labels-idx1-ubyte", args.test)

    model = FashionCNN()
    start = time.monotonic()
    final_loss = train(model, train_images, train_labels, args.epochs)
    seconds = time.monotonic() - start
    with torch.no_grad():
        accuracy = (model(test_images).argmax(1) == test_labels).float().mean().item()

    scripted = torch.jit.script(model)
    scripted.eval()
    torch.jit.save(scripted, str(out / "fm_cnn.pt"))
    data = {"calib": train_images[-args.calib:].clone(), "test": test_images, "test_labels": test_labels}
    torch.jit.save(torch.jit.script(DataFile(data)), str(out / "fm_cnn.data.pt"))
    summary = {"train_images": train_images.size(0), "epochs": args.epochs, "train_seconds": round(seconds, 1),
               "final_loss": round(final_loss, 4), "float_top1": accuracy, "test_images": test_images.size(0)}
    (out / "fm_cnn.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"fm_cnn: {summary['train_images']} images x {args.epochs} epochs in {seconds:.1f} s, final loss "
          f"{final_loss:.3f}, float top-1 {100 * accuracy:.2f} % on {summary['test_images']} test images")
    print(f"wrote {out / 'fm_cnn.pt'} and {out / 'fm_cnn.data.pt'}")


if __name__ == "__main__":
    main()

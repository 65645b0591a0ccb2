#!/usr/bin/python3
"""Models for the firmware export's extraction tests (tests/torch/export.cpp), written and
scripted (torch.jit.script) the way users write them, into OUT_DIR. Needs Debian's
python3-torch (/usr/bin/python3).

  export_models.py OUT_DIR

- separable.pt: [N, 3, 32, 32] -> 10. A strided conv-bn-relu stem, ResNet's 3x3/2 max pool
  with padding, a depthwise-separable block with a residual add, a strided conv-bn-ReLU6, a
  2x2 average pool, a view to one row, linear + relu, a linear head.
- pooled.pt: [N, 3, 32, 32] -> 5. A dilated conv, max pool then a separate relu, adaptive
  average pooling by a whole factor (16 -> 4), a clamp, global average pooling, flatten, linear.
- mlp.pt: [N, 20] -> 4. Linear, relu, linear: a model of rows, not images.
- gate.pt: a conv followed by nn.GELU (module 'act'), which LibTorch runs in float and firmware cannot run.
- encoder.pt: rows of 8 tokens x 16 features through nn.TransformerEncoderLayer ('encoder').
- input_residual.pt: [N, 3, 32, 32] -> 3. A conv whose output is added to the input itself: the
  add reads the input, so --export-input-layout hwc refuses it (only a convolution reads a
  channel-last input in place).
"""
import sys
from pathlib import Path

import torch
from torch import nn


class SeparableBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.depthwise_bn = nn.BatchNorm2d(channels)
        self.depthwise_relu = nn.ReLU(inplace=True)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.pointwise_bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = self.depthwise_relu(self.depthwise_bn(self.depthwise(x)))
        return torch.relu(self.pointwise_bn(self.pointwise(y)) + x)


class Separable(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block = SeparableBlock(8)
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU6())
        self.smooth = nn.AvgPool2d(2)
        self.fc1 = nn.Linear(64, 12)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x):
        x = self.pool(self.stem(x))     # 32 -> 16 -> 8
        x = self.block(x)
        x = self.smooth(self.down(x))   # 8 -> 4 -> 2
        x = x.view(x.size(0), -1)       # 16 x 2 x 2 -> 64
        return self.fc2(self.relu(self.fc1(x)))


class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=2, dilation=2)
        self.pool = nn.MaxPool2d(2)
        self.act = nn.ReLU()
        self.area = nn.AdaptiveAvgPool2d(4)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.act(self.pool(self.conv(x)))          # 32 -> 16
        x = torch.clamp(self.area(x), min=-1.0, max=2.0)  # 16 -> 4
        return self.fc(torch.flatten(self.avgpool(x), 1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(20, 32)
        self.act = nn.ReLU()
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        return self.out(self.act(self.hidden(x)))


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.GELU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.encoder = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


class InputResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.head = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return torch.flatten(self.head(torch.relu(self.conv(x) + x)), 1)


def settle_batch_norm(model, inputs):
    """Batch-norm statistics as after training (random ones would make layers near zero)."""
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(inputs)
    model.eval()


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    separable = Separable()
    settle_batch_norm(separable, torch.randn(32, 3, 32, 32))
    models = [("separable", separable), ("pooled", Pooled()), ("mlp", MLP()), ("gate", Gate()), ("encoder", Encoder()),
              ("input_residual", InputResidual())]
    for name, model in models:
        model.eval()
        torch.jit.save(torch.jit.script(model), str(out / f"{name}.pt"))
    print(f"wrote {', '.join(name for name, _ in models)} to {out}")


if __name__ == "__main__":
    main()

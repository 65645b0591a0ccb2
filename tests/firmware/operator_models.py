#!/usr/bin/python3
"""Models for the firmware operators beyond the MLPerf Tiny four (issue 36), written as users
write them and scripted with torch.jit.script; random weights, batch norm settled
(mlperf_tiny_models.settled). Each puts the operators through LibTorch's own graph-mode
quantization, so the export meets them as LibTorch lowers them (some int8, some as float
islands between a dequantize and a quantize):

- squeeze_excite: [3, 16, 16] -> 10. Conv + hardswish, a squeeze-and-excite block (global
  average pooling, 1x1 convs, hardsigmoid, the gate multiplied per channel), sigmoid and tanh
  branches concatenated along channels, flatten, linear.
- sequence: [8, 32] (channels x time) -> 6. conv1d + relu (no batch norm: LibTorch 1.13 folds
  none after a conv1d, and neither does the export yet), F.pad in time (a float island in
  LibTorch), conv1d, a transpose to time-major and back, a second branch concatenated along time,
  an unsqueeze to an image and global average pooling, linear, softmax.
- mobilenet_v3_small: torchvision's MobileNetV3-small (10 classes) on [3, 64, 64]: hardswish,
  hardsigmoid squeeze-and-excite, 5x5 depthwise convolutions, dropout.

  operator_models.py OUT_DIR [--only NAME,...] [--calib N] [--test N]

writes what mlperf_tiny_models.py writes, per model. Needs Debian's python3-torch and
python3-torchvision (/usr/bin/python3).
"""
import sys
from pathlib import Path

import torch
import torchvision
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlperf_tiny_models  # noqa: E402


class SqueezeExcite(nn.Module):
    input_shape = (3, 16, 16)

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.squeeze = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(16, 4, 1)
        self.expand = nn.Conv2d(4, 16, 1)
        self.gate = nn.Hardsigmoid()
        self.left = nn.Conv2d(16, 8, 1)
        self.right = nn.Conv2d(16, 8, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.classifier = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = self.stem(x)                                             # 16 x 8 x 8
        x = x * self.gate(self.expand(torch.relu(self.reduce(self.squeeze(x)))))
        x = torch.cat([torch.sigmoid(self.left(x)), torch.tanh(self.right(x))], dim=1)
        return self.classifier(torch.flatten(self.pool(x), 1))


class Sequence(nn.Module):
    input_shape = (8, 32)

    def __init__(self):
        super().__init__()
        self.first = nn.Sequential(nn.Conv1d(8, 16, 5, padding=2), nn.ReLU())  # (Conv1d + BatchNorm1d is not folded)
        self.second = nn.Conv1d(16, 16, 3)
        self.side = nn.Conv1d(16, 16, 1)
        self.head = nn.Linear(16, 6)

    def forward(self, x):
        x = self.first(x)                                            # 16 x 32
        y = self.second(F.pad(x, (1, 1)))                            # 16 x 32
        y = y.transpose(1, 2).contiguous()                           # 32 x 16: time-major
        y = y.permute(0, 2, 1)                                       # 16 x 32
        z = torch.cat([y, self.side(x)], dim=2)                      # 16 x 64
        pooled = F.adaptive_avg_pool2d(z.unsqueeze(2), 1).flatten(1)    # (LibTorch pools 1-D in float)
        return torch.softmax(self.head(pooled), dim=1)


class MobileNetV3Small(nn.Module):
    input_shape = (3, 64, 64)

    def __init__(self):
        super().__init__()
        self.net = torchvision.models.mobilenet_v3_small(num_classes=10)

    def forward(self, x):
        return self.net(x)


MODELS = {"squeeze_excite": SqueezeExcite, "sequence": Sequence, "mobilenet_v3_small": MobileNetV3Small}

if __name__ == "__main__":
    mlperf_tiny_models.main(MODELS)

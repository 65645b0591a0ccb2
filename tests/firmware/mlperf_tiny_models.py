#!/usr/bin/python3
"""The four MLPerf Tiny reference architectures, written here in PyTorch from their public
descriptions (the MLPerf Tiny benchmark paper, Banbury et al. 2021, and its reference
submissions' model summaries); not trained: weights are PyTorch's random initialization and
batch norm is settled by a few train-mode passes on random data, so its running statistics
and affine parameters are not the identity a fold could hide behind. What the firmware tests
need is the architectures' layers and shapes, not their accuracy.

  mlperf_tiny_models.py OUT_DIR [--only NAME,...] [--calib N] [--test N]

writes, per model, OUT_DIR/NAME.pt (scripted with torch.jit.script, eval mode) and
OUT_DIR/NAME.data.pt (versatil-quantize's data file: `calib` and `test`, random normal data of
the input's shape), and OUT_DIR/NAME.float.pt (the float model's outputs on `test`, for SQNR).
Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import sys
from pathlib import Path

import torch
from torch import nn


def conv_bn_relu(cin, cout, kernel, stride=1, padding=0, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


def separable(cin, cout, stride=1):
    """Depthwise 3x3 (stride) + batch norm + ReLU, then pointwise 1x1 + batch norm + ReLU."""
    return nn.Sequential(conv_bn_relu(cin, cin, 3, stride, 1, groups=cin), conv_bn_relu(cin, cout, 1))


class KeywordSpotting(nn.Module):
    """DS-CNN (small) on 49x10 MFCCs: conv 10x4 stride 2 with 64 channels ('same' padding: 25x5 out),
    four depthwise-separable blocks of 64 channels, global average pooling, FC 12."""

    input_shape = (1, 49, 10)

    def __init__(self):
        super().__init__()
        self.stem = conv_bn_relu(1, 64, (10, 4), 2, (5, 1))
        self.blocks = nn.Sequential(*[separable(64, 64) for _ in range(4)])
        self.pool = nn.AvgPool2d((25, 5))
        self.classifier = nn.Linear(64, 12)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class VisualWakeWords(nn.Module):
    """MobileNetV1 with width 0.25 on 96x96x3: conv 3x3 stride 2 with 8 channels, thirteen
    depthwise-separable blocks (channels 16, 32, 32, 64, 64, 128 x6, 256 x2; stride 2 where the
    channels double, but not at the first), global average pooling, FC 2."""

    input_shape = (3, 96, 96)

    def __init__(self):
        super().__init__()
        # (output channels, stride) of each block; the input channels are the previous output's.
        plan = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
        layers, channels = [conv_bn_relu(3, 8, 3, 2, 1)], 8
        for out, stride in plan:
            layers.append(separable(channels, out, stride))
            channels = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(256, 2)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class Residual(nn.Module):
    """Two 3x3 convolutions with batch norm, added to the input (through a 1x1 strided
    convolution where the shape changes), then ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.first = conv_bn_relu(cin, cout, 3, stride, 1)
        self.second = nn.Sequential(nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else \
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.second(self.first(x)) + self.shortcut(x))


class ImageClassification(nn.Module):
    """ResNet-8 on 32x32x3 (CIFAR-10): conv 3x3 16 channels, three residual stages of 16, 32, 64
    channels (the last two stride 2), global average pooling, FC 10."""

    input_shape = (3, 32, 32)

    def __init__(self):
        super().__init__()
        self.stem = conv_bn_relu(3, 16, 3, 1, 1)
        self.stages = nn.Sequential(Residual(16, 16, 1), Residual(16, 32, 2), Residual(32, 64, 2))
        self.pool = nn.AvgPool2d(8)
        self.classifier = nn.Linear(64, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


def dense(cin, cout):
    return nn.Sequential(nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU())


class AnomalyDetection(nn.Module):
    """The fully connected autoencoder on 640 features (5 frames of 128 log-mel bins): four
    FC 128 layers with batch norm and ReLU, a bottleneck of 8, the decoder's mirror of four, FC 640."""

    input_shape = (640,)

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(dense(640, 128), dense(128, 128), dense(128, 128), dense(128, 128), dense(128, 8))
        self.decoder = nn.Sequential(dense(8, 128), dense(128, 128), dense(128, 128), dense(128, 128),
                                     nn.Linear(128, 640))

    def forward(self, x):
        return self.decoder(self.encoder(x))


MODELS = {"keyword_spotting": KeywordSpotting, "visual_wake_words": VisualWakeWords,
          "image_classification": ImageClassification, "anomaly_detection": AnomalyDetection}


class DataFile(nn.Module):
    """versatil-quantize's data file: a TorchScript module whose tensor attributes are the data."""

    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            setattr(self, name, tensor)

    def forward(self):
        return 0


def settled(model, shape, seed):
    """`model` with its batch norms' statistics from train-mode passes on random data and random
    affine parameters, in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
            module.momentum = None  # cumulative average over the passes
            with torch.no_grad():
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.uniform_(-0.2, 0.2, generator=generator)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(32, *shape, generator=generator))
    return model.eval()


def write(name, out, calib, test, seed=0, models=MODELS):
    torch.manual_seed(seed)
    cls = models[name]
    model = settled(cls(), cls.input_shape, seed + 1)
    generator = torch.Generator().manual_seed(seed + 2)
    data = {"calib": torch.randn(calib, *cls.input_shape, generator=generator),
            "test": torch.randn(test, *cls.input_shape, generator=generator)}
    scripted = torch.jit.script(model)
    scripted.save(str(out / f"{name}.pt"))
    torch.jit.script(DataFile(data)).save(str(out / f"{name}.data.pt"))
    with torch.no_grad():
        reference = scripted(data["test"])
    torch.jit.script(DataFile({"test": data["test"], "output": reference})).save(str(out / f"{name}.float.pt"))
    return model


def main(models=MODELS):
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--only", default=",".join(models))
    parser.add_argument("--calib", type=int, default=64)
    parser.add_argument("--test", type=int, default=16)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        if name not in models:
            sys.exit(f"unknown model {name}: one of {', '.join(models)}")
        model = write(name, out, args.calib, args.test, models=models)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the architecture zoo: models written by other people, scripted the way users do
(torch.jit.script), each with a data file, into OUT_DIR. Needs Debian's python3-torch and
python3-torchvision (/usr/bin/python3).

  make_zoo.py OUT_DIR [--only NAME[,NAME...]] [--list]
  make_zoo.py --module-names > tests/fuzz/module_names.txt

--module-names prints the path of every submodule of every zoo model (named_modules), sorted
and unique: the real names the module-path grammars are checked against (tests/fuzz).

Each torchvision classifier is torchvision's own class at a small size (fewer blocks or a
narrow width where the architecture takes one, a 64x64 input), so the suite stays fast while
every block type of the architecture is there. Random weights are made to look trained:
batch-norm statistics are settled on the data (as after training) and the classification head
is scaled so logits are of order one (a random head gives ~1e-4, which no trained model has).

Images are Fashion-MNIST's (Debian's dataset-fashion-mnist), upsampled to 64x64 and repeated
over three channels. Beside the classifiers: a transformer encoder of repeated blocks, a text
model on int64 token ids, a multi-task model with a tuple and a dict output, and a model
with two inputs (its data file holds calib_0 / calib_1 and test_0 / test_1).

A file `zoo.json` lists every model with its input description, for the tests and benchmarks."""
import argparse
import gzip
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torchvision
from torch import nn
from torchvision import models

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
IMAGE_SIZE = 64
CALIBRATION_SAMPLES = 64
TEST_SAMPLES = 64


def read_idx_images(name, count):
    """The first `count` images of an IDX file as float32 [count, 1, 28, 28] in [0, 1]."""
    path = FASHION_MNIST / name
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        magic, total, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            sys.exit(f"{path}: not an IDX image file")
        data = f.read(count * rows * cols)
    pixels = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(count, 1, rows, cols)
    return pixels.float() / 255.0


def find_idx(stem):
    for candidate in (FASHION_MNIST / stem, FASHION_MNIST / (stem + ".gz")):
        if candidate.exists():
            return candidate.name
    sys.exit(f"Fashion-MNIST is missing ({FASHION_MNIST / stem}): apt-get install dataset-fashion-mnist")


def images(stem, count, offset=0):
    """Fashion-MNIST images as a torchvision classifier takes them: [count, 3, 64, 64],
    normalised with ImageNet's mean and deviation."""
    raw = read_idx_images(find_idx(stem), offset + count)[offset:]
    resized = nn.functional.interpolate(raw, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
    rgb = resized.repeat(1, 3, 1, 1)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (rgb - mean) / std


# --- torchvision classifiers, small -------------------------------------------------------


def small_resnext():
    # torchvision's ResNeXt (grouped bottlenecks, 32x4d) with one block per stage.
    return models.resnet.ResNet(models.resnet.Bottleneck, [1, 1, 1, 1], groups=32, width_per_group=4)


def small_regnet():
    # torchvision's RegNet (Y variant: squeeze-excitation) with RegNetY-400MF's widths, fewer blocks.
    params = models.regnet.BlockParams.from_init_params(depth=6, w_0=48, w_a=27.89, w_m=2.09, group_width=8,
                                                        se_ratio=0.25)
    return models.regnet.RegNet(params)


def small_densenet():
    return models.densenet.DenseNet(growth_rate=16, block_config=(2, 2, 2, 2), num_init_features=32)


def small_convnext():
    cnf = models.convnext.CNBlockConfig
    settings = [cnf(32, 64, 1), cnf(64, 128, 1), cnf(128, 256, 1), cnf(256, None, 1)]
    return models.convnext.ConvNeXt(settings, stochastic_depth_prob=0.1)


def small_efficientnet():
    # efficientnet_b0's block list (MBConv with squeeze-excitation and stochastic depth) at a
    # reduced width and depth; its `if not self.training` branches are what matters here.
    settings, last_channel = models.efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    return models.efficientnet.EfficientNet(settings, dropout=0.2, last_channel=last_channel)


def small_vit():
    return models.vision_transformer.VisionTransformer(image_size=IMAGE_SIZE, patch_size=16, num_layers=2,
                                                       num_heads=4, hidden_dim=64, mlp_dim=128)


CLASSIFIERS = {
    "resnet18": lambda: models.resnet18(),
    "resnext": small_resnext,
    "mobilenet_v2": lambda: models.mobilenet_v2(width_mult=0.5),
    "mobilenet_v3_small": lambda: models.mobilenet_v3_small(),
    "shufflenet_v2": lambda: models.shufflenet_v2_x0_5(),
    "squeezenet": lambda: models.squeezenet1_1(),
    "mnasnet": lambda: models.mnasnet0_5(),
    "efficientnet": small_efficientnet,
    "regnet": small_regnet,
    "densenet": small_densenet,
    "convnext": small_convnext,
    "vit": small_vit,
}


# --- hand-written models of the shapes real ones have ----------------------------------------


class Block(nn.Module):
    """A transformer encoder block: pre-norm MLP with a residual add. Two instances share one
    TorchScript class type, as every repeated block in a scripted model does."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Encoder(nn.Module):
    def __init__(self, dim=64, depth=2, classes=10):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):  # x: [batch, tokens, dim]
        return self.head(self.blocks(x).mean(dim=1))


class TextClassifier(nn.Module):
    """Token ids in (int64), an embedding, attention blocks, logits out."""

    def __init__(self, vocabulary=1000, dim=64, classes=4):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embedding(tokens)).mean(dim=1))


class MultiTask(nn.Module):
    """One trunk, two heads: logits and a box, as a tuple."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classes = nn.Linear(32, 10)
        self.box = nn.Linear(32, 4)

    def forward(self, x):
        features = self.trunk(x)
        return self.classes(features), self.box(features)


class DictHeads(nn.Module):
    """Named outputs, as detection-style and multi-task models return them."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten())
        self.logits = nn.Linear(16, 10)
        self.embedding = nn.Linear(16, 8)

    def forward(self, x):
        features = self.trunk(x)
        return {"logits": self.logits(features), "embedding": self.embedding(features)}


class TwoInputs(nn.Module):
    """An image and a feature vector, fused: calib_0 / calib_1 in the data file."""

    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten())
        self.features = nn.Linear(12, 8)
        self.head = nn.Linear(16, 10)

    def forward(self, image, features):
        return self.head(torch.cat([self.image(image), torch.relu(self.features(features))], dim=1))


# --- making random weights look trained ------------------------------------------------------


def settle_batch_norm(model, batches):
    """Batch-norm running statistics as after training: the cumulative mean and variance of
    the data that reaches each layer."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for batch in batches:
            model(*batch)
    model.eval()
    for m in norms:
        m.momentum = 0.1


def last_linear(model):
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def scale_head(model, batches, output_of=lambda y: y):
    """Scales the last linear layer so the logits' deviation is 1."""
    head = last_linear(model)
    if head is None:
        return
    with torch.no_grad():
        deviation = torch.cat([output_of(model(*b)).flatten() for b in batches]).std().item()
        if deviation > 0 and math.isfinite(deviation):
            head.weight.mul_(1.0 / deviation)
            if head.bias is not None:
                head.bias.mul_(1.0 / deviation)


# --- data files ------------------------------------------------------------------------------


class DataFile(nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)

    def forward(self):
        return None


def save_data(path, tensors):
    torch.jit.save(torch.jit.script(DataFile(tensors)), str(path))


def batches_of(inputs, rows=16):
    """Tuples of model inputs, `rows` samples each."""
    count = inputs[0].size(0)
    return [tuple(t[i:i + rows] for t in inputs) for i in range(0, count, rows)]


def randomize_zero_weights(model):
    """Some architectures start a layer at zero (ViT's head): a trained model's is not."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)) and not m.weight.detach().any():
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5))


WEIGHTED_OPS = {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::linear"}


def executed_ops(scripted, inputs):
    """How many conv and linear ops one eval-mode forward of the scripted model runs, counted
    by PyTorch's profiler: the truth a report's op count must match. Gradients stay on, so
    nn.MultiheadAttention and nn.TransformerEncoderLayer take their reference branch (the one
    with linear layers) rather than their fused inference fast path, as quantization does."""
    with torch.autograd.profiler.profile() as profile:
        scripted(*inputs)
    names = [event.name for event in profile.function_events]
    return {"conv_linear": sum(n in WEIGHTED_OPS for n in names), "linear": sum(n == "aten::linear" for n in names)}


def weighted_modules(model, kinds=(nn.Conv1d, nn.Conv2d, nn.Linear)):
    """Paths of the modules that are convolution or linear layers (or of `kinds`)."""
    return sorted(path for path, m in model.named_modules() if isinstance(m, kinds))


def write(out, name, model, calibration, test, labels=None, description="", output_of=lambda y: y):
    """Settles, scales, scripts and saves one model and its data file; returns its zoo entry."""
    model.eval()
    randomize_zero_weights(model)
    settle_batch_norm(model, batches_of(calibration))
    scale_head(model, batches_of(calibration), output_of)
    scripted = torch.jit.script(model)
    scripted.eval()
    torch.jit.save(scripted, str(out / f"{name}.pt"))
    executed = executed_ops(scripted, tuple(t[:2] for t in calibration))
    tensors = {}
    if len(calibration) == 1:
        tensors["calib"], tensors["test"] = calibration[0], test[0]
    else:
        for i, (c, t) in enumerate(zip(calibration, test)):
            tensors[f"calib_{i}"], tensors[f"test_{i}"] = c, t
    if labels is not None:
        tensors["test_labels"] = labels
    save_data(out / f"{name}.data.pt", tensors)
    return {"name": name, "model": f"{name}.pt", "data": f"{name}.data.pt", "description": description,
            "inputs": [f"{list(t.shape[1:])} {str(t.dtype).replace('torch.', '')}" for t in calibration],
            "executed_ops": executed, "weighted_modules": weighted_modules(model),
            "linear_modules": weighted_modules(model, nn.Linear),
            "module_names": sorted(path for path, _ in model.named_modules() if path)}


EXTRAS = {"encoder": Encoder, "text": TextClassifier, "multitask": MultiTask, "dict_heads": DictHeads,
          "two_inputs": TwoInputs}


def module_names():
    """Every submodule path of every zoo model, as the models are built (no data needed)."""
    torch.manual_seed(0)
    paths = set()
    for make in list(CLASSIFIERS.values()) + list(EXTRAS.values()):
        paths.update(path for path, _ in make().named_modules() if path)
    return sorted(paths)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?")
    parser.add_argument("--only", default="")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--module-names", action="store_true")
    args = parser.parse_args()

    names = list(CLASSIFIERS) + list(EXTRAS)
    if args.list:
        print("\n".join(names))
        return
    if args.module_names:
        print("\n".join(module_names()))
        return
    if args.out is None:
        parser.error("OUT_DIR is required")
    wanted = [n for n in args.only.split(",") if n] or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        sys.exit(f"unknown zoo model(s): {', '.join(unknown)}; known: {', '.join(names)}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = images("train-images-idx3-ubyte", CALIBRATION_SAMPLES)
    test = images("t10k-images-idx3-ubyte", TEST_SAMPLES)
    entries = []
    for name in wanted:
        torch.manual_seed(0)
        if name in CLASSIFIERS:
            model = CLASSIFIERS[name]()
            entries.append(write(out, name, model, [train], [test],
                                 description=f"torchvision {type(model).__name__}"))
        elif name == "encoder":
            tokens = lambda x: x[:, 0, ::4, :].contiguous()  # image rows as 16 tokens of 64 features
            entries.append(write(out, name, Encoder(), [tokens(train)], [tokens(test)],
                                 description="two Block instances of one class: LayerNorm, Linear-GELU-Linear, "
                                             "residual"))
        elif name == "text":
            generator = torch.Generator().manual_seed(1)
            calib = torch.randint(0, 1000, (CALIBRATION_SAMPLES, 24), generator=generator)
            held_out = torch.randint(0, 1000, (TEST_SAMPLES, 24), generator=generator)
            entries.append(write(out, name, TextClassifier(), [calib], [held_out],
                                 description="int64 token ids, nn.Embedding, nn.TransformerEncoder"))
        elif name == "multitask":
            entries.append(write(out, name, MultiTask(), [train], [test], description="tuple output (logits, box)",
                                 output_of=lambda y: y[1]))
        elif name == "dict_heads":
            entries.append(write(out, name, DictHeads(), [train], [test], description="dict output",
                                 output_of=lambda y: y["embedding"]))
        elif name == "two_inputs":
            generator = torch.Generator().manual_seed(2)
            extra_calib = torch.randn(CALIBRATION_SAMPLES, 12, generator=generator)
            extra_test = torch.randn(TEST_SAMPLES, 12, generator=generator)
            entries.append(write(out, name, TwoInputs(), [train, extra_calib], [test, extra_test],
                                 description="two inputs: an image and a feature vector"))
        print(f"wrote {name}", flush=True)
    (out / "zoo.json").write_text(json.dumps(entries, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the seed corpus (run once; the files are committed): small TorchScript models with
and without versatil metadata, data files, and broken variants, for fuzz_model_file; paths and
target specs for the core's fuzzers. Needs Debian's python3-torch (/usr/bin/python3). Usage: make_corpus.py CORPUS_DIR"""
import io
import json
import sys
from pathlib import Path

import torch

out = Path(sys.argv[1])


def write(target, name, data):
    (out / target).mkdir(parents=True, exist_ok=True)
    (out / target / name).write_bytes(data if isinstance(data, bytes) else data.encode())


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Data(torch.nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, tensor in tensors.items():
            self.register_buffer(name, tensor)

    def forward(self):
        return None


def saved(module, extra=None):
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer, _extra_files=extra or {})
    return buffer.getvalue()


torch.manual_seed(0)
model = saved(Tiny())
write("model_file", "model.pt", model)
metadata = {"versatil_version": "0.1.0", "engine": "qnnpack", "backends": ["xnnpack"], "targets": [], "adjustments": []}
write("model_file", "model_with_metadata.pt", saved(Tiny(), {"versatil.json": json.dumps(metadata)}))
write("model_file", "model_bad_metadata.pt", saved(Tiny(), {"versatil.json": "{not json"}))
write("model_file", "data.pt", saved(Data({"calib": torch.randn(3, 2), "test": torch.randn(2, 2),
                                           "test_labels": torch.tensor([0, 1])})))
write("model_file", "data_scalar_labels.pt", saved(Data({"test": torch.randn(2, 2), "test_labels": torch.tensor(1)})))
write("model_file", "truncated.pt", model[: len(model) // 2])
write("model_file", "empty", b"")

for name, text in {"whole": "\x00", "nested": "\x00features\n\x06features.0\n\x02classifier.fc1",
                   "bad": "\x00features..0\n\x01", "overlap": "\x00a\n\x00a.b\n\x01a.b.0"}.items():
    write("module_path", name, text)
for name, text in {"whole": "=x86_inductor", "options": "features=xnnpack:per_tensor,dynamic", "none": "a.b=none",
                   "unknown": "x=tensorrt", "bad": "features"}.items():
    write("target_spec", name, text)

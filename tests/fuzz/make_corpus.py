#!/usr/bin/python3
"""Writes the seed corpus (run once; the files are committed): small TorchScript models with
and without versatil metadata, data files, and broken variants, for fuzz_model_file; paths and
target specs for the core's fuzzers. Needs Debian's python3-torch (/usr/bin/python3).
Usage: make_corpus.py CORPUS_DIR"""
import io
import json
import struct
import zipfile
import sys
from pathlib import Path

import torch
import torch.jit._pickle  # restore_type_tag, which C++'s torch::pickle_save names

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


def torch_saved(value):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


class TypeTagged:
    """A dict as C++'s torch::pickle_save writes one: restore_type_tag(dict, "Dict[str, Tensor]")."""

    def __init__(self, tensors):
        self.tensors = tensors

    def __reduce__(self):
        return torch.jit._pickle.restore_type_tag, (self.tensors, "Dict[str, Tensor]")


data_tensors = {"calib": torch.randn(3, 2), "test": torch.randn(2, 2), "test_labels": torch.tensor([0, 1])}
write("model_file", "saved_dict.pt", torch_saved(data_tensors))
write("model_file", "type_tagged_dict.pt", torch_saved(TypeTagged(data_tensors)))


def rewritten(archive, edit):
    """The archive with edit(name, bytes) applied to each record, rezipped with valid CRCs:
    files that are intact as zip archives but lie inside, as the fuzzer's findings did."""
    source, buffer = zipfile.ZipFile(io.BytesIO(archive)), io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as target:
        for info in source.infolist():
            target.writestr(info, edit(info.filename, source.read(info)))
    return buffer.getvalue()


def huge_memo_index(name, data):
    """LONG_BINPUT 1633907551 after the first 'training' key: LibTorch would grow its memo to 26 GB."""
    if not name.endswith("/data.pkl"):
        return data
    put = data.index(b"trainingq") + 8
    return data[:put] + b"r" + struct.pack("<I", 1633907551) + data[put + 5:]


def untyped_class_attribute(name, data):
    """`__parametels__ = []`: a class attribute with no annotation, which LibTorch 1.13's
    parseClassConstant dereferences as if it had one (a segfault, found by the fuzzer)."""
    return data.replace(b"__parameters__ = ", b"__parametels__ = ") if name.endswith(".py") else data


write("model_file", "memo_index_26gb.pt", rewritten(model, huge_memo_index))
write("model_file", "untyped_class_attribute.pt", rewritten(model, untyped_class_attribute))
write("model_file", "empty", b"")

for name, text in {"whole": "\x00", "nested": "\x00features\n\x06features.0\n\x02classifier.fc1",
                   "bad": "\x00features..0\n\x01", "overlap": "\x00a\n\x00a.b\n\x01a.b.0"}.items():
    write("module_path", name, text)
for name, text in {"whole": "=x86_inductor", "options": "features=xnnpack:per_tensor,dynamic", "none": "a.b=none",
                   "unknown": "x=tensorrt", "bad": "features"}.items():
    write("target_spec", name, text)

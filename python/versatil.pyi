# Type hints for the extension module versatil (python/versatil_module.cpp; docs/python.md).
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple, Union

import torch

__version__: str

# A tensor batched along dim 0 (split as the CLI splits a data file), a tuple of such tensors (one
# per forward argument), or an iterable of batches: each a tensor, or a tuple/list of the model's
# inputs optionally followed by integer labels (a DataLoader's (images, labels)).
Batches = Union[torch.Tensor, Tuple[torch.Tensor, ...], Iterable[Any]]
# {"PATH": "BACKEND[:OPT[,OPT]]"}: "" is the whole model; None keeps PATH in float.
Targets = Mapping[str, Optional[str]]

class Report(dict):
    """The JSON report's fields; str() gives the CLI's table."""

class Error(Exception): ...
class InvalidArgument(Error): ...
class MissingModule(Error): ...
class UnsupportedDevice(Error): ...
class UnsupportedComposition(Error): ...
class NoCalibrationData(Error): ...
class NoTrainingData(Error): ...
class NoEvaluationData(Error): ...
class InvalidCalibrationData(Error): ...
class InvalidModelFile(Error): ...
class InvalidDataFile(Error): ...
class IoError(Error): ...
class LoweringFailed(Error): ...
class UnsupportedModel(Error): ...
class UnsupportedExport(Error): ...
class MachineFault(Error): ...
class DistributedFailure(Error): ...
class AccuracyTargetUnmet(Error): ...
class Cancelled(Error): ...

# Called with (label, done, total) at each step a run counts (a calibration batch, a training step, a
# layer analysed); an exception it raises stops the run there and is raised as it was.
Progress = Callable[[str, int, int], None]

def quantize(
    model: torch.jit.ScriptModule,
    calibration: Optional[Batches],
    *,
    targets: Targets = {"": "xnnpack"},
    evaluation: Optional[Batches] = None,
    labels: Optional[torch.Tensor] = None,
    per_layer: bool = True,
    threads: int = 1,
    progress: Optional[Progress] = None,
    min_sqnr: Optional[float] = None,
    max_accuracy_drop: Optional[float] = None,
) -> Tuple[torch.jit.ScriptModule, Report]: ...
def train_qat(
    model: torch.jit.ScriptModule,
    train_inputs: torch.Tensor,
    train_labels: torch.Tensor,
    *,
    targets: Targets = {"": "xnnpack:qat"},
    evaluation: Optional[Batches] = None,
    labels: Optional[torch.Tensor] = None,
    steps: int = 300,
    learning_rate: float = 1e-4,
    batch_size: int = 64,
    freeze_observers_after: Optional[int] = None,
    threads: int = 1,
    progress: Optional[Progress] = None,
) -> Tuple[torch.jit.ScriptModule, Report]: ...
def export_firmware(
    model: torch.jit.ScriptModule,
    calibration: Batches,
    path: str,
    *,
    namespace: Optional[str] = None,
    targets: Targets = {"": "cortex_m"},
    evaluation: Optional[Batches] = None,
    labels: Optional[torch.Tensor] = None,
    input_layout: str = "chw",
    per_layer: bool = True,
    threads: int = 1,
    progress: Optional[Progress] = None,
) -> Tuple[torch.jit.ScriptModule, Report]: ...
def save(model: torch.jit.ScriptModule, path: str) -> None: ...
def load(path: str) -> torch.jit.ScriptModule: ...
def backends() -> dict[str, list[str]]: ...

"""What is measured: a benchmark, a registry entry, a training script (``benchmark``, ``registry/``, ``training/``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

BENCHMARK_KINDS = ("operator", "training", "roofline")


@dataclass
class BenchmarkConfig:
    """A workload. ``kind`` says which fields matter (validated here, not by subclassing: hydra#1722).

    operator: ``op_type`` (matched against registry synonyms) and ``operations``, a list of parameter
    maps by descriptor, each merged over ``common``. training: ``training`` names a training-benchmark
    registry entry. roofline: no extra fields.
    """

    name: str = MISSING
    kind: str = "operator"
    op_type: str = ""
    description: str = ""
    common: dict[str, Any] = field(default_factory=dict)
    operations: list[Any] = field(default_factory=list)
    training: str = ""
    model_name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in BENCHMARK_KINDS:
            raise ValueError(f"benchmark.kind={self.kind!r}: use one of {', '.join(BENCHMARK_KINDS)}")
        if self.kind == "operator":
            if not self.op_type:
                raise ValueError(f"benchmark {self.name!r}: an operator benchmark needs benchmark.op_type")
            if not self.operations:
                raise ValueError(f"benchmark {self.name!r}: benchmark.operations is empty")
            for i, op in enumerate(self.operations):
                if not isinstance(op, dict):
                    raise ValueError(f"benchmark {self.name!r}: operations[{i}] must be a map of descriptor: value")
        if self.kind == "training" and not self.training:
            raise ValueError(f"benchmark {self.name!r}: a training benchmark needs benchmark.training")


@dataclass
class RegistryEntry:
    """One operator benchmark implementation, one YAML file under ``registry/`` on the config path.

    ``exe`` is a path or an argument list (never a shell string); relative paths resolve against the
    project root, and a first element ``python`` means the interpreter running dlbench. ``param_descr``
    is the parameter order the executable expects (a list, or the original comma-separated string).
    ``permutation`` holds strategies like ``ab,bc -> abc00`` that map input shapes to parameters.
    """

    name: str = MISSING
    synonyms: list[str] = field(default_factory=list)
    exe: Any = MISSING
    param_descr: Any = MISSING
    permutation: list[str] = field(default_factory=list)
    backend: str = "custom"
    device: Any = "cpu"
    description: str = ""
    #: the passes one reported time covers, e.g. [forward, backward_data, backward_weights] for a program
    #: that times a whole training step of a layer; empty: the operation's own pass. FLOPs follow.
    passes: list[str] = field(default_factory=list)
    #: the executable also reads ``<input stem>_nodes.json``: each operation's ONNX node (operators.protocol)
    node_file: bool = False
    #: what the executable takes per row, as numbers after the row's parameters: ``dtype``, ``memory_format``
    #: (docs/protocol.md); else rows of one dtype and memory format go together, told by DLBENCH_* variables
    row_settings: list[str] = field(default_factory=list)
    #: the dtypes it runs (empty: any; a row in another is ``unsupported``, "unable: bfloat16")
    dtypes: list[str] = field(default_factory=list)
    #: the memory formats it runs (a row in another is ``unsupported``, "unable: channels_last")
    memory_formats: list[str] = field(default_factory=lambda: ["contiguous"])


@dataclass
class TrainingEntry:
    """A training benchmark script: the original fields ``name``, ``exe``, ``parameters``."""

    name: str = MISSING
    exe: Any = MISSING
    parameters: str = ""
    model: str = ""
    description: str = ""

"""The tensors a training step actually had: per aten operator and input shapes in one batch (the last warm-up
batch, which no measured figure counts), its arguments with each tensor's dtype, shape, strides, memory format
and value statistics (fractions subnormal, NaN/Inf and zero), and what competed for the cores (the step's
threads, the physical cores and logical CPUs it had, the script's child processes' CPU use, whether subnormals
were flushed to zero). Written to ``tensor_stats.jsonl`` and read by the evaluation's
outlier causes (:mod:`dlbench.analysis.causes`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dlbench.core.cores import allowed_cpus, physical_cores

ENV_STATS = "DLBENCH_TENSOR_STATS"
STATS_FILE = "tensor_stats.jsonl"
#: a tensor's value statistics are taken over at most this many of its elements (evenly strided)
SAMPLE_ELEMENTS = 1 << 18
#: the child processes' runnable threads are sampled every this many aten calls
SAMPLE_EVERY = 32


def tensor_record(tensor: Any) -> dict[str, Any]:
    """dtype, shape, strides, layout and (floating or integer) value statistics of one tensor."""
    import torch

    record: dict[str, Any] = {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "strides": list(tensor.stride()),
        "contiguous": bool(tensor.is_contiguous()),
        "channels_last": tensor.dim() == 4
        and not tensor.is_contiguous()
        and bool(tensor.is_contiguous(memory_format=torch.channels_last)),
        "numel": int(tensor.numel()),
        "device": tensor.device.type,
    }
    if tensor.numel() == 0 or tensor.is_sparse or tensor.device.type == "meta":
        return record
    flat = tensor.detach().reshape(-1)
    if flat.numel() > SAMPLE_ELEMENTS:
        flat = flat[:: flat.numel() // SAMPLE_ELEMENTS]
    if tensor.is_floating_point():
        magnitude = flat.abs()
        tiny = torch.finfo(tensor.dtype).tiny
        record["subnormal"] = float(((magnitude < tiny) & (magnitude > 0)).float().mean())
        record["nonfinite"] = float((~torch.isfinite(flat)).float().mean())
        record["zero"] = float((flat == 0).float().mean())
        finite = magnitude[torch.isfinite(magnitude)]
        record["abs_max"] = float(finite.max()) if finite.numel() else 0.0
    elif tensor.dtype != torch.bool and not tensor.is_complex():
        record["min"], record["max"] = int(flat.min()), int(flat.max())
    return record


def encode(value: Any) -> Any:
    """An argument as JSON: a tensor as ``{"tensor": record}``, lists recursively, a dtype or memory format by
    name; anything else that JSON cannot hold as ``{"repr": ...}`` (a call holding one is not re-timed)."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"tensor": tensor_record(value)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value if not isinstance(value, float) or value == value else {"float": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    return {"repr": repr(value)}


def shapes_key(args: Any) -> list[list[int]]:
    """The shapes of the tensors among ``args`` (top level, and inside lists), as the profiler's rows list them."""
    import torch

    out: list[list[int]] = []
    for value in args:
        if isinstance(value, torch.Tensor):
            out.append(list(value.shape))
        elif isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value):
            out.extend(list(v.shape) for v in value if isinstance(v, torch.Tensor))
    return out


class _Children:
    """What the process's descendants did during the batch (an OpenMP-heavy data-loader worker competes for the
    step's cores): their CPU seconds, and their runnable threads sampled while the batch ran (on a busy machine
    a starved worker uses little CPU yet still wants its cores)."""

    def __init__(self) -> None:
        self.start = self._cpu_s()
        self.wall = time.perf_counter()
        self.samples: list[int] = []
        self.sample()

    @staticmethod
    def _descendants() -> list[Any]:
        import psutil

        return psutil.Process().children(recursive=True)

    def _cpu_s(self) -> dict[int, float]:
        import psutil

        out: dict[int, float] = {}
        for child in self._descendants():
            try:
                times = child.cpu_times()
                out[child.pid] = times.user + times.system
            except psutil.Error:
                continue
        return out

    def sample(self) -> None:
        """Count the descendants' threads that are running or ready to run (Linux; none elsewhere)."""
        runnable = 0
        for child in self._descendants():
            for stat in Path(f"/proc/{child.pid}/task").glob("*/stat"):
                try:
                    state = stat.read_text(encoding="ascii").rpartition(")")[2].split()[0]
                except (OSError, IndexError):
                    continue
                runnable += state == "R"
        self.samples.append(runnable)

    def busy_cores(self) -> float:
        """Cores the descendants kept busy during the batch, on average."""
        wall = time.perf_counter() - self.wall
        end = self._cpu_s()
        used = sum(cpu - self.start.get(pid, 0.0) for pid, cpu in end.items())
        return used / wall if wall > 0 else 0.0

    def runnable_threads(self) -> float:
        self.sample()
        return sum(self.samples) / len(self.samples)


def _mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class StatsMode(TorchDispatchMode):
        """Records each (operator, shapes) once, with its arguments' statistics, then runs it unchanged."""

        def __init__(self, children: _Children) -> None:
            super().__init__()
            self.calls: dict[str, dict[str, Any]] = {}
            self.children = children
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            self.count += 1
            if self.count % SAMPLE_EVERY == 0:
                self.children.sample()
            name = func._schema.name
            key = f"{name} {json.dumps(shapes_key(args))}"
            seen = self.calls.get(key)
            if seen is None:
                self.calls[key] = {
                    "name": name,
                    "overload": func._overloadname,
                    "shapes": shapes_key(args),
                    "args": encode(list(args)),
                    "kwargs": {k: encode(v) for k, v in kwargs.items()},
                    "calls": 1,
                }
            else:
                seen["calls"] += 1
            return func(*args, **kwargs)

    return StatsMode


class TensorStats:
    """Context manager around one batch: every aten call recorded (:data:`STATS_FILE` in ``out_dir``)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._mode: Any = None
        self._children: _Children | None = None
        #: the batch's wall time, set by the context manager before it exits
        self.wall_s = float("nan")

    def __enter__(self) -> TensorStats:
        self._children = _Children()
        self._mode = _mode_class()(self._children)
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        self._mode.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self.write()
        return False

    def write(self) -> Path:
        import torch

        assert self._children is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / STATS_FILE
        machine = {
            "machine": {
                "torch_threads": torch.get_num_threads(),
                "physical_cores": physical_cores(),  # hyper-threads of one core share its execution units
                "logical_cpus": len(allowed_cpus()),
                "children_busy_cores": round(self._children.busy_cores(), 3),
                "children_runnable_threads": round(self._children.runnable_threads(), 3),
                "flush_denormal": _flush_denormal_on(),
                "batch_wall_s": self.wall_s,
            }
        }
        with path.open("w", encoding="utf-8") as out:
            out.write(json.dumps(machine) + "\n")
            for call in self._mode.calls.values():
                out.write(json.dumps(call) + "\n")
        return path


def _flush_denormal_on() -> bool:
    """Whether the step ran with subnormals flushed to zero (``torch.set_flush_denormal(True)``)."""
    import torch

    tiny = torch.tensor([torch.finfo(torch.float32).tiny], dtype=torch.float32)
    return bool((tiny / 4).item() == 0.0)


def read_stats(profile_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(what competed for the cores, the recorded calls) of ``tensor_stats.jsonl``; empty when not recorded."""
    path = profile_dir / STATS_FILE
    if not path.exists():
        return {}, []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    machine = lines[0].get("machine", {}) if lines else {}
    return machine, [line for line in lines[1:] if "name" in line]

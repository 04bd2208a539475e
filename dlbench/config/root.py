"""The top-level node (task, hyperparameters) and its registration with Hydra's ConfigStore."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.config.compare import CompareConfig
from dlbench.config.evaluate import EvaluateConfig, MatchConfig, ProfileConfig
from dlbench.config.measure import MeasureConfig
from dlbench.config.roofline import RooflineConfig
from dlbench.config.tracking import GcConfig, MlflowConfig
from dlbench.config.workload import BenchmarkConfig
from dlbench.core.autocast import AMP_MODES
from dlbench.core.dtypes import DTYPES
from dlbench.core.resolvers import register_resolvers
from dlbench.core.settings import FP32_MATHS, default

TASKS = ("run", "list", "extract", "benchmark_model", "evaluate", "compare", "gc")
DEVICES = ("cpu", "cuda", "auto")


def _open_dict() -> Any:
    """An empty map that accepts new keys on the command line (``dims.seq=128``, no ``+`` needed): Hydra
    locks every other node against unknown keys, so that typos fail."""
    from omegaconf import OmegaConf

    return OmegaConf.create({}, flags={"struct": False})


@dataclass
class DlbenchConfig:
    """The top-level node: task, hyperparameters, measurement and tracking settings."""

    task: str = "run"
    batch_size: int = 8
    dtype: str = "float32"
    #: float32 math on NVIDIA GPUs: ieee, tf32, or framework (PyTorch's default: cuDNN convolutions may use
    #: TF32, matmuls not); applied to the torch backend, the native CUDA kernels and the roofline's ceiling
    fp32_math: str = str(default("fp32_math"))
    #: mixed precision: none, bf16 or fp16. autocast's lower-precision ops (conv, gemm, matmul, ...) run in that
    #: dtype, the rest in ``dtype`` (which stays float32); core/autocast.py has the lists
    amp: str = "none"
    #: 4-D tensors of convolutions, batch norm, pooling and the elementwise ops between them in NHWC strides
    channels_last: bool = False
    threads: int = 0
    device: str = "cpu"
    backend: str = "torch"
    timeout: float = 600.0
    steps: int = 30
    lr: float = 0.05
    #: ranks of the collective benchmarks and the data-parallel training benchmark, started on this machine
    #: (or as a Slurm job's tasks); 1: a single process, as every other benchmark measures
    world_size: int = 1
    #: task=extract / benchmark_model: an ONNX file, or a list of them (``model=[a.onnx,b.onnx]``)
    model: Any = ""
    #: symbolic input dimensions besides the batch, e.g. ``dims.seq=128`` (the batch is ``batch_size``)
    dims: dict[str, int] = field(default_factory=lambda: _open_dict())
    #: task=benchmark_model: take results of operations already measured on this system with the same
    #: implementation, dtype, threads, measurement settings and dlbench version from the reuse store
    reuse: bool = True
    #: the reuse store (SQLite); empty: ``dlbench_reuse.db`` beside a SQLite MLflow store, else in the
    #: directory dlbench was started from
    reuse_store: str = ""
    output_dir: str = ""
    quiet: bool = False
    #: failures print the stack trace too, not only the message
    verbose: bool = False
    #: measure only the operations a previous, interrupted or failed run of the same sweep did not finish
    resume: bool = False
    #: in parallel sweeps, pin each job to its own ``threads`` cores so jobs do not disturb each other
    exclusive_cores: bool = False
    #: benchmark executables and training scripts keep freed memory in the heap (glibc tunables, see
    #: dlbench.core.allocator) instead of paying page faults for each call's fresh output
    keep_heap: bool = True
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    benchmark: BenchmarkConfig | None = None
    #: task=benchmark_model: the training-unfolding strategy table, config group ``unfold``
    #: (``none``: forward operations only; ``default``: conf/unfold/default.yaml)
    unfold: Any = None
    match: MatchConfig = field(default_factory=MatchConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    roofline: RooflineConfig = field(default_factory=RooflineConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    gc: GcConfig = field(default_factory=GcConfig)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}: use one of {', '.join(TASKS)}")
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r}: use one of {', '.join(DEVICES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp={self.amp!r}: use one of {', '.join(AMP_MODES)}")
        if self.amp != "none" and self.dtype != "float32":
            raise ValueError(
                f"amp={self.amp} with dtype={self.dtype}: amp lowers autocast's ops of a float32 sweep or step and "
                f"keeps the rest in float32; use amp={self.amp} with dtype=float32 (the default), or "
                f"dtype={self.dtype} with amp=none to run everything in it"
            )
        if self.fp32_math not in FP32_MATHS:
            raise ValueError(
                f"fp32_math={self.fp32_math!r}: use ieee, tf32 or framework (PyTorch's default: cuDNN "
                "convolutions may use TF32, matmuls not)"
            )
        if self.fp32_math == "tf32" and self.device == "cpu":
            raise ValueError(
                "fp32_math=tf32 with device=cpu: TF32 is a tensor-core mode of NVIDIA GPUs, float32 on the CPU is "
                "IEEE; use device=cuda, or fp32_math=ieee"
            )
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: all physical cores), got {self.threads}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1 (ranks of a process group), got {self.world_size}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        models = self.model if isinstance(self.model, list | tuple) else [self.model]
        if not all(isinstance(m, str) for m in models):
            raise ValueError(f"model={self.model!r}: give a path, or a list of paths: model=[a.onnx,b.onnx]")
        for name, size in self.dims.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"dims.{name}={size!r}: a dimension is a whole number >= 1, e.g. dims.{name}=128")
        if self.task == "run" and self.benchmark is None:
            raise ValueError("nothing to run: choose a benchmark, e.g. `python -m dlbench +benchmark=conv`")


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (called by the entry point before composing)."""
    from hydra.core.config_store import ConfigStore

    register_resolvers()
    store = ConfigStore.instance()
    store.store(name="dlbench_schema", node=DlbenchConfig)

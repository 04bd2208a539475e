"""Structured configuration: dataclasses registered in Hydra's ConfigStore, validated when converted.

Only light imports here (dataclasses, omegaconf, hydra's ConfigStore), so ``--help`` and config errors
are instant. A misspelt key fails at compose time because every node is a structured config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from dlbench.core.change_rules import CONFIDENCE, NOISE_THRESHOLD, RESAMPLES, compare_problem
from dlbench.core.dtypes import DTYPES
from dlbench.core.outliers import OutliersConfig
from dlbench.core.resolvers import register_resolvers
from dlbench.core.settings import CACHE_STATES, FP32_MATHS, default

TASKS = ("run", "list", "extract", "benchmark_model", "evaluate", "compare", "gc")
DEVICES = ("cpu", "cuda", "auto")
BENCHMARK_KINDS = ("operator", "training", "roofline")


def check_cache_state(key: str, value: str) -> None:
    if value not in CACHE_STATES:
        raise ValueError(f"{key} must be one of {', '.join(CACHE_STATES)}, got {value!r}")


@dataclass
class MeasureConfig:
    """How each operation is timed: warm-up, then repeat until both minima are met (capped). Defaults and
    meanings: :data:`dlbench.core.settings.MEASURE_SETTINGS`, the table executables are handed."""

    warmup: int = int(default("warmup"))
    min_reps: int = int(default("min_reps"))
    max_reps: int = int(default("max_reps"))
    min_time_s: float = float(default("min_time_s"))
    target_rel_ci: float = float(default("target_rel_ci"))
    max_time_s: float = float(default("max_time_s"))
    op_budget_s: float = float(default("op_budget_s"))
    memory_fraction: float = float(default("memory_fraction"))
    caches: str = str(default("caches"))
    rounds: int = int(default("rounds"))
    contended_below: float = float(default("contended_below"))

    def __post_init__(self) -> None:
        check_cache_state("measure.caches", self.caches)
        if self.rounds < 1:
            raise ValueError(f"measure.rounds must be >= 1 (1: each operation in one block), got {self.rounds}")
        if not 0 <= self.contended_below <= 1:
            raise ValueError(f"measure.contended_below must be in [0, 1] (0: never), got {self.contended_below}")
        if self.warmup < 0:
            raise ValueError(f"measure.warmup must be >= 0, got {self.warmup}")
        if self.min_reps < 1:
            raise ValueError(f"measure.min_reps must be >= 1, got {self.min_reps}")
        if self.max_reps < self.min_reps:
            raise ValueError(f"measure.max_reps ({self.max_reps}) is below measure.min_reps ({self.min_reps})")
        if self.min_time_s < 0:
            raise ValueError(f"measure.min_time_s must be >= 0, got {self.min_time_s}")
        if not 0 < self.target_rel_ci <= 1:
            raise ValueError(
                f"measure.target_rel_ci must be in (0, 1] (0.02: the median known to +-2%), got {self.target_rel_ci}"
            )
        if self.max_time_s < 0:
            raise ValueError(f"measure.max_time_s must be >= 0 seconds, got {self.max_time_s}")
        if self.op_budget_s < 0:
            raise ValueError(f"measure.op_budget_s must be >= 0 (0: no limit), got {self.op_budget_s}")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"measure.memory_fraction must be in (0, 1], got {self.memory_fraction}")


@dataclass
class MlflowConfig:
    """Where runs go. Empty values fall back to MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME, then to
    ``sqlite:///mlflow.db`` in the directory dlbench was started from and the experiment ``dlbench``."""

    tracking_uri: str = ""
    experiment: str = ""
    run_name: str = ""
    connect_timeout_s: float = 10.0
    #: per-operation metrics (op/<name>/...) for at most this many operations, the costliest; all are in
    #: results.csv
    max_operation_metrics: int = 200
    #: seconds between MLflow system-metrics samples (CPU, memory, GPU) while a run measures; 0: off
    system_metrics_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if self.max_operation_metrics < 0:
            raise ValueError(f"mlflow.max_operation_metrics must be >= 0 (0: none), got {self.max_operation_metrics}")
        if self.system_metrics_interval_s < 0:
            raise ValueError(
                f"mlflow.system_metrics_interval_s must be >= 0 (0: off), got {self.system_metrics_interval_s}"
            )


@dataclass
class ProfileConfig:
    """Which training batches the instrumentation profiles: skip ``warmup``, then profile ``batches``."""

    warmup: int = 5
    batches: int = 3


@dataclass
class EvaluateConfig:
    """task=evaluate: how the measured step time is taken."""

    #: train again after the benchmarks (unprofiled, no export) and take the measured step time over both
    #: trainings' steady steps, so a machine that slows down or speeds up during the evaluation moves the
    #: measurement as much as the benchmarks (the two trainings' medians are logged apart)
    bracket: bool = True
    #: the operator benchmarks' cache state (``measure.caches`` for this task): ``step`` by default, each
    #: operation's benchmark rotating over copies filling its own reuse distance in the step (the bytes the
    #: step touches between uses of its inputs, :mod:`dlbench.onnx.footprint`), capped at twice the last-level
    #: cache; ``hot`` and ``cold`` (twice the last-level cache for every operation) as explicit choices
    caches: str = "step"
    #: a data-parallel step: whether DDP's all-reduce hides behind the backward pass. ``auto``: not on CPUs whose
    #: cores the ranks' threads all take (gloo reduces on those cores), else yes; ``backward``: yes; ``none``: no
    communication_overlap: str = "auto"
    #: a data-parallel step: also train the script as one process (same batch per rank): the scaling efficiency
    single_process: bool = True
    mode: str = "training"  # or inference: the script's network served in eval mode (docs/inference-engines.md)
    compile: bool = False
    outliers: OutliersConfig = field(default_factory=OutliersConfig)

    def __post_init__(self) -> None:
        check_cache_state("evaluate.caches", self.caches)
        if self.mode not in ("training", "inference"):
            raise ValueError(f"evaluate.mode={self.mode!r}: use training or inference")
        if self.compile and self.mode != "inference":  # only a served network is compiled
            raise ValueError("evaluate.compile=true needs evaluate.mode=inference")
        if self.communication_overlap not in ("auto", "backward", "none"):
            raise ValueError(
                f"evaluate.communication_overlap={self.communication_overlap!r}: use auto, backward or none"
            )


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


@dataclass
class TrainingEntry:
    """A training benchmark script: the original fields ``name``, ``exe``, ``parameters``."""

    name: str = MISSING
    exe: Any = MISSING
    parameters: str = ""
    model: str = ""
    description: str = ""


@dataclass
class MatchConfig:
    """task=evaluate: which profiled PyTorch operator runs which ONNX operation (``conf/match/``); empty
    ``operators`` means the shipped ``conf/match/default.yaml``. See dlbench.match for the format."""

    operators: dict[str, Any] = field(default_factory=dict)
    framework: list[str] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)


@dataclass
class RooflineConfig:
    """+benchmark=roofline: problem sizes of the peak measurements (shrink them for a quick check)."""

    #: largest square GEMM size n (2 n^3 FLOPs per multiplication); each dtype's size comes from a probe
    gemm_size: int = 4096
    #: seconds one GEMM call should take: the probe sizes each dtype's GEMM to it (up to gemm_size)
    call_s: float = 0.25
    #: MiB per array of the copy and triad bandwidth kernels (well above the last-level cache)
    stream_mib: int = 256
    #: dtypes whose GEMM peak is measured; those the device cannot run are skipped and reported. float32 on a GPU
    #: with TF32 tensor cores is measured twice: IEEE (peak ``float32``) and TF32 (peak ``tf32``)
    dtypes: list[str] = field(default_factory=lambda: list(DTYPES))
    #: seconds each kernel is repeated for (after one warm-up call), at least ``min_reps`` times
    min_time_s: float = 1.0
    min_reps: int = 3
    #: seconds one kernel may take in all, warm-up included (at least one timed call is kept); 0: no limit
    kernel_budget_s: float = 5.0

    def __post_init__(self) -> None:
        if self.gemm_size < 1 or self.stream_mib < 1:
            raise ValueError("roofline.gemm_size and roofline.stream_mib must be >= 1")
        if self.min_reps < 1 or self.min_time_s < 0:
            raise ValueError("roofline.min_reps must be >= 1 and roofline.min_time_s >= 0")
        if self.call_s <= 0 or self.kernel_budget_s < 0:
            raise ValueError("roofline.call_s must be > 0 and roofline.kernel_budget_s >= 0 (0: no limit)")
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise ValueError(f"roofline.dtypes: {dtype!r}; use {', '.join(DTYPES)}")


@dataclass
class CompareConfig:
    """task=compare: which runs to put side by side (MLflow search API) and where the tables go."""

    #: experiment names; empty: the configured one (mlflow.experiment)
    experiments: list[str] = field(default_factory=list)
    #: an MLflow filter string, e.g. "tags.`system.id` LIKE '%Xeon%'"
    filter: str = ""
    #: only runs of these benchmarks (tag dlbench.benchmark); empty: all
    benchmarks: list[str] = field(default_factory=list)
    #: only runs of these kinds (tag dlbench.kind); empty: operator sweeps, evaluations and rooflines
    kinds: list[str] = field(default_factory=list)
    max_runs: int = 1000
    baseline: str = ""  # side A: a run id or name, a system (or part of it), or key:value; empty: no changes
    candidate: str = ""  # side B, as baseline; empty: every other run found
    threshold: float = NOISE_THRESHOLD  # a change within +-threshold is `same` (core/change_rules.py)
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES  # bootstrap resamples per interval; the same seed gives the same intervals
    seed: int = 0
    fail_on: str = ""  # exit 1 when an operation or total is slower, faster or changed (either); empty: never

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise ValueError(f"compare.max_runs must be >= 1, got {self.max_runs}")
        problem = compare_problem(self.threshold, self.confidence, self.resamples, self.fail_on, self.baseline)
        if problem:
            raise ValueError(problem)


def _open_dict() -> Any:
    """An empty map that accepts new keys on the command line (``dims.seq=128``, no ``+`` needed): Hydra
    locks every other node against unknown keys, so that typos fail."""
    from omegaconf import OmegaConf

    return OmegaConf.create({}, flags={"struct": False})


@dataclass
class GcConfig:
    """Runs left RUNNING by a job that died without ending them (SIGKILL, the OOM killer, a lost node): every
    run stamps a heartbeat every ``heartbeat_s`` seconds while its job lives; ``task=gc`` and the start of a
    multirun mark runs whose heartbeat stopped more than ``stale_after_s`` seconds ago as FAILED."""

    stale_after_s: float = 300.0
    heartbeat_s: float = 30.0

    def __post_init__(self) -> None:
        if self.heartbeat_s <= 0:
            raise ValueError(f"gc.heartbeat_s must be > 0 seconds, got {self.heartbeat_s}")
        if self.stale_after_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"gc.stale_after_s={self.stale_after_s:g} is below two heartbeats "
                f"(gc.heartbeat_s={self.heartbeat_s:g}): live runs would be marked lost; raise gc.stale_after_s "
                "or lower gc.heartbeat_s"
            )


@dataclass
class DlbenchConfig:
    """The top-level node: task, hyperparameters, measurement and tracking settings."""

    task: str = "run"
    batch_size: int = 8
    dtype: str = "float32"
    #: float32 math on NVIDIA GPUs: ieee, tf32, or framework (PyTorch's default: cuDNN convolutions may use
    #: TF32, matmuls not); applied to the torch backend, the native CUDA kernels and the roofline's ceiling
    fp32_math: str = str(default("fp32_math"))
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

"""One module per task; each exposes ``run(cfg: DlbenchConfig, ctx: AppContext) -> int``. ``run_task`` dispatches a
composed configuration to its task module; the entry passes everything in as plain values."""

from __future__ import annotations

import importlib

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext

#: task -> module with ``run(cfg, ctx) -> int``; ``task=run`` goes by the benchmark's kind instead.
TASK_MODULES = {
    "list": "dlbench.tasks.list",
    "extract": "dlbench.tasks.extract",
    "benchmark_model": "dlbench.tasks.benchmark_model",
    "evaluate": "dlbench.tasks.evaluate",
    "compare": "dlbench.tasks.compare",
    "gc": "dlbench.tasks.gc",
}
#: ``task=run``: benchmark kind -> module
RUN_MODULES = {
    "operator": "dlbench.tasks.sweep",
    "training": "dlbench.tasks.train",
    "roofline": "dlbench.tasks.roofline",
}


#: ``task=evaluate`` of a model file (``model=X.onnx``, no training benchmark), or of a training benchmark with
#: ``evaluate.mode=inference``: its inference latency
INFERENCE_MODULE = "dlbench.tasks.inference"


def task_module(cfg: DlbenchConfig) -> str:
    """The module that runs ``cfg``: by task, for ``task=run`` by the chosen benchmark's kind, and for
    ``task=evaluate`` of a model file (no benchmark) the inference evaluation."""
    if cfg.task == "evaluate" and (cfg.benchmark is None and cfg.model or cfg.evaluate.mode == "inference"):
        return INFERENCE_MODULE
    if cfg.task == "run":
        assert cfg.benchmark is not None  # the config refuses task=run without a benchmark
        return RUN_MODULES[cfg.benchmark.kind]
    return TASK_MODULES[cfg.task]


def run_task(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """Run the task ``cfg`` asks for; returns the process exit status (0 when everything succeeded)."""
    return int(importlib.import_module(task_module(cfg)).run(cfg, ctx))

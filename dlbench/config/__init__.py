"""Structured configuration: dataclasses registered in Hydra's ConfigStore, validated when converted.

One module per group of keys (``measure``, ``tracking``, ``workload``, ``evaluate``, ``roofline``, ``compare``;
the top-level node in ``root``); this package re-exports them all. Only light imports here (dataclasses,
omegaconf, hydra's ConfigStore), so ``--help`` and config errors are instant. A misspelt key fails at compose
time because every node is a structured config.
"""

from dlbench.config.compare import CompareConfig
from dlbench.config.evaluate import EvaluateConfig, MatchConfig, ProfileConfig
from dlbench.config.measure import MeasureConfig, check_cache_state
from dlbench.config.roofline import RooflineConfig
from dlbench.config.root import DEVICES, TASKS, DlbenchConfig, register_configs
from dlbench.config.tracking import GcConfig, MlflowConfig
from dlbench.config.workload import BENCHMARK_KINDS, BenchmarkConfig, RegistryEntry, TrainingEntry

__all__ = [
    "BENCHMARK_KINDS",
    "DEVICES",
    "TASKS",
    "BenchmarkConfig",
    "CompareConfig",
    "DlbenchConfig",
    "EvaluateConfig",
    "GcConfig",
    "MatchConfig",
    "MeasureConfig",
    "MlflowConfig",
    "ProfileConfig",
    "RegistryEntry",
    "RooflineConfig",
    "TrainingEntry",
    "check_cache_state",
    "register_configs",
]

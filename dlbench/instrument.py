"""The import line of an instrumented training script: ``from dlbench.instrument import op_performance_analysis``.

A stable public name for what :mod:`dlbench.training.instrument` implements, so scripts never depend on
where the code lives inside dlbench.
"""

from dlbench.training.instrument import (
    ProfileSession,
    ProfileSettings,
    default_session,
    finish,
    op_performance_analysis,
    op_performance_analysis_cpu,
    reset,
)

__all__ = [
    "ProfileSession",
    "ProfileSettings",
    "default_session",
    "finish",
    "op_performance_analysis",
    "op_performance_analysis_cpu",
    "reset",
]

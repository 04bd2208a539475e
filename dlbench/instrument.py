"""The import line of an instrumented training script: ``from dlbench.instrument import op_performance_analysis``
(or any of the original tool's call forms). A stable public name for what :mod:`dlbench.training.api`
implements, so scripts never depend on where the code lives inside dlbench.
"""

from dlbench.training.api import (
    default_session,
    finish,
    op_performance_analysis,
    op_performance_analysis_cpu,
    op_performance_analysis_generic,
    op_performance_analysis_gpu,
    report_parameters,
    reset,
)
from dlbench.training.instrument import ProfileSession, ProfileSettings

__all__ = [
    "ProfileSession",
    "ProfileSettings",
    "default_session",
    "finish",
    "op_performance_analysis",
    "op_performance_analysis_cpu",
    "op_performance_analysis_generic",
    "op_performance_analysis_gpu",
    "report_parameters",
    "reset",
]

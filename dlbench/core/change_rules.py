"""What a comparison's verdicts mean and the defaults they are judged by (one owner: the config checks
``compare.*`` against these, :mod:`dlbench.analysis.comparison.change` judges with them)."""

from __future__ import annotations

#: a change within +-2% is ``same``; beyond it with its whole interval, ``slower`` or ``faster``
NOISE_THRESHOLD = 0.02
CONFIDENCE = 0.95
RESAMPLES = 2000
VERDICTS = ("faster", "slower", "same", "unsure")
#: what ``compare.fail_on`` may name: a verdict that fails the gate, ``changed`` for either; "" never fails
FAIL_ON = ("", "slower", "faster", "changed")


def compare_problem(threshold: float, confidence: float, resamples: int, fail_on: str, baseline: str) -> str:
    """Why ``compare.*`` cannot be used, naming the key and what to give; empty when it can."""
    if not 0.0 <= threshold < 1.0:
        return f"compare.threshold must be a fraction in [0, 1) (0.02: 2%), got {threshold}"
    if not 0.5 <= confidence < 1.0:
        return f"compare.confidence must be in [0.5, 1) (0.95: 95%), got {confidence}"
    if resamples < 100:
        return f"compare.resamples must be >= 100, got {resamples}"
    if fail_on not in FAIL_ON:
        return f"compare.fail_on={fail_on!r}: use slower, faster or changed (either), or leave it empty"
    if fail_on and not baseline:
        return "compare.fail_on needs compare.baseline: a run id, a system, or key:value (e.g. dtype:float32)"
    return ""


def fails(verdict: str, fail_on: str) -> bool:
    """Whether ``verdict`` fails a gate set to ``fail_on``."""
    return bool(fail_on) and (verdict == fail_on or (fail_on == "changed" and verdict in ("slower", "faster")))

"""What a comparison's verdicts mean and the defaults they are judged by (one owner: the config checks
``compare.*`` against these, :mod:`dlbench.analysis.comparison.change` judges with them)."""

from __future__ import annotations

#: a change within +-5% is ``same``; beyond it with its whole interval, ``slower`` or ``faster``. 5%, not 2%:
#: two sweeps of the same executable on a shared 2-core VM ran every operation 1.28-1.55x apart, and even
#: interleaved A/A rounds there scatter by a few percent per round; asv's default factor is 10%
NOISE_THRESHOLD = 0.05
CONFIDENCE = 0.95
RESAMPLES = 2000
#: ``moved``: a stored comparison whose sides ran on a machine that moved more than the threshold between them
#: (the reference probes, memory and compute, agree): not judged
VERDICTS = ("faster", "slower", "same", "unsure", "moved")
#: ``compare.rounds``: rounds of A and B back to back. The paired interval is the wider of the bootstrap and
#: Student's t over the rounds' log ratios; a slower operation must also pass Holm's correction over the
#: operations (23 for ResNet-50's convolutions: the smallest p-value is held to 0.05 / 23). Student's t at
#: that level is 11 with 3 rounds, 4.6 with 10 and 3.8 with 20, so at 20 rounds a 10% slowdown is told from a
#: 5% threshold when the rounds' ratios scatter by up to ~5.5% (10 rounds: ~3%), and an unchanged operation
#: is ``same`` when they scatter by up to ~10%. Each round costs every operation its warm-up calls on both
#: sides, so more rounds cost more time than precision they add beyond that.
INTERLEAVED_ROUNDS = 20
#: what ``compare.fail_on`` may name: a verdict that fails the gate, ``changed`` for either; "" never fails
FAIL_ON = ("", "slower", "faster", "changed")


def compare_problem(threshold: float, confidence: float, resamples: int, fail_on: str, baseline: str) -> str:
    """Why ``compare.*`` cannot be used, naming the key and what to give; empty when it can."""
    if not 0.0 <= threshold < 1.0:
        return f"compare.threshold must be a fraction in [0, 1) (0.05: 5%), got {threshold}"
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

"""One thread count for both sides of an evaluation: the operator benchmarks run with the threads the training
script ran with (as the context manager saw them), and where that count is unknown or changed during the run,
the evaluation says so in its output, tags, params, metrics and notes.

dlbench starts a script with ``OMP_NUM_THREADS`` set to the count its benchmarks would use (see
:func:`dlbench.core.cores.thread_environment`), so a script that leaves threads to torch agrees by
construction; one that calls ``torch.set_num_threads`` itself is followed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from dlbench.core.cores import resolve_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThreadAgreement:
    """The threads dlbench was asked for, the script's (None: never seen) and those the benchmarks run with."""

    requested: int
    resolved: int
    script: int | None
    script_at_end: int | None = None

    @classmethod
    def of(cls, requested: int, facts: dict[str, Any]) -> ThreadAgreement:
        observed = facts.get("observed", {})
        script = _count(observed.get("threads"))
        return cls(requested, resolve_threads(requested), script, _count(observed.get("threads_at_end")))

    @property
    def benchmark(self) -> int:
        """The script's count (its last one: the measured steps come after the warm-up), else dlbench's."""
        if self.script_at_end is not None:
            return self.script_at_end
        return self.script if self.script is not None else self.resolved

    @property
    def state(self) -> str:
        """``agree``, ``followed_script`` (the script set its own count), ``changed`` or ``unknown``."""
        if self.script is None:
            return "unknown"
        if self.script_at_end is not None:
            return "changed"
        return "agree" if self.script == self.resolved else "followed_script"

    def problem(self) -> str:
        """What the user must know (empty when both sides ran with dlbench's count)."""
        asked = f"threads={self.requested}" + (f" ({self.resolved} physical cores)" if self.requested == 0 else "")
        if self.state == "unknown":
            return (
                f"the training script's thread count is unknown (it never handed a batch to the context manager "
                f"with torch loaded): the operator benchmarks ran with {self.resolved} threads of {asked}, which "
                "the script may not have used"
            )
        if self.state == "changed":
            return (
                f"the training script changed its thread count from {self.script} to {self.script_at_end} during "
                f"the run: the operator benchmarks ran with {self.script_at_end}, the steps before the change "
                "ran with another count"
            )
        if self.state == "followed_script":
            return (
                f"the training script ran with {self.script} threads, not the {self.resolved} of {asked} (it sets "
                f"its own count): the operator benchmarks ran with {self.script} to match it; pass ${{threads}} to "
                "the script to follow threads="
            )
        return ""

    def params(self) -> dict[str, object]:
        """Besides ``threads_requested`` (logged when the run opens) and the script's ``threads``."""
        return {"benchmark_threads": self.benchmark}

    def metrics(self) -> dict[str, float]:
        values = {"threads.benchmark": self.benchmark, "threads.requested_resolved": self.resolved}
        if self.script is not None:
            values["threads.script"] = self.script_at_end if self.script_at_end is not None else self.script
        return {k: float(v) for k, v in values.items()}

    def tags(self) -> dict[str, str]:
        return {"dlbench.threads": self.state, "dlbench.threads_differ": str(self.state != "agree").lower()}

    def announce(self, run: Any) -> list[str]:
        """Log the params and tags on ``run``, warn (stderr) when the counts are not dlbench's own; the notes
        for the evaluation report."""
        run.log_params(self.params())
        run.set_tags(self.tags())
        problem = self.problem()
        if not problem:
            return []
        log.warning("THREADS: %s", problem)
        return [f"threads: {problem}"]


def _count(value: Any) -> int | None:
    try:
        count = int(value)
    except (TypeError, ValueError):
        return None
    return count if count > 0 else None

"""The host's side of GPU benchmarks: each operation's median time of issuing one call (the protocol's launch
column, written by benchmarks timed with CUDA events, kept by the combined files of a sweep in rounds), read
from an evaluation's protocol files for the host lane of :mod:`dlbench.analysis.timeline`."""

from __future__ import annotations

from pathlib import Path

from dlbench.operators.protocol import ProtocolError, parse_output

#: The output files of an evaluation's operator benchmarks (``<entry>_evaluate_out.csv``), and of its
#: framework microbenchmark
EVALUATION_OUTPUTS = "*_evaluate_out.csv"
FRAMEWORK_OUT = "framework_out.csv"


def read_launch_ms(protocol_dir: str | Path, pattern: str = EVALUATION_OUTPUTS) -> dict[int, float]:
    """Host ms of issuing one call by operation id, from the output files matching ``pattern`` in
    ``protocol_dir``; ids without a launch cell, and unreadable files, are left out (their operations get
    the timeline's default host time)."""
    out: dict[int, float] = {}
    for path in sorted(Path(protocol_dir).glob(pattern)):
        try:
            out.update(parse_output(path).launch_ms)
        except ProtocolError:
            continue
    return out

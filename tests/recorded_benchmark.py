"""The one seam of the offline GPU pipeline test: stands in for a CUDA benchmark executable (the embedded torch
kernels on ``device=cuda``, ``python -m dlbench.backends.torch <OpType>``) and answers its protocol from a
recorded run on an H200 instead of a GPU. Everything around it is the real code: the runner's interleaved
rounds, the combined protocol files, their parsing, the launch column's reading, the timeline.

    python tests/recorded_benchmark.py RECORDING_DIR STEM INPUT.csv

Each input row must be a row the recording measured (same id, same leading parameters: ``<STEM>.csv`` there).
It is answered with the next ``DLBENCH_MIN_REPS`` of that row's recorded samples (each round, of a sweep
``_round<N>`` or of an evaluation ``_r<N>``, its own share)
and the launch column the recording lacks (it predates it), synthesised by :func:`launch_ms`: the host time of
issuing one call, distinct for every operation and moved by the round (:data:`ROUND_FACTORS`, whose median is
1), so a test knows which benchmark's launch time each figure came from."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlbench.core.values import TimeStats  # noqa: E402
from dlbench.operators.protocol import (  # noqa: E402
    SAMPLES_HEADER,
    output_header,
    output_path_for,
    output_row,
    read_input,
    samples_path_for,
    samples_rows,
)

#: a round's launch time over the operation's own: the median of rounds 1-3 (an evaluation's rounds) and of
#: rounds 1-4 (a sweep's interleaved rounds) is 1
ROUND_FACTORS = {1: 0.85, 2: 1.15, 3: 1.0, 4: 1.0}


def launch_ms(stem: str, op_id: int) -> float:
    """The synthesised host ms of issuing one call of recorded operation ``op_id`` (the framework benchmark:
    of its whole batch of one-element operators)."""
    return 0.6 + 0.1 * op_id if stem == "framework" else 0.004 + 0.0005 * op_id


def recorded_samples(recording: Path, stem: str) -> dict[int, list[float]]:
    samples: dict[int, list[float]] = {}
    for line in (recording / f"{stem}_samples.csv").read_text().splitlines()[1:]:
        op_id, ms = line.split(",")
        samples.setdefault(int(op_id), []).append(float(ms))
    return samples


def main(argv: list[str]) -> int:
    recording, stem, input_csv = Path(argv[0]), argv[1], Path(argv[2])
    measured = dict(read_input(recording / f"{stem}.csv"))
    samples = recorded_samples(recording, stem)
    found = re.search(r"_(?:round|r)(\d+)$", input_csv.stem)  # a sweep's round, or an evaluation's
    round_number = int(found.group(1)) if found else 1
    reps = max(int(os.environ.get("DLBENCH_MIN_REPS", "10")), 1)
    with (
        output_path_for(input_csv).open("w", encoding="utf-8") as out,
        samples_path_for(input_csv).open("w", encoding="utf-8") as kept,
    ):
        out.write(output_header(launch=True))
        kept.write(SAMPLES_HEADER)
        for op_id, values in read_input(input_csv):
            recorded = measured.get(op_id)
            if recorded is None or list(values[: len(recorded)]) != list(recorded):
                print(f"id {op_id}: {values} was not measured in the recording ({stem}.csv)", file=sys.stderr)
                continue
            own = samples[op_id]
            taken = [own[((round_number - 1) * reps + i) % len(own)] for i in range(reps)]
            issuing = launch_ms(stem, op_id) * ROUND_FACTORS.get(round_number, 1.0)
            out.write(output_row(op_id, TimeStats.from_samples(taken), launch_ms=issuing))
            kept.write(samples_rows(op_id, taken))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

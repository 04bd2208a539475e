"""An operator benchmark executable (the CSV protocol) for ``bench/compare_power.py``: the embedded torch
kernel's own command line (``python -m dlbench.backends.torch OP``) on the sweep's rows, with a known slowdown
on a known half (the even ids), in one of two ways:

- ``FACTOR`` (or the environment variable ``SCALED_FACTOR``, where set): the even ids' ``H`` made ``FACTOR``
  times larger. A convolution's work grows with H, but not its time in proportion: a larger H can change the
  kernel (two of ResNet-50's down-sampling convolutions ran 2.2-2.6x slower at H x 1.1) and the cache state the
  next operation of the round finds, so the odd ids move too.
- ``SCALED_TIME`` (environment): the even ids' times, as the kernel measured them, reported ``SCALED_TIME``
  times longer (every sample and every time statistic): exactly that slowdown per call, on the same work, with
  the machine's own noise; the odd ids run and are reported as they are.

Usage: ``python scaled.py FACTOR OP INPUT.csv``; writes ``INPUT_out.csv`` and ``INPUT_samples.csv``. The
environment variables make one registry entry slower by a side's environment
(``compare.b.env.SCALED_TIME=1.1``): the same executable on both sides of an interleaved run."""

import csv
import os
import subprocess
import sys
from pathlib import Path

from dlbench.operators.protocol import TIME_COLUMNS

#: the column of H in a Conv row (id, N, C, H, ...)
H_COLUMN = 3


def scale_times(path: Path, factor: float) -> None:
    """The even ids' times in a protocol output (``_out.csv`` or ``_samples.csv``) times ``factor``: the time
    column (the second, named after its unit) and the time statistics the protocol names (``TIME_COLUMNS``)."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0] if rows and not rows[0][0].strip().lstrip("-").isdigit() else None
    times = {1} | {i for i, name in enumerate(header or ()) if name.strip() in TIME_COLUMNS}
    out = [header] if header else []
    for row in rows[1:] if header else rows:
        if row and int(float(row[0])) % 2 == 0:
            row = [repr(float(cell) * factor) if i in times and cell else cell for i, cell in enumerate(row)]
        out.append(row)
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(out)


def main() -> int:
    factor = float(os.environ.get("SCALED_FACTOR") or sys.argv[1])
    time_factor = float(os.environ.get("SCALED_TIME") or 1.0)
    op_type, path = sys.argv[2], Path(sys.argv[-1])
    scaled = path.with_name(f"{path.stem}_scaled.csv")
    lines = []
    for line in path.read_text().split():
        cells = line.split(",")
        if int(cells[0]) % 2 == 0:
            cells[H_COLUMN] = str(round(float(cells[H_COLUMN]) * factor))
        lines.append(",".join(cells))
    scaled.write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "dlbench.backends.torch", op_type, str(scaled)]
    status = subprocess.run(command, check=False).returncode  # noqa: S603 - fixed argument list
    for suffix in ("_out.csv", "_samples.csv"):
        produced = scaled.with_name(f"{scaled.stem}{suffix}")
        if produced.exists():
            target = path.with_name(f"{path.stem}{suffix}")
            produced.replace(target)
            if time_factor != 1.0:
                scale_times(target, time_factor)
    return status


if __name__ == "__main__":
    sys.exit(main())

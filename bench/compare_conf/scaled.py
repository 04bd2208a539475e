"""An operator benchmark executable (the CSV protocol) for ``bench/compare_power.py``: the embedded torch
kernel's own command line (``python -m dlbench.backends.torch OP``) on the sweep's rows, with the even ids'
``H`` made ``FACTOR`` times larger (a convolution's work grows with H: a known slowdown on a known half).
Usage: ``python scaled.py FACTOR OP INPUT.csv``; writes ``INPUT_out.csv`` and ``INPUT_samples.csv``. The
environment variable ``SCALED_FACTOR``, where set, replaces FACTOR: one registry entry made slower by a side's
environment (``compare.b.env.SCALED_FACTOR=1.1``), the same executable on both sides of an interleaved run."""

import os
import subprocess
import sys
from pathlib import Path

#: the column of H in a Conv row (id, N, C, H, ...)
H_COLUMN = 3


def main() -> int:
    factor = float(os.environ.get("SCALED_FACTOR") or sys.argv[1])
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
            produced.replace(path.with_name(f"{path.stem}{suffix}"))
    return status


if __name__ == "__main__":
    sys.exit(main())

"""bench/warm_kernels.py runs end to end: the same sweep without and with a warm-start server, every operation
measured both ways. The ratio belongs to the script (run it on a quiet machine); here only a bound that no
load explains guards against the forked worker measuring something else entirely."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO, clean_env


@pytest.mark.slow
def test_the_warm_kernels_script_measures_every_operation_cold_and_warm(tmp_path: Path) -> None:
    out = tmp_path / "warm_kernels.csv"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "warm_kernels.py"), "--benchmark", "relu", "--rounds", "1",
         "--out", str(out)],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "warm/cold: geometric mean" in result.stdout and "after: load average" in result.stdout
    frame = pd.read_csv(out)
    medians = frame.pivot_table(index="id", columns="mode", values="ms")
    assert len(medians) == 6 and medians.notna().all().all()
    ratio = medians["warm"] / medians["cold"]
    assert ratio.between(0.2, 5).all(), ratio

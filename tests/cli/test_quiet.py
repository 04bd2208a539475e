"""A successful command is quiet: no MLflow migration chatter on a new store, no profiler noise in the terminal
(it stays in the run's stderr artifact), and one last line naming the run(s) - with, the first time a store
or experiment is used, how to open the MLflow UI on it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.tracking.naming import short_host

CHATTER = ("alembic", "mlflow.store", "Creating initial MLflow database tables", "Updating database tables")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_a_first_run_in_a_new_store_is_quiet_and_says_once_how_to_open_the_ui(tmp_path: Path) -> None:
    first = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    assert not any(word in first.stdout for word in CHATTER), first.stdout
    (run,) = mlflow_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    line = last_line(first.stdout)
    assert line.startswith(f"dlbench: run relu-torch_relu-bs1-fp32fw-{short_host()} ({run.info.run_id[:8]}) finished")
    assert f"experiment 'dlbench' in sqlite:///{tmp_path / 'mlflow.db'}" in line
    assert "`mlflow ui --backend-store-uri sqlite:///mlflow.db` (run here)" in line

    second = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert last_line(second.stdout).startswith(f"dlbench: run relu-torch_relu-bs1-fp32fw-{short_host()} (")
    assert "mlflow ui" not in second.stdout


def test_a_new_experiment_in_an_existing_store_names_the_store_for_the_ui(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    assert f"`mlflow ui --backend-store-uri {store.uri}`" in last_line(result.stdout)


PROFILED_THEN_FAILING = """\
import sys
import torch
from dlbench.instrument import op_performance_analysis
for batch_idx in range(4):
    with op_performance_analysis(batch_idx):
        torch.ones(64, 64) @ torch.ones(64, 64)
print("diverged: loss is nan at batch 3", file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.slow
def test_profiler_noise_stays_out_of_the_terminal_and_in_the_stderr_artifact(tmp_path: Path, store: Store) -> None:
    conf = tmp_path / "conf"
    for folder in ("training", "benchmark"):
        (conf / folder).mkdir(parents=True)
    (conf / "profiled.py").write_text(PROFILED_THEN_FAILING)
    (conf / "training" / "profiled.yaml").write_text(f"name: profiled\nexe: [python, {conf / 'profiled.py'}]\n")
    (conf / "benchmark" / "profiled.yaml").write_text("# @package benchmark\nname: profiled\nkind: training\n"
                                                      "training: profiled\n")  # fmt: skip
    overrides = ("+benchmark=profiled", "profile.warmup=0", "profile.batches=3", "steps=4", "quiet=true")
    result = run_dlbench(*overrides, "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert result.returncode == 1
    terminal = result.stdout + result.stderr
    assert "diverged: loss is nan at batch 3" in terminal and "Traceback" not in terminal
    (run,) = [r for r in mlflow_runs(store) if "mlflow.parentRunId" not in r.data.tags]
    stderr = artifact_text(store, run.info.run_id, "stderr.txt")
    assert "diverged" in stderr
    noise = [line for line in stderr.splitlines() if line.startswith("USDT:")]
    assert noise, "this torch build announces profiler start/stop on stderr (kineto USDT lines)"
    assert "USDT" not in terminal

"""Two commands started together keep their own folders: a run folder is its process's own (start time, pid and
a random part), and a task never deletes a folder it did not create (a second command given the same
``hydra.run.dir`` trains into ``<name>-2`` beside the first one's files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Store, clean_env, mlflow_runs
from test_train import script_conf

from dlbench.core.folders import fresh_folder

#: writes which command it belongs to into its profile folder, waits so the two commands overlap, then trains
WHO_SCRIPT = """\
import os, time
import torch
from dlbench.instrument import op_performance_analysis
folder = os.environ["DLBENCH_PROFILE_DIR"]
with open(os.path.join(folder, "who.txt"), "w") as out:
    out.write(os.environ["WHO"])
time.sleep(2)
for batch_idx in range(4):
    with op_performance_analysis(batch_idx):
        torch.ones(4, 4) @ torch.ones(4, 4)
assert open(os.path.join(folder, "who.txt")).read() == os.environ["WHO"], "another command wrote here"
"""


def start_together(conf: Path, cwd: Path, store: Store, *extra: str) -> list[subprocess.CompletedProcess[str]]:
    """Two ``python -m dlbench`` training commands started at once, told apart by ``WHO``; both waited for."""
    command = [sys.executable, "-m", "dlbench", "+benchmark=who", "steps=4", "profile.warmup=1",
               "profile.batches=2", "--config-dir", str(conf), *extra]  # fmt: skip
    processes = [
        subprocess.Popen(
            command,
            cwd=cwd,
            env=clean_env(WHO=who, **store.env()),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for who in ("first", "second")
    ]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=600)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return results


@pytest.mark.slow
def test_two_commands_started_together_keep_their_own_run_folders(tmp_path: Path, store: Store) -> None:
    conf = script_conf(tmp_path / "conf", "who", WHO_SCRIPT)
    for result in start_together(conf, tmp_path, store):
        assert result.returncode == 0, result.stderr
    folders = sorted((tmp_path / ".dlbench" / "runs").iterdir())
    assert len(folders) == 2, folders
    written = sorted((folder / "training" / "who" / "profile" / "who.txt").read_text() for folder in folders)
    assert written == ["first", "second"]
    assert all(run.info.status == "FINISHED" for run in mlflow_runs(store))


@pytest.mark.slow
def test_a_shared_run_folder_is_not_deleted_by_the_second_command(tmp_path: Path, store: Store) -> None:
    conf = script_conf(tmp_path / "conf", "who", WHO_SCRIPT)
    shared = tmp_path / "shared"
    for result in start_together(conf, tmp_path, store, f"hydra.run.dir={shared}"):
        assert result.returncode == 0, result.stderr
    trainings = sorted(p.name for p in (shared / "training").iterdir())
    assert trainings == ["who", "who-2"]
    written = sorted((shared / "training" / name / "profile" / "who.txt").read_text() for name in trainings)
    assert written == ["first", "second"]
    for name in trainings:  # each kept its whole profile, not only the marker
        assert list((shared / "training" / name / "profile").glob("batch_*_ops.csv"))


def test_a_fresh_folder_beside_an_existing_one_leaves_its_files(tmp_path: Path) -> None:
    first = fresh_folder(tmp_path, "evaluate")
    (first / "kept.txt").write_text("mine")
    second = fresh_folder(tmp_path, "evaluate")
    assert (first.name, second.name) == ("evaluate", "evaluate-2")
    assert (first / "kept.txt").read_text() == "mine" and not list(second.iterdir())

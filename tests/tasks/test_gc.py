"""task=gc keeps dlbench's own folder bounded: a model file a run made is stored once by its content, however
many runs make it; gc says what ``.dlbench/`` holds and removes the model files no run refers to (left in
``models/`` or in the run folder of a command that ended), sparing what a command at work may still need. The
reuse store lives there too, never loose in the folder the user ran from."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import onnx
import pytest
from helpers import Store, run_dlbench

from dlbench.config import DlbenchConfig, MlflowConfig
from dlbench.core.context import AppContext
from dlbench.tasks.benchmark_model import reuse_store_path
from dlbench.tracking.local_files import MODEL_TAG, keep_model, local_folder
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget

HOUR_AGO = time.time() - 3600
#: a real, tiny ONNX model (one Relu)
MODEL = onnx.helper.make_model(
    onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "relu",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
    )
).SerializeToString()  # fmt: skip


def made_by_a_command(tmp_path: Path, name: str) -> Path:
    """A model file as a command leaves it in its run folder: a real exported network."""
    path = tmp_path / "work" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MODEL)
    return path


def aged(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(MODEL)
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    return path


def ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_gc_removes_the_model_files_no_run_refers_to_and_keeps_each_referenced_one_once(
    tmp_path: Path, store: Store
) -> None:
    target = TrackingTarget(store.uri, store.experiment)
    tags = []
    for name in ("first", "second"):  # two runs that made the same network
        with TrackedRun(target, name) as run:
            keep_model(run, made_by_a_command(tmp_path, "mlp.onnx"), tmp_path)
            tags.append(run.data().tags[MODEL_TAG])
    models = local_folder(store.uri, tmp_path) / "models"
    digest = hashlib.sha256(MODEL).hexdigest()
    assert tags == [f"{digest}.onnx"] * 2 and (models / tags[0]).is_file()
    assert not (tmp_path / "work" / "mlp.onnx").exists(), "moved, not copied"
    referenced = aged(models / tags[0])
    orphan = aged(models / f"{'0' * 64}.onnx")  # its run was purged
    young = models / f"{'1' * 64}.onnx"  # a command stored it a moment ago and is tagging its run
    young.write_bytes(MODEL)
    runs = tmp_path / ".dlbench" / "runs"
    stray = aged(runs / f"2026-01-01_00-00-00_{ended_pid()}-beef" / "evaluate" / "mlp" / "profile" / "mlp.onnx")
    live = aged(runs / f"2026-01-01_00-00-01_{os.getpid()}-beef" / "inference" / "mlp_b1.onnx")

    result = run_dlbench("task=gc", "gc.stale_after_s=60", cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    assert [p.exists() for p in (referenced, orphan, young, stray, live)] == [True, False, True, False, True]
    assert f"removed 2 model file(s) no run refers to ({2 * len(MODEL) / 1e6:.1f} MB)" in result.stdout
    held = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ") and "file(s)" in line}
    assert {"models", "run"} <= held, result.stdout


@pytest.mark.parametrize(
    ("tracking_uri", "folder"),
    [("", "."), ("sqlite:///{tmp}/elsewhere/runs.db", "elsewhere"), ("http://127.0.0.1:5000", ".")],
    ids=["default-store", "named-sqlite-store", "server"],
)
def test_the_reuse_store_lives_in_dlbenchs_own_folder_beside_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracking_uri: str, folder: str
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = DlbenchConfig(task="benchmark_model", mlflow=MlflowConfig(tracking_uri=tracking_uri.format(tmp=tmp_path)))
    ctx = AppContext(config_dirs=(), start_dir=tmp_path, output_dir=tmp_path / "job")
    assert reuse_store_path(cfg, ctx) == (tmp_path / folder).resolve() / ".dlbench" / "dlbench_reuse.db"

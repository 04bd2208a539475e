"""The TrainingBenchmarks scripts train standalone, are profiled through the environment, and export ONNX."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from dlbench import PROJECT_ROOT
from dlbench.training.profile import read_profile

SCRIPTS = PROJECT_ROOT / "TrainingBenchmarks"

#: Tiny model sizes per script, so a test run takes seconds.
TINY = {
    "resnet_cifar": ["--width", "4"],
    "transformer_lm": ["--vocab", "64", "--seq-len", "16", "--dim", "16", "--heads", "2"],
    "mlp": ["--hidden", "32", "--layers", "2"],
}
EXPECTED_ONNX_NODES = {
    "resnet_cifar": {"Conv", "BatchNormalization", "Relu", "Add", "GlobalAveragePool", "Gemm"},
    "transformer_lm": {"MatMul", "Softmax", "LayerNormalization", "Gather", "Add"},
    "mlp": {"Gemm", "Relu"},
}
FINAL_LINE = re.compile(r"(\d+) steps in [\d.]+ s, [\d.]+ samples/s, loss ([\d.]+) -> ([\d.]+)")


def run_script(name: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DLBENCH_", "MLFLOW_"))}
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    return subprocess.run(  # noqa: S603 - an argument list
        [sys.executable, str(SCRIPTS / f"{name}.py"), *TINY[name], "--threads", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        cwd=cwd,
    )


@pytest.mark.parametrize("name", sorted(TINY))
def test_script_trains_and_is_profiled_through_the_environment(name: str, tmp_path: Path):
    profile_dir = tmp_path / "profile"
    env = {
        "PYTHONPATH": str(PROJECT_ROOT),
        "DLBENCH_PROFILE_WARMUP": "1",
        "DLBENCH_PROFILE_BATCHES": "2",
        "DLBENCH_PROFILE_DIR": str(profile_dir),
    }
    result = run_script(name, "--steps", "4", "--batch-size", "4", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert FINAL_LINE.search(result.stdout), result.stdout
    assert result.stdout.count(" step ") == 4

    assert sorted(p.name for p in profile_dir.glob("batch_*_ops.csv")) == ["batch_1_ops.csv", "batch_2_ops.csv"]
    summary = read_profile(profile_dir / "summary_ops.csv")
    assert summary["name"].str.startswith("aten::").any()
    batches = read_profile(profile_dir / "batches.csv")
    assert list(batches["profiled"]) == [0, 1, 1, 0]


def test_script_trains_without_dlbench_and_the_loss_falls(tmp_path: Path):
    # A dlbench package that fails to import shadows the real one, as if dlbench were not installed.
    blocker = tmp_path / "blocker" / "dlbench"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('dlbench is not installed here')\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {"PYTHONPATH": str(blocker.parent)}
    result = run_script("mlp", "--steps", "15", "--batch-size", "16", "--quiet", env=env, cwd=workdir)
    assert result.returncode == 0, result.stderr
    match = FINAL_LINE.search(result.stdout)
    assert match, result.stdout
    first, last = float(match.group(2)), float(match.group(3))
    assert last < first - 0.2
    assert list(workdir.iterdir()) == []  # nothing profiled, nothing written


def test_script_rejects_bad_hyperparameters(tmp_path: Path):
    result = run_script("mlp", "--steps", "0", cwd=tmp_path)
    assert result.returncode != 0
    assert "--steps must be >= 1, got 0" in result.stderr


@pytest.mark.parametrize("name", sorted(TINY))
def test_export_onnx_writes_a_valid_model_with_a_dynamic_batch(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.onnx"
    result = run_script(name, "--export-onnx", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    op_types = collections.Counter(node.op_type for node in model.graph.node)
    assert EXPECTED_ONNX_NODES[name] <= set(op_types), op_types
    batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param == "batch"
    assert not (tmp_path / ".dlbench").exists()  # exporting does not train (no profile in .dlbench/profile)

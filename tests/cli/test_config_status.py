"""Every configuration mistake exits with status 2, as the README promises, before anything is measured or a
store is opened: a setting the model does not fit (an open symbolic dimension, a missing file), a task
without what it needs, a backend with nothing registered, a training window that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_dlbench

from dlbench.cli.errors import CONFIG_STATUS


@pytest.fixture(scope="module")
def open_sequence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An encoder layer exported with a free ``seq`` axis besides the batch."""
    import torch
    from onnx_models import EncoderLayer

    path = tmp_path_factory.mktemp("seq") / "seq.onnx"
    torch.onnx.export(EncoderLayer().eval(), (torch.randn(2, 16, 64),), str(path), input_names=["x"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}}, dynamo=False)  # fmt: skip
    return path


def assert_configuration_error(result, *phrases: str, store: Path) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == CONFIG_STATUS, output[-2000:]
    assert "Traceback" not in output
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr
    assert not store.exists(), "a configuration error opens no store"


def test_an_open_symbolic_dimension_is_a_configuration_error(tmp_path: Path, open_sequence: Path):
    result = run_dlbench("task=extract", f"model={open_sequence}", cwd=tmp_path)
    assert_configuration_error(result, "'seq'", "set dims.seq=N", store=tmp_path / "mlflow.db")
    lacking = run_dlbench("task=extract", f"model={open_sequence}", "dims.seq=8", "dims.heads=2", cwd=tmp_path)
    assert_configuration_error(lacking, "the model has no dimension 'heads'", store=tmp_path / "mlflow.db")
    fitting = run_dlbench("task=extract", f"model={open_sequence}", "dims.seq=8", cwd=tmp_path)
    assert fitting.returncode == 0, fitting.stderr[-2000:]


@pytest.mark.parametrize(
    ("overrides", "phrases"),
    [
        (("task=extract",), ("needs an ONNX file: add model=",)),
        (("task=benchmark_model", "model=nowhere/model.onnx"), ("nowhere/model.onnx: no such ONNX file",)),
        (("+benchmark=relu", "backend=nosuchlib"), ("no 'nosuchlib' benchmark for Relu",)),
        (("+benchmark=relu", "task=evaluate"), ("task=evaluate needs a training benchmark",)),
        (("+benchmark=mlp", "steps=2", "profile.warmup=2"), ("no batch would be profiled",)),
    ],
)
def test_settings_that_cannot_run_exit_with_the_configuration_status(tmp_path: Path, overrides, phrases):
    result = run_dlbench(*overrides, cwd=tmp_path)
    assert_configuration_error(result, *phrases, store=tmp_path / "mlflow.db")

"""fp32_math, the one float32 math setting: validated when the config is composed, handed to the executables,
and set as PyTorch's TF32 switches by the torch kernels' worker on every request."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import FAST, Store, mlflow_runs, run_dlbench

from dlbench.backends.torch.fp32_math import SWITCHES, apply_fp32_math, current_fp32_math
from dlbench.backends.torch.run import main
from dlbench.core.settings import FP32_MATHS, to_environment
from dlbench.operators.runner import RunSettings
from dlbench.tracking.naming import short_host


@pytest.fixture
def restore_switches():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_the_framework_math_is_pytorchs_default_conv_tf32_matmul_ieee(restore_switches) -> None:
    assert SWITCHES["framework"] == (False, True)
    for name in FP32_MATHS:
        apply_fp32_math(name)
        assert current_fp32_math() == name
    with pytest.raises(ValueError, match="DLBENCH_FP32_MATH='fast'"):
        apply_fp32_math("fast")


@pytest.mark.parametrize(("fp32_math", "matmul", "cudnn"), [("ieee", False, False), ("tf32", True, True)])
def test_the_torch_worker_sets_the_switches_of_each_request(
    fp32_math: str, matmul: bool, cudnn: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_switches
) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = (not matmul, not cudnn)
    for key, value in RunSettings(min_reps=1, min_time_s=0.0, fp32_math=fp32_math).environment().items():
        monkeypatch.setenv(key, value)
    rows = tmp_path / "relu.csv"
    rows.write_text("1,1,2,3,4,0\n")
    assert main(["Relu", str(rows)]) == 0
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (matmul, cudnn)
    assert (tmp_path / "relu_out.csv").read_text().count("\n") == 2  # header and the row


def test_the_torch_worker_refuses_an_unknown_math(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FP32_MATH", "fast")
    rows = tmp_path / "relu.csv"
    rows.write_text("1,1,2,3,4,0\n")
    assert main(["Relu", str(rows)]) == 2


def test_the_executables_are_told_the_math() -> None:
    assert to_environment({"fp32_math": "ieee"}) == {"DLBENCH_FP32_MATH": "ieee"}
    assert RunSettings().environment()["DLBENCH_FP32_MATH"] == "framework"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("fp32_math=fast",), "fp32_math='fast': use ieee, tf32 or framework"),
        (("fp32_math=tf32", "device=cpu"), "fp32_math=tf32 with device=cpu"),
    ],
)
def test_a_bad_math_is_refused_when_the_config_is_composed(overrides: tuple[str, ...], message: str, tmp_path: Path):
    result = run_dlbench("+benchmark=relu", *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_math_is_a_param_and_in_the_run_name(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("+benchmark=relu", "batch_size=1", "fp32_math=ieee", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    assert run.data.params["fp32_math"] == "ieee"
    assert run.data.tags["mlflow.runName"] == f"relu-torch_relu-bs1-fp32ieee-{short_host()}"

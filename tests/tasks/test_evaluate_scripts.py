"""task=evaluate for any instrumented script: one written for the original tool (only the import line changed)
and registered by one YAML file, params that say what the script ran, dtype honoured or refused, and a
step time measured over enough steady steps."""

from __future__ import annotations

import math
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, REPO, Store, artifact_text, mlflow_runs, run_dlbench

#: A training script written for the original tool: its own argument parsing, the generic call form, the
#: network handed over so dlbench can export it. Only the import line names dlbench.
ORIGINAL_STYLE_SCRIPT = """\
import argparse

import torch
from torch import nn

from dlbench.instrument import op_performance_analysis_generic

parser = argparse.ArgumentParser()
parser.add_argument("--epochs-of-batches", type=int, default=10)
parser.add_argument("--learning-rate", type=float, default=0.1)
parser.add_argument("--width", type=int, default=32)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(
    nn.Conv2d(3, args.width, 3, padding=1), nn.BatchNorm2d(args.width), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(args.width, args.width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(args.width, 10),
)
optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate, momentum=0.9)
images, labels = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
for batch_idx in range(args.epochs_of_batches):
    with op_performance_analysis_generic(batch_idx, images, net, False):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(images), labels)
        loss.backward()
        optimizer.step()
print("done")
"""


def held_out_config(directory: Path, script_dir: Path, parameters: str = "--learning-rate 0.1") -> Path:
    """A script outside the repository and a config dir registering it by one YAML file each."""
    script_dir.mkdir(parents=True, exist_ok=True)
    script = script_dir / "their_training.py"
    script.write_text(ORIGINAL_STYLE_SCRIPT)
    (directory / "training").mkdir(parents=True, exist_ok=True)
    (directory / "benchmark").mkdir(parents=True, exist_ok=True)
    (directory / "training" / "theirs.yaml").write_text(f"name: theirs\nexe: {script}\nparameters: {parameters}\n")
    (directory / "benchmark" / "theirs.yaml").write_text(
        "# @package benchmark\nname: theirs\nkind: training\ntraining: theirs\n"
    )
    return directory


def table(store: Store, run_id: str, name: str) -> pd.DataFrame:
    return pd.read_csv(StringIO(artifact_text(store, run_id, name)))


@pytest.mark.slow
def test_a_script_written_for_the_original_tool_is_evaluated_with_its_own_parameters(tmp_path, store: Store):
    conf = held_out_config(tmp_path / "conf", tmp_path / "elsewhere")
    result = run_dlbench(
        "+benchmark=theirs", "task=evaluate", "profile.warmup=2", "profile.batches=2", "steps=30", "lr=0.05",
        "threads=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (run,) = mlflow_runs(store)
    params = run.data.params
    # the script ran its own 10 batches of 8 at its own learning rate, not dlbench's steps=30 and lr=0.05
    assert params["steps"] == "10" and params["batch_size"] == "8"
    assert params["script_arguments"] == "--learning-rate 0.1" and "lr" not in params
    assert params["dtype"] == "float32" and params["threads"] == "1"
    operations = table(store, run.info.run_id, "operations.csv")
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Gemm", "SGD"} <= set(operations["op_type"])
    terms = table(store, run.info.run_id, "prediction_terms.csv")
    m = run.data.metrics
    assert terms["ms"].sum() == pytest.approx(m["step_time_predicted_ms"], rel=5e-4)  # metrics keep 4 digits
    assert set(terms["term"]) >= {"forward", "backward", "loss", "optimizer", "unmeasured operations"}
    assert all(terms.loc[terms["term"] == t, "ms"].item() > 0 for t in ("forward", "backward", "optimizer"))
    assert math.isfinite(m["prediction_error_pct"]) and m["step_time_measured_ms"] > 0
    assert "ratio_distribution.png" in {a.path for a in _artifacts(store, run.info.run_id)}
    assert "step time: predicted" in result.stdout


@pytest.mark.slow
def test_a_dtype_the_script_does_not_take_is_refused_before_anything_runs(tmp_path: Path, store: Store):
    conf = held_out_config(tmp_path / "conf", tmp_path / "elsewhere")
    result = run_dlbench(
        "+benchmark=theirs", "task=evaluate", "dtype=bfloat16", *FAST, "--config-dir", str(conf),
        cwd=tmp_path, store=store, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert "dtype=bfloat16" in result.stderr and "${dtype}" in result.stderr and "theirs" in result.stderr
    assert "Traceback" not in result.stderr.split("Error executing job")[0]
    assert not list(tmp_path.rglob("batches.csv")), "nothing was trained"


@pytest.mark.slow
def test_too_few_steady_steps_are_refused_naming_the_settings(tmp_path: Path, store: Store):
    result = run_dlbench(
        "+benchmark=mlp", "task=evaluate", "steps=6", "profile.warmup=2", "profile.batches=2", *FAST,
        cwd=tmp_path, store=store, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    for fact in ("steps=6", "profile.warmup=2", "profile.batches=2", "at least 3", "steps=7"):
        assert fact in result.stderr, fact
    assert not list(tmp_path.rglob("batches.csv")), "nothing was trained"


@pytest.mark.slow
def test_bfloat16_trains_and_measures_in_bfloat16(tmp_path: Path, store: Store):
    conf = tmp_path / "conf"
    (conf / "training").mkdir(parents=True)
    (conf / "benchmark").mkdir(parents=True)
    (conf / "training" / "mlp_bf16.yaml").write_text(
        f"name: mlp_bf16\nexe: {REPO / 'TrainingBenchmarks' / 'mlp.py'}\nparameters: --batch-size ${{batch_size}} "
        "--steps ${steps} --threads ${threads} --dtype ${dtype} --hidden 64 --layers 2 --quiet\n"
    )
    (conf / "benchmark" / "mlp_bf16.yaml").write_text(
        "# @package benchmark\nname: mlp_bf16\nkind: training\ntraining: mlp_bf16\n"
    )
    result = run_dlbench(
        "+benchmark=mlp_bf16", "task=evaluate", "dtype=bfloat16", "batch_size=4", "steps=8", "profile.warmup=2",
        "profile.batches=2", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    assert run.data.params["dtype"] == "bfloat16" and run.data.params["benchmark_dtype"] == "bfloat16"
    gemm = table(store, run.info.run_id, "operations.csv").query("op_type == 'Gemm' and status in ('ok', 'unstable')")
    assert len(gemm), "the Gemm operations were measured in bfloat16"
    first = gemm.iloc[0]
    m, k, n = (int(v.split("=")[1]) for v in first["params"].split(";")[:3])
    assert first["flops"] == pytest.approx(2 * m * k * n)


def _artifacts(store: Store, run_id: str) -> list:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=store.uri).list_artifacts(run_id)

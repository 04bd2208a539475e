"""The MLflow Project: typed parameters become Hydra overrides, and `mlflow run` sweeps log child runs."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, Store, artifact_text, clean_env, mlflow_runs

from dlbench.tracking.project import ParameterError, hydra_arguments


def test_sweep_parameters_become_a_multirun_with_the_overrides_split_like_a_shell() -> None:
    entry, arguments = hydra_arguments(
        [
            "sweep",
            "--benchmark",
            "relu",
            "--batch-size",
            "1, 8,32",
            "--backend",
            "torch",
            "--overrides",
            "measure.min_reps=3 'mlflow.run_name=two words'",
        ]
    )
    assert entry == "sweep"
    assert arguments == [
        "--multirun",
        "+benchmark=relu",
        "batch_size=1,8,32",
        "backend=torch",
        "measure.min_reps=3",
        "mlflow.run_name=two words",
    ]


def test_train_and_evaluate_entry_points_pass_their_parameters_on() -> None:
    assert hydra_arguments(["train", "--benchmark", "mlp", "--batch-size", "16", "--steps", "8"])[1] == [
        "+benchmark=mlp",
        "batch_size=16",
        "steps=8",
    ]
    assert hydra_arguments(["evaluate", "--benchmark", "resnet_cifar", "--overrides", ""])[1] == [
        "task=evaluate",
        "+benchmark=resnet_cifar",
    ]


@pytest.mark.parametrize("entry_point", ["sweep", "train", "evaluate"])
def test_mlproject_commands_reach_dlbench_with_each_parameter_intact(entry_point: str) -> None:
    from mlflow.projects._project_spec import load_project

    overrides = "measure.min_reps=3 'mlflow.run_name=two words' mlflow.experiment=$(id)"
    command = (
        load_project(str(REPO))
        .get_entry_point(entry_point)
        .compute_command({"benchmark": "relu", "overrides": overrides}, None)
    )
    argv = shlex.split(command)  # what the shell MLflow starts hands to python
    assert argv[:3] == ["python", "-m", "dlbench.tracking.project"]
    entry, arguments = hydra_arguments(argv[3:])
    assert entry == entry_point and "+benchmark=relu" in arguments
    assert arguments[-3:] == ["measure.min_reps=3", "mlflow.run_name=two words", "mlflow.experiment=$(id)"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sweep", "--benchmark", "relu; rm -rf ~"], "parameter benchmark='relu; rm -rf ~'"),
        (["sweep", "--benchmark", "relu", "--batch-size", "8,x"], "parameter batch_size='8,x'"),
        (["sweep", "--benchmark", "relu", "--overrides", "a='unclosed"], "parameter overrides="),
        (["train", "--benchmark", "mlp", "--steps", "-3"], "parameter steps='-3'"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(argv: list[str], message: str) -> None:
    with pytest.raises(ParameterError, match=message.replace("[", r"\[")):
        hydra_arguments(argv)


def _mlflow_run(*arguments: str, store: Store, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    mlflow = shutil.which("mlflow")
    assert mlflow, "the mlflow command line is installed with mlflow"
    return subprocess.run(
        [mlflow, "run", str(REPO), *arguments, "--env-manager", "local"],
        cwd=tmp_path,
        env=clean_env(**store.env()),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_mlflow_run_sweep_logs_the_sweep_and_one_run_per_batch_size_under_the_project_run(
    tmp_path: Path, store: Store
) -> None:
    fast = f"measure.warmup=1 measure.min_reps=2 measure.min_time_s=0 quiet=true hydra.sweep.dir={tmp_path / 'sweep'}"
    result = _mlflow_run(
        "-e", "sweep", "-P", "benchmark=relu", "-P", "batch_size=1,2", "-P", f"overrides={fast}",
        store=store, tmp_path=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = mlflow_runs(store)
    (project,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    (sweep,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == project.info.run_id]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == sweep.info.run_id]
    assert len(runs) == 4 and len(children) == 2 and sweep.data.tags["dlbench.kind"] == "sweep"
    assert project.info.status == "FINISHED" and project.data.tags["dlbench.entry_point"] == "sweep"
    assert project.data.params["benchmark"] == "relu" and project.data.params["batch_size"] == "1,2"
    assert sorted(r.data.params["batch_size"] for r in children) == ["1", "2"]
    assert all(r.info.status == "FINISHED" and r.data.params["measure.min_reps"] == "2" for r in children)
    assert len({r.data.tags["dlbench.sweep"] for r in children}) == 1
    assert "batch_size: 2" in artifact_text(store, children[0].info.run_id, "config.yaml") + artifact_text(
        store, children[1].info.run_id, "config.yaml"
    )


@pytest.mark.slow
def test_mlflow_run_with_a_shell_command_as_parameter_fails_without_running_it(tmp_path: Path, store: Store) -> None:
    marker = tmp_path / "pwned"
    result = _mlflow_run(
        "-e", "sweep", "-P", f"benchmark=relu; touch {marker}", store=store, tmp_path=tmp_path
    )  # fmt: skip
    assert result.returncode != 0
    assert "parameter benchmark=" in result.stderr
    assert not marker.exists()

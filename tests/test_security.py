"""Nothing runs that was not asked for: commands are argument lists, shell syntax in configs stays text,
stored data is CSV/JSON/YAML, and no secret from the environment reaches MLflow."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from helpers import FAST, REPO, Store, artifact_text, mlflow_runs, run_dlbench
from mlflow.tracking import MlflowClient

from dlbench.config import DlbenchConfig
from dlbench.core.process import run_command
from dlbench.operators.registry import TrainingBenchmark, load_registry
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.secrets import scrub
from dlbench.tracking.store import TrackingTarget, prepare_store
from dlbench.training.scripts import resolve_parameters

SOURCES = sorted([*(REPO / "dlbench").rglob("*.py"), *(REPO / "TrainingBenchmarks").rglob("*.py")])
FORBIDDEN = {
    "shell=True": re.compile(r"shell\s*=\s*True"),
    "os.system": re.compile(r"\bos\.system\b"),
    "os.popen": re.compile(r"\bos\.popen\b"),
    "pickle": re.compile(r"\b(?:cloud|json|_)?pickle\b"),
    "marshal": re.compile(r"\bmarshal\.loads?\b"),
    "torch.load": re.compile(r"\btorch\.load\b"),
    "eval/exec": re.compile(r"(?<![.\w])(?:eval|exec)\s*\("),
}
#: Shell syntax that would run ``touch pwned`` if anything handed it to a shell.
HOSTILE = ("$(touch pwned)", "; touch pwned2", "`touch pwned3`", "| touch pwned4 &&")


def test_the_sources_never_use_a_shell_pickle_or_eval() -> None:
    assert len(SOURCES) > 20
    found = [
        f"{path.relative_to(REPO)}:{n}: {name}: {line.strip()}"
        for path in SOURCES
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        for name, pattern in FORBIDDEN.items()
        if pattern.search(line)
    ]
    assert found == []


ARGV_PROGRAM = """\
import json, sys
path = sys.argv[-1]
json.dump(sys.argv[1:-1], open(path[:-4] + "_argv.json", "w"))
rows = [line.strip().split(",") for line in open(path) if line.strip()]
with open(path[:-4] + "_out.csv", "w") as f:
    f.write("id,ms\\n")
    for row in rows:
        f.write(f"{row[0]},1.5\\n")
"""


def pwned_files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("pwned*")] + list(REPO.glob("pwned*"))


def test_shell_syntax_in_a_registry_command_and_an_override_stays_text(tmp_path: Path, store: Store) -> None:
    conf = tmp_path / "conf"
    (conf / "registry").mkdir(parents=True)
    script = conf / "argv_relu.py"
    script.write_text(ARGV_PROGRAM)
    exe = json.dumps(["python", str(script), *HOSTILE])
    (conf / "registry" / "argv_relu.yaml").write_text(
        f"name: argv_relu\nsynonyms: [Relu]\nexe: {exe}\nparam_descr: [N, C, H, W, mode]\nbackend: inert\n"
    )
    run_name = "x $(touch pwned6); touch pwned7 `touch pwned8`"
    result = run_dlbench(
        "+benchmark=relu",
        "backend=inert",
        *FAST,
        f"mlflow.run_name='{run_name}'",
        "--config-dir",
        str(conf),
        cwd=tmp_path,
        store=store,
    )
    assert result.returncode == 0, result.stderr
    (argv_file,) = tmp_path.glob(".dlbench/runs/*/protocol/argv_relu_relu_argv.json")
    assert json.loads(argv_file.read_text()) == list(HOSTILE), "each argument arrives verbatim"
    (run,) = mlflow_runs(store)
    assert run.info.run_name == run_name
    assert pwned_files(tmp_path) == []


def test_training_parameters_are_split_into_words_and_never_reach_a_shell(tmp_path: Path) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import json, sys\njson.dump(sys.argv[1:], open(sys.argv[1], 'w'))\n")
    out = tmp_path / "argv.json"
    entry = TrainingBenchmark(
        name="hostile",
        command=(sys.executable, str(script)),
        parameters=f"{out} --batch ${{batch_size}} --run ${{mlflow.run_name}} '$(touch pwned)' \"; touch pwned2\"",
        model="",
        source=tmp_path / "hostile.yaml",
    )
    cfg = DlbenchConfig(task="list", batch_size=4)
    cfg.mlflow.run_name = "`touch pwned3`"
    arguments = resolve_parameters(entry, cfg)
    assert arguments == [str(out), "--batch", "4", "--run", "`touch", "pwned3`", "$(touch pwned)", "; touch pwned2"]
    result = run_command([*entry.command, *arguments], timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == arguments
    assert pwned_files(tmp_path) == []


def test_the_shipped_training_entries_split_parameters_with_shlex() -> None:
    source = (REPO / "dlbench" / "training" / "scripts.py").read_text()
    assert "shlex.split(" in source
    for entry in load_registry().trainings:
        cfg = DlbenchConfig(task="list")
        assert all(isinstance(a, str) for a in resolve_parameters(entry, cfg))


SECRETS = {
    "MLFLOW_TRACKING_PASSWORD": "hunter2-mlflow-pass",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-K7MDENG-bPxRfiCY",
    "GITHUB_TOKEN": "ghp_0123456789abcdefSECRET",
    "HF_TOKEN": "hf_abcdefghijklmnopqrstu",
}
TEXT_SUFFIXES = {".csv", ".txt", ".yaml", ".json"}
STORED_SUFFIXES = TEXT_SUFFIXES | {".png"}


def all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    found = []
    for info in client.list_artifacts(run_id, path):
        found.extend(all_artifacts(client, run_id, info.path) if info.is_dir else [info.path])
    return found


def test_no_environment_secret_reaches_params_tags_or_artifacts(tmp_path: Path, store: Store) -> None:
    result = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store, env=SECRETS)
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    client = MlflowClient(tracking_uri=store.uri)
    texts = [*run.data.params.values(), *run.data.tags.values(), *run.data.params, *run.data.tags]
    artifacts = all_artifacts(client, run.info.run_id)
    assert {Path(a).suffix for a in artifacts} <= STORED_SUFFIXES, "stored data is CSV/JSON/YAML/text (and plots)"
    texts += [artifact_text(store, run.info.run_id, a) for a in artifacts if Path(a).suffix in TEXT_SUFFIXES]
    leaked = [(name, value) for name, value in SECRETS.items() for text in texts if value in text]
    assert leaked == []


def test_tracked_runs_scrub_url_passwords_and_secret_values(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "tok-1234567890")
    target = TrackingTarget(store.uri, store.experiment)
    experiment_id = prepare_store(target)
    params = {"tracking": "https://alice:s3cr3t-pw@mlflow.example.com/", "note": "uses tok-1234567890", "db_key": "x"}
    with (
        pytest.raises(RuntimeError),
        TrackedRun(target, "scrub", params, {"t": "tok-1234567890"}, experiment_id=experiment_id) as run,
    ):
        run.log_text("header tok-1234567890 and postgresql://bob:pw12345@db/x\n", "notes.txt")
        raise RuntimeError("failed with tok-1234567890")
    (logged,) = mlflow_runs(store)
    assert logged.data.params == {
        "tracking": "https://alice:***@mlflow.example.com/",
        "note": "uses ***",
        "db_key": "***",
    }
    assert logged.data.tags["t"] == "***" and "tok-1234567890" not in logged.data.tags["dlbench.error"]
    assert artifact_text(store, run.run_id, "notes.txt") == "header *** and postgresql://bob:***@db/x\n"
    assert "***" in artifact_text(store, run.run_id, "error.txt")
    assert scrub("plain text, no secrets") == "plain text, no secrets"

"""The quick start page runs as written: every command of its ```bash blocks, in order, as argument lists (no
shell), in a folder of its own where the commands make their own MLflow store; a command that starts a server
(`mlflow ui`) is started, must answer over HTTP with the runs the commands before it made, and is stopped.
Afterwards the folder holds nothing but the store, its artifacts and ``.dlbench/`` (as ``git clean -ndx`` sees
it), and no model file twice."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import REPO, clean_env, mlflow_runs, wait_for_health

QUICKSTART = REPO / "docs" / "quickstart.md"
SERVERS = (("mlflow", "ui"), ("mlflow", "server"))
COMMAND_TIMEOUT_S = 900
SERVER_START_S = 300


def bash_commands(markdown: str) -> list[list[str]]:
    """Each line of each ```bash block as an argument list, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", markdown, flags=re.S | re.M):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(argv)
    return commands


def runnable(argv: list[str]) -> list[str]:
    """``python`` and ``mlflow`` as the interpreter running the tests has them."""
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv[0] == "mlflow":
        return [sys.executable, "-m", "mlflow", *argv[1:]]
    return argv


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def check_server(argv: list[str], folder: Path, logs: Path) -> None:
    """Start the server on a free port (another may hold the default one), read the runs of the folder's store
    through its REST API, stop it; its output goes to ``logs``."""
    port = free_port()
    log = logs / f"server-{port}.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [*runnable(argv), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            cwd=folder, stdout=out, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for_health(url, server, log, SERVER_START_S, url)
            experiment = post_json(f"{url}/api/2.0/mlflow/experiments/search", {"max_results": 100})
            ids = [e["experiment_id"] for e in experiment["experiments"] if e["name"] == "dlbench"]
            assert ids, f"{' '.join(argv)} does not serve the experiment dlbench: {experiment}"
            served = post_json(f"{url}/api/2.0/mlflow/runs/search", {"experiment_ids": ids, "max_results": 1000})
            stored = mlflow_runs(f"sqlite:///{folder / 'mlflow.db'}")
            assert len(served.get("runs", [])) == len(stored) > 0
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def test_the_quick_start_page_has_a_command_for_each_of_the_five_things_users_do() -> None:
    commands = [" ".join(argv) for argv in bash_commands(QUICKSTART.read_text(encoding="utf-8"))]
    for wanted in ("+benchmark=", "-m +benchmark=", "mlflow ui --backend-store-uri sqlite:///mlflow.db",
                   "task=benchmark_model model=", "task=evaluate +benchmark=", "task=compare"):  # fmt: skip
        assert any(wanted in command for command in commands), wanted


def git(folder: Path, *args: str) -> str:
    identity = ("-c", "user.name=quickstart", "-c", "user.email=quickstart@localhost")
    done = subprocess.run(["git", *identity, *args], cwd=folder, capture_output=True, text=True, check=True)
    return done.stdout


def left_behind(folder: Path) -> list[str]:
    """What ``git clean -ndx`` would remove from ``folder``: every file the commands made, ignored or not."""
    return [line.removeprefix("Would remove ") for line in git(folder, "clean", "-ndx").splitlines()]


def model_copies(folder: Path, own: set[Path]) -> dict[str, list[str]]:
    """The model files dlbench keeps under ``folder`` (links not followed; the user's ``own`` left out) by
    content, where one content is stored more than once."""
    by_content = collections.defaultdict(list)
    for root, _, files in os.walk(folder):
        for path in (Path(root) / f for f in files if f.endswith(".onnx")):
            if path not in own:
                by_content[hashlib.sha256(path.read_bytes()).hexdigest()].append(str(path.relative_to(folder)))
    return {digest: paths for digest, paths in by_content.items() if len(paths) > 1}


@pytest.mark.slow
def test_every_quick_start_command_runs_in_order_on_a_fresh_store(tmp_path: Path) -> None:
    project = tmp_path / "project"  # a clone as git sees it: the training scripts, committed
    project.mkdir()
    (project / "TrainingBenchmarks").symlink_to(REPO / "TrainingBenchmarks")
    git(project, "init", "-q")
    git(project, "add", "TrainingBenchmarks")
    git(project, "commit", "-q", "-m", "the scripts the page runs")
    exported = set()
    for argv in bash_commands(QUICKSTART.read_text(encoding="utf-8")):
        if tuple(argv[:2]) in SERVERS:
            check_server(argv, project, tmp_path)
            continue
        if "--export-onnx" in argv:
            exported.add(project / argv[argv.index("--export-onnx") + 1])
        result = subprocess.run(
            runnable(argv), cwd=project, env=clean_env(), capture_output=True, text=True,
            timeout=COMMAND_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}: {result.stderr[-3000:]}"
    assert (project / "mlflow.db").is_file()
    allowed = (".dlbench/", "mlflow.db", "mlruns/")
    assert [p for p in left_behind(project) if not p.startswith(allowed)] == []
    assert list((project / ".dlbench" / "models").glob("*.onnx")), "the evaluation keeps its trained network"
    assert model_copies(project, exported) == {}, "each model file is stored once"

"""A shared MLflow tracking server: sweeps and training benchmarks log through it, results are read back
over its REST API, and an unreachable or misspelt tracking URI fails fast, naming the URI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FAST, Store, clean_env, run_dlbench, wait_for_health


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """REST calls to a running ``mlflow server``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, endpoint: str, **query: str) -> bytes:
        with urllib.request.urlopen(f"{self.url}{endpoint}?{urllib.parse.urlencode(query)}", timeout=30) as response:
            return response.read()

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def runs(self, experiment: str) -> list[dict]:
        found = json.loads(self.get("/api/2.0/mlflow/experiments/get-by-name", experiment_name=experiment))
        experiment_id = found["experiment"]["experiment_id"]
        return self.post("/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment_id], "max_results": 100})["runs"]

    def artifact(self, run_id: str, path: str) -> str:
        return self.get("/get-artifact", path=path, run_uuid=run_id).decode()


def _params(run: dict) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _metrics(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``mlflow server`` on a free local port with its own SQLite backend store and artifact root."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"),
            *("--artifacts-destination", str(root / "artifacts")),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=clean_env(),
        start_new_session=True,  # its own process group: the uvicorn worker is stopped with it
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, process, (root / "server.log"), 240, "mlflow server")
        yield Server(url)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.mark.slow
def test_parallel_operator_sweep_logs_through_the_tracking_server(tmp_path: Path, server: Server) -> None:
    store = Store(server.url, "server-sweep")
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *FAST,
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "mlflow.db").exists(), "nothing went to a local store"
    (sweep,) = [r for r in server.runs("server-sweep") if _tags(r)["dlbench.kind"] == "sweep"]
    runs = [r for r in server.runs("server-sweep") if _tags(r)["dlbench.kind"] != "sweep"]
    assert sorted(_params(r)["batch_size"] for r in runs) == ["1", "2"]
    assert {_tags(r)["mlflow.parentRunId"] for r in runs} == {sweep["info"]["run_id"]}
    table = server.artifact(sweep["info"]["run_id"], "sweep/median_ms_by_batch_size.csv").splitlines()
    assert table[0] == "benchmark,implementation,id,key,bs1,bs2,marked" and len(table) == 7
    assert all(r["info"]["status"] == "FINISHED" for r in runs)
    assert len({_tags(r)["dlbench.sweep"] for r in runs}) == 1
    assert all(_metrics(r)["operations_ok"] == 6 for r in runs)
    run = runs[0]
    assert run["info"]["artifact_uri"].startswith("mlflow-artifacts:"), "artifacts are served by the server"
    lines = server.artifact(run["info"]["run_id"], "results.csv").splitlines()
    assert lines[0].startswith("id,name,op_type") and len(lines) == 7
    assert server.artifact(run["info"]["run_id"], "protocol/torch_relu_relu.csv").count("\n") == 6


@pytest.mark.slow
def test_training_benchmark_logs_its_run_and_profiled_batches_through_the_tracking_server(
    tmp_path: Path, server: Server
) -> None:
    store = Store(server.url, "server-training")
    result = run_dlbench(
        "+benchmark=mlp", "batch_size=8", "steps=6", "profile.warmup=2", "profile.batches=1", "quiet=true",
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    runs = server.runs("server-training")
    (training,) = [r for r in runs if "mlflow.parentRunId" not in _tags(r)]
    assert training["info"]["status"] == "FINISHED"
    assert _params(training)["benchmark"] == "mlp" and _params(training)["batch_size"] == "8"
    children = [r for r in runs if _tags(r).get("mlflow.parentRunId") == training["info"]["run_id"]]
    assert len(children) == 1, "one child run per profiled batch"
    assert "batch_size: 8" in server.artifact(training["info"]["run_id"], "config.yaml")


@pytest.fixture(scope="module")
def working_run_s(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds the command of the refusal tests takes with a working SQLite store."""
    folder = tmp_path_factory.mktemp("working")
    started = time.monotonic()
    result = run_dlbench("+benchmark=conv", *FAST, cwd=folder, env={"MLFLOW_TRACKING_URI": f"sqlite:///{folder}/m.db"})
    assert result.returncode == 0, result.stderr[-2000:]
    return time.monotonic() - started


@pytest.mark.parametrize(
    "uri",
    [
        pytest.param("http://127.0.0.1:{closed}", id="closed-port"),
        pytest.param("htp://127.0.0.1:5000", id="garbage-scheme"),
        pytest.param("http//127.0.0.1:5000", id="missing-colon-slashes"),
    ],
)
def test_unusable_tracking_uri_fails_before_a_working_run_would_finish_naming_it(
    tmp_path: Path, uri: str, working_run_s: float
) -> None:
    """No retrying for minutes: refusing the URI takes less than the same command with a working store takes to
    measure and log (an ordering, so a busy machine slows both sides)."""
    uri = uri.format(closed=_free_port())
    started = time.monotonic()
    result = run_dlbench("+benchmark=conv", *FAST, cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri}, timeout=300)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert uri in result.stderr
    assert elapsed < working_run_s, f"took {elapsed:.1f} s to refuse {uri}, a working run {working_run_s:.1f} s"
    assert not (tmp_path / "mlflow.db").exists()


def test_unreachable_server_stops_a_multirun_before_any_job(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{_free_port()}"
    result = run_dlbench(
        "-m", "+benchmark=conv", "batch_size=1,2", *FAST, cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri}, timeout=120
    )
    assert result.returncode != 0
    assert f"dlbench: cannot reach the MLflow tracking server {uri}" in result.stderr
    assert "#0 :" not in result.stdout, "no job was launched"

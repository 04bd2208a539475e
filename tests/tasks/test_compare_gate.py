"""The regression gate: ``task=compare compare.baseline=... compare.fail_on=slower`` exits 1 printing what
regressed, 0 when nothing did, 2 for a baseline that names nothing; on runs whose recorded samples carry a
known slowdown (logged to a real MLflow store) and on real sweeps of an executable that times a larger problem
on the even ids. Every run carries the machine's state; a comparison lists the fields that differ and warns
once on a noisy setting."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import FAST, REPO, Store, artifact_text, clean_env, mlflow_runs, run_dlbench, wait_for_health

from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget

KEYS = ("stem", "l1_64", "l1_256", "l2_512")
SCALED_CONF = REPO / "tests" / "data" / "compare"
SCREENSHOTS = REPO / ".dlbench" / "screenshots"


def _experiment_in(store: Store, where: Path) -> None:
    """The test's experiment with its artifacts under ``where`` (not under the folder pytest started in)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.uri)
    if client.get_experiment_by_name(store.experiment) is None:
        client.create_experiment(store.experiment, artifact_location=(where / "mlruns").as_uri())


def _log_sweep(store: Store, where: Path, name: str, factor: float, seed: int, machine: dict[str, str]) -> str:
    """An operator sweep's run as a sweep logs it: results.csv and the protocol's samples in 3 rounds, the even
    ids' samples ``factor`` times slower."""
    rng = np.random.default_rng(seed)
    results, samples, rounds = [], [], []
    for op_id, key in enumerate(KEYS):
        scale = (1.0 + op_id) * (factor if op_id % 2 == 0 else 1.0)
        for round_ in (1, 2, 3):
            values = scale * rng.lognormal(0.0, 0.01, 20)
            samples += [{"id": op_id, "ms": v} for v in values]
            rounds.append({"id": op_id, "round": round_, "position": 1, "median_ms": np.median(values), "reps": 20,
                           "cpu_efficiency": 1.0, "kept": 1})  # fmt: skip
        results.append({"id": op_id, "name": key, "key": key, "count": 1, "median_ms": scale, "status": "ok"})
    tags = {"dlbench.kind": "operator_sweep", "dlbench.benchmark": "relu", "dlbench.implementation": "numpy",
            "system.id": "host|cpu|no-gpu", **{f"dlbench.machine.{k}": v for k, v in machine.items()}}  # fmt: skip
    _experiment_in(store, where)
    with TrackedRun(TrackingTarget(store.uri, store.experiment), name, {"batch_size": 8}, tags) as run:
        run.log_metrics({"total_time_ms": sum(r["median_ms"] for r in results), "totals_complete": 1.0})
        run.log_table(pd.DataFrame(results), "results.csv")
        run.log_table(pd.DataFrame(samples), "protocol/relu_samples.csv")
        run.log_table(pd.DataFrame(rounds), "protocol/relu_rounds.csv")
    return run.run_id


def _gate(store: Store, tmp_path: Path, baseline: str, candidate: str, *extra: str):
    return run_dlbench("task=compare", f"compare.baseline={baseline}", f"compare.candidate={candidate}",
                       "compare.fail_on=slower", *extra, cwd=tmp_path, store=store)  # fmt: skip


def test_gate_exits_1_on_a_known_slowdown_and_0_on_the_same_samples(tmp_path: Path, store: Store):
    quiet = {"cpu.model": "EPYC", "kernel": "6.1", "cpu.governor": "performance"}
    a = _log_sweep(store, tmp_path, "a", 1.0, seed=1, machine=quiet)
    same = _log_sweep(store, tmp_path, "same", 1.0, seed=2, machine=quiet)
    slowed = _log_sweep(store, tmp_path, "slowed", 1.3, seed=3, machine={**quiet, "cpu.governor": "powersave"})

    passed = _gate(store, tmp_path, a, same)
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    assert "nothing slower" in passed.stdout

    failed = _gate(store, tmp_path, a, slowed)
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-2000:]
    regressed = failed.stderr[failed.stderr.index("gate compare.fail_on=slower") :]
    assert "stem" in regressed and "l1_256" in regressed and "l1_64" not in regressed
    assert failed.stderr.count("warning: noisy settings") == 1 and "powersave" in failed.stderr
    assert "cpu.governor" in failed.stdout.split("the machines differ:")[1]

    compare = next(r for r in mlflow_runs(store) if r.data.tags.get("dlbench.kind") == "compare")
    assert compare.info.status == "FINISHED"  # the comparison itself worked; the gate is its exit status
    changes = pd.read_csv(StringIO(artifact_text(store, compare.info.run_id, "changes.csv"))).set_index("operation")
    assert list(changes.columns[:7]) == ["A", "B", "ratio", "low", "high", "verdict", "why"]
    assert changes.loc[["stem", "l1_256"], "verdict"].tolist() == ["slower", "slower"]
    assert changes.loc[["l1_64", "l2_512"], "verdict"].tolist() == ["same", "same"]
    assert compare.data.metrics["changes_slower"] == 2 and compare.data.metrics["changes_same"] == 2
    assert "2 slower" in compare.data.tags["mlflow.note.content"]
    assert "<svg" in artifact_text(store, compare.info.run_id, "forest.html")


def test_a_baseline_that_names_no_run_is_a_configuration_error(tmp_path: Path, store: Store):
    _log_sweep(store, tmp_path, "a", 1.0, seed=1, machine={})
    result = _gate(store, tmp_path, "no-such-system", "dtype:float32")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "compare.baseline=no-such-system" in result.stderr and "Traceback" not in result.stderr


def test_a_gate_without_a_baseline_fails_at_compose_time(tmp_path: Path, store: Store):
    result = run_dlbench("task=compare", "compare.fail_on=slower", cwd=tmp_path, store=store)
    assert result.returncode == 2 and "compare.fail_on needs compare.baseline" in result.stderr


#: the fast settings with contention watched: the gate's answer for a sweep another process slowed is unsure
WATCHED = tuple(o for o in FAST if not o.startswith("measure.contended_below=")) + ("measure.contended_below=0.85",)


def _sweep(store: Store, tmp_path: Path, backend: str) -> str:
    overrides = ("+benchmark=relu_small", "batch_size=2", f"backend={backend}", f"--config-dir={SCALED_CONF}")
    overrides += ("threads=1",)
    result = run_dlbench(*overrides, *WATCHED, "measure.rounds=8", "measure.min_reps=16", cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-2000:]
    return mlflow_runs(store)[0].info.run_id


@pytest.mark.slow  # three real sweeps and two comparisons
def test_gate_on_real_sweeps_passes_the_same_sweep_and_stops_the_slowed_one(tmp_path: Path, store: Store):
    a, again, slowed = (_sweep(store, tmp_path, b) for b in ("as_is", "as_is", "slowed"))
    run = next(r for r in mlflow_runs(store) if r.info.run_id == a)
    machine = json.loads(artifact_text(store, a, "machine.json"))
    assert machine["lib.torch"] and run.data.tags["dlbench.machine.kernel"] == machine["kernel"]

    # problems that fit a core's L2 (tests/data/compare/benchmark/relu_small.yaml): with ResNet-50's full shapes
    # the second of two sweeps of the same executable once ran every operation 1.28-1.55x slower (another core's
    # memory traffic; CPU efficiency 1.0), a false alarm at this threshold
    same = _gate(store, tmp_path, a, again, "compare.threshold=0.25")
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    result = _gate(store, tmp_path, a, slowed, "compare.threshold=0.25")
    compare = next(r for r in mlflow_runs(store) if r.data.tags.get("dlbench.kind") == "compare")
    changes = pd.read_csv(StringIO(artifact_text(store, compare.info.run_id, "changes.csv"))).set_index("operation")
    # ids 0, 2, 4 run their problems 4 times in each timed call, beyond what a 2-core VM's noise moves a median of
    # 8 rounds (a round of these tiny problems, a process of its own, scatters by ~18% from the next;
    # docs/comparing.md). Problems made 2.5 times larger instead left all three unsure in a fresh-clone CI run
    # (each interval's low end under 1.25), and 8 times larger made an odd neighbour 1.25x faster (caches)
    even = changes.loc[["stem", "l1_256", "l3_1024"]]
    busy = even["why"].fillna("").str.contains("busy machine|contended")
    # on a busy machine the honest answer is unsure, with the reason; where it was quiet, slower and exit 1
    assert (even.loc[busy, "verdict"] == "unsure").all()
    assert (even.loc[~busy, "verdict"] == "slower").all(), changes[["A", "B", "low", "high", "verdict", "why"]]
    assert result.returncode == (1 if (~busy).any() else 0), result.stdout[-3000:] + result.stderr[-2000:]
    odd = changes.loc[["l1_64", "l2_512", "l4_2048"], "verdict"]
    assert not odd.isin(["slower", "faster"]).any()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
LINK = re.compile(r"http://127\.0\.0\.1:5000(/#/\S+forest\.html\S*)")


@contextlib.contextmanager
def mlflow_ui(uri: str, root: Path) -> Iterator[str]:
    """``mlflow ui`` on a free port serving ``uri`` until the block ends; its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    log = (root / "ui.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=root, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, server, (root / "ui.log"), 300, "mlflow ui")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.mark.browser
@pytest.mark.slow  # mlflow ui and chromium on a loaded machine
def test_the_printed_link_opens_the_forest_plot_in_the_mlflow_ui(tmp_path: Path, store: Store):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: apt-get install chromium (.ci/run does)")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (.ci/run does)")
    from playwright.sync_api import expect, sync_playwright

    a = _log_sweep(store, tmp_path, "a", 1.0, seed=1, machine={})
    slowed = _log_sweep(store, tmp_path, "slowed", 1.3, seed=3, machine={})
    result = _gate(store, tmp_path, a, slowed)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    (path,) = LINK.findall(result.stdout)
    with mlflow_ui(store.uri, tmp_path) as url, sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_context(viewport={"width": 1600, "height": 1100}).new_page()
            page.set_default_timeout(120_000)
            page.goto(url + path)
            frame = page.frame_locator("iframe.mlflow-html-iframe")  # MLflow's view of an HTML artifact
            expect(frame.locator("svg").first).to_be_visible(timeout=120_000)  # the forest plot, drawn
            expect(frame.get_by_text("l1_256 [slower]").first).to_be_attached()  # a row label of the plot
            expect(frame.get_by_text("2 slower", exact=False).first).to_be_visible()  # the summary above it
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "compare_forest.png"))
            expect(page.get_by_text("forest.png", exact=True).first).to_be_visible()  # the PNG beside it
        finally:
            chromium.close()

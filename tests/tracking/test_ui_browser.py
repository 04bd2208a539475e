"""What a performance engineer sees in MLflow's UI, in a real browser (Debian's chromium driven by Playwright)
against a real ``mlflow ui`` on a store built by dlbench: a three-point batch-size sweep and a training run.

The experiment opens on its runs (the "Model training" view, not GenAI traces) through the link dlbench
prints; the sweep's run lists its three children; the compare page of the children shows ``batch_size`` and
an ``op/...`` metric per layer; the sweep's plot renders. Screenshots go to ``.dlbench/screenshots/``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FAST, REPO, clean_env, mlflow_runs, run_dlbench, wait_for_health

from dlbench.tracking.naming import short_host

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
SCREENSHOTS = REPO / ".dlbench" / "screenshots"
#: A loaded 2-core machine renders MLflow's pages slowly; these are upper bounds, not waits
PAGE_TIMEOUT_MS = 120_000
SERVER_START_S = 300
LAYERS = ("stem", "l1_64", "l1_256", "l2_512", "l3_1024", "l4_2048")
LINK = re.compile(r"http://127\.0\.0\.1:5000(/#/\S+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Ui:
    """The store dlbench built, the links it printed, and the ``mlflow ui`` serving it."""

    def __init__(self, root: Path, url: str, output: str) -> None:
        self.root = root
        self.url = url
        self.links = {path for path in LINK.findall(output)}
        runs = mlflow_runs(f"sqlite:///{root / 'mlflow.db'}")
        (self.sweep,) = [r for r in runs if r.data.tags["dlbench.kind"] == "sweep"]
        (self.training,) = [r for r in runs if r.data.tags["dlbench.kind"] == "training"]
        self.jobs = sorted(
            (r for r in runs if r.data.tags.get("mlflow.parentRunId") == self.sweep.info.run_id),
            key=lambda r: int(r.data.params["batch_size"]),
        )

    def link(self, pattern: str) -> str:
        """The printed link matching ``pattern``, on this server instead of ``mlflow ui``'s default port."""
        (path,) = [p for p in self.links if re.search(pattern, p)]
        return self.url + path


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: apt-get install chromium (.ci/run does)")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (.ci/run does)")
    root = tmp_path_factory.mktemp("ui-store")
    sweep = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2,4", "mlflow.system_metrics_interval_s=0.5", *FAST, cwd=root
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    training = run_dlbench(
        "+benchmark=mlp", "batch_size=8", "steps=8", "profile.warmup=2", "profile.batches=1", "quiet=true", cwd=root
    )
    assert training.returncode == 0, training.stderr[-3000:]
    port = _free_port()
    log = (root / "ui.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(url, server, (root / "ui.log"), SERVER_START_S, "mlflow ui")
        yield Ui(root, url, sweep.stdout + training.stdout)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(ui: Ui) -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A fresh browser context (no remembered UI state), 1600 x 1000; when the test fails, a screenshot of
    the page it failed on is kept as well."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    failed_before = request.session.testsfailed
    try:
        yield page
    finally:
        if request.session.testsfailed > failed_before:
            shot(page, f"{request.node.name}-failed", tmp_path)
        context.close()


def shot(page, name: str, tmp_path: Path, full_page: bool = False) -> Path:
    """A screenshot in pytest's tmp folder, copied to .dlbench/screenshots/ (printed, so CI logs show it)."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SCREENSHOTS / path.name)
    print(f"screenshot: {SCREENSHOTS / path.name}")
    return path


def close_assistant(page) -> None:
    """MLflow 3.17 opens its assistant panel on a first visit (a moment after the page); a user closes it to see
    the runs. Versions without the panel go on at once after a short wait."""
    close = page.locator("[data-component-id='mlflow.assistant.chat_panel.close']").first
    try:
        close.wait_for(state="visible", timeout=15_000)
    except Exception:  # noqa: BLE001 - no assistant in this MLflow version or configuration
        return
    close.click()


def scrolled_to(page, text: str):
    """The cell showing ``text``, scrolling the compare page's grids first: they render only the rows in view."""
    cell = page.get_by_text(text, exact=True).first
    for _ in range(40):
        if cell.count():
            break
        page.mouse.wheel(0, 150)  # the grid may follow the window's scroll or its own
        page.evaluate("document.querySelectorAll('.ReactVirtualized__Grid').forEach(g => { g.scrollTop += 150; })")
        page.wait_for_timeout(100)
    return cell


def test_the_experiment_opens_on_its_training_runs_with_dlbench_columns(ui: Ui, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(ui.link(r"/runs\?workflowType=machine_learning&viewStateShareKey="))
    expect(page.get_by_text(ui.sweep.info.run_name, exact=True)).to_be_visible()
    expect(page.get_by_text(ui.training.info.run_name, exact=True)).to_be_visible()
    close_assistant(page)
    assert "/runs" in page.url and "overview" not in page.url, "the runs table, not GenAI's traces overview"
    expect(page.get_by_role("columnheader", name="batch_size").first).to_be_visible()
    expect(page.get_by_role("columnheader", name="total_time_ms").first).to_be_visible()
    noisy = page.get_by_role("columnheader", name="dlbench.noisy").first  # whether the machine was busy
    expect(noisy).to_be_visible()
    # the sweep's run carries it (true: some job ran on a busy machine); the grid keeps the pinned run-name
    # column in rows of its own, so the value is found in the table rather than in the run's row
    expect(page.get_by_text(ui.sweep.data.tags["dlbench.noisy"], exact=True).first).to_be_visible()
    expect(page.get_by_text("1,2,4", exact=True)).to_be_visible()  # the sweep's swept batch sizes
    shot(page, "run_list", tmp_path)
    page.get_by_role("row").filter(has_text=ui.sweep.info.run_name).get_by_role("button").first.click()
    for job in ui.jobs:
        expect(page.get_by_text(job.info.run_name, exact=True)).to_be_visible()
    shot(page, "run_list_sweep_expanded", tmp_path)


def test_the_sweep_run_lists_its_three_children_and_a_job_run_reads_as_a_report(ui: Ui, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(ui.link(rf"/runs/{ui.sweep.info.run_id}\?"))
    expect(page.get_by_text("Child runs", exact=True)).to_be_visible()
    close_assistant(page)
    for job in ui.jobs:
        expect(page.get_by_role("link", name=job.info.run_name)).to_be_visible()
    expect(page.get_by_text("3 job runs, 3 finished")).to_be_visible()  # the description dlbench wrote
    shot(page, "sweep_run", tmp_path)

    job = ui.jobs[-1]
    page.goto(ui.link(rf"/runs/{job.info.run_id}\?"))
    close_assistant(page)
    expect(page.get_by_role("heading", name=job.info.run_name)).to_be_visible()
    expect(page.get_by_text("Slowest operations").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"resnet50-relu \([0-9a-f]{12}\)"))).to_be_visible()  # the dataset
    expect(
        page.get_by_text(f"python -m dlbench +benchmark=relu batch_size={job.data.params['batch_size']}")
    ).to_be_visible()
    assert job.info.run_name == f"relu-torch_relu-bs4-fp32fw-{short_host()}"
    shot(page, "run_page", tmp_path)


def test_the_compare_page_lines_up_each_layer_across_batch_sizes(ui: Ui, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(ui.link(r"/compare-runs\?"))
    expect(page.get_by_text("Comparing 3 Runs from 1 Experiment")).to_be_visible()
    close_assistant(page)
    parameters = page.get_by_role("row").filter(has=page.get_by_text("batch_size", exact=True))
    expect(parameters.first).to_contain_text("1")
    expect(parameters.first).to_contain_text("4")
    shot(page, "compare_batch_sizes", tmp_path)
    for layer in sorted(LAYERS):  # the grid lists metrics by name and scrolls forward
        expect(scrolled_to(page, f"op/{layer}/median_ms")).to_be_visible()
    page.get_by_text("op/l1_256/gflops_per_s", exact=True).first.scroll_into_view_if_needed()
    shot(page, "compare_batch_sizes_metrics", tmp_path)


def test_the_sweep_plot_renders_in_the_artifact_view(ui: Ui, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(ui.link(rf"/runs/{ui.sweep.info.run_id}\?").replace("?", "/artifacts?", 1))
    close_assistant(page)
    page.get_by_text("sweep", exact=True).click()
    page.get_by_text("relu-torch_relu_vs_batch_size.png").click()
    image = page.get_by_role("img", name="sweep/relu-torch_relu_vs_batch_size.png")
    expect(image).to_be_visible()
    page.wait_for_function("img => img.complete && img.naturalWidth > 1000", arg=image.element_handle())
    shot(page, "sweep_plot", tmp_path)

"""``python -m dlbench --help`` is dlbench's own page: short, about dlbench, with its tasks, benchmarks, main
keys and examples; rendered without Hydra (it is instant) yet the same page Hydra renders from the template."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import run_dlbench

from dlbench import CONF_DIR
from dlbench.config import TASKS


def help_page(tmp_path: Path, *extra: str) -> str:
    result = run_dlbench("--help", *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_help_is_a_short_page_about_dlbench(tmp_path: Path) -> None:
    page = help_page(tmp_path)
    assert len(page.splitlines()) <= 80
    assert page.startswith("dlbench: evaluate deep-learning workloads")
    assert "powered by Hydra" not in page and "aten::" not in page and "== Config ==" not in page


def test_help_lists_every_task_every_shipped_benchmark_and_examples(tmp_path: Path) -> None:
    page = help_page(tmp_path)
    for task in TASKS:
        assert re.search(rf"^  {task} +\S", page, re.MULTILINE), f"task {task} has no line"
    for benchmark in sorted(p.stem for p in (CONF_DIR / "benchmark").glob("*.yaml")):
        assert re.search(rf"\b{benchmark}\b", page.split("Config groups")[0]), f"benchmark {benchmark} not shown"
    examples = [line for line in page.splitlines() if line.strip().startswith("python -m dlbench ")]
    assert len(examples) >= 5


def test_help_gives_the_main_keys_with_their_defaults(tmp_path: Path) -> None:
    page = help_page(tmp_path)
    for key, default in [("batch_size", "8"), ("dtype", "float32"), ("backend", "torch"), ("threads", "0")]:
        assert re.search(rf"^  {re.escape(key)} .*\[{default}\]$", page, re.MULTILINE), key
    assert re.search(r"^  measure\.min_reps .*\[10\]$", page, re.MULTILINE)


def test_the_fast_page_is_the_page_hydra_renders_from_the_template(tmp_path: Path) -> None:
    # an override makes the entry hand --help to Hydra; batch_size=8 is the default, so the pages must agree
    assert help_page(tmp_path) == help_page(tmp_path, "batch_size=8")
    assert "[32]" in help_page(tmp_path, "batch_size=32")


def test_help_lists_the_benchmarks_of_a_config_dir(tmp_path: Path) -> None:
    mine = tmp_path / "mine" / "benchmark"
    mine.mkdir(parents=True)
    (mine / "my_relu.yaml").write_text("# @package benchmark\nname: my_relu\nop_type: Relu\noperations: [{N: 1}]\n")
    page = help_page(tmp_path, "--config-dir", str(mine.parent))
    assert re.search(r"^benchmark: .*\bmy_relu\b", page, re.MULTILINE)


def test_help_imports_neither_hydra_nor_mlflow_nor_torch(tmp_path: Path) -> None:
    import subprocess

    from helpers import clean_env

    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dlbench", "--help"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines()}
    assert not imported & {"hydra", "mlflow", "torch", "pandas"}


def test_cfg_job_still_shows_the_whole_configuration(tmp_path: Path) -> None:
    result = run_dlbench("--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for node in ("measure:", "mlflow:", "roofline:", "compare:", "profile:", "match:"):
        assert re.search(rf"^{node}", result.stdout, re.MULTILINE), node

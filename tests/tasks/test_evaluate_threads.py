"""task=evaluate with a script that sets its own thread count, unlike dlbench's ``threads=``: the operator
benchmarks run with the script's count, and the evaluation says loudly that it is not the one asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

#: Written for the original tool: the CPU form with its four arguments, and a thread count of its own.
SCRIPT = """\
import torch
from torch import nn

from dlbench.instrument import op_performance_analysis_cpu

torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
images, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
for batch_idx in range(10):
    with op_performance_analysis_cpu(batch_idx, images, net, False):
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(images), labels).backward()
        optimizer.step()
"""


def own_threads_config(directory: Path) -> Path:
    script = directory / "own_threads.py"
    script.write_text(SCRIPT)
    for group, text in (
        ("training", f"name: own_threads\nexe: {script}\nparameters: ''\n"),
        ("benchmark", "# @package benchmark\nname: own_threads\nkind: training\ntraining: own_threads\n"),
    ):
        (directory / "conf" / group).mkdir(parents=True, exist_ok=True)
        (directory / "conf" / group / "own_threads.yaml").write_text(text)
    return directory / "conf"


@pytest.mark.slow
def test_the_benchmarks_run_with_the_threads_the_script_set_and_the_difference_is_said(tmp_path, store: Store):
    conf = own_threads_config(tmp_path)
    result = run_dlbench(
        "+benchmark=own_threads", "task=evaluate", "threads=2", "profile.warmup=2", "profile.batches=2",
        "evaluate.bracket=false", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr  # dlbench's log lines go where Hydra's logging sends them
    assert "THREADS: the training script ran with 1 threads, not the 2 of threads=2" in output
    (run,) = mlflow_runs(store)
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert (params["threads"], params["threads_requested"], params["benchmark_threads"]) == ("1", "2", "1")
    assert metrics["threads.script"] == 1 and metrics["threads.benchmark"] == 1
    assert metrics["threads.requested_resolved"] == 2
    assert tags["dlbench.threads"] == "followed_script" and tags["dlbench.threads_differ"] == "true"
    assert "threads: the training script ran with 1 threads" in artifact_text(store, run.info.run_id, "notes.txt")
    description = tags["mlflow.note.content"]  # the report the run's page leads with
    assert "Notes: threads: the training script ran with 1 threads" in description

"""One thread count on both sides: a script dlbench starts leaves threads to torch and gets the count the operator
benchmarks run with (``OMP_NUM_THREADS``); the count it really ran with is recorded (at its first batch and at its
end), and the evaluation's benchmarks follow it or say why they cannot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

from dlbench.config import DlbenchConfig
from dlbench.core.cores import physical_cores, resolve_threads
from dlbench.training.facts import read_facts
from dlbench.training.scripts import script_environment
from dlbench.training.threads import ThreadAgreement

#: A script that leaves threads to torch unless told (``--threads N`` sets them; ``--then M`` changes them
#: after its first batch, as a script that tunes itself might).
SCRIPT = """\
import argparse

import torch

from dlbench.instrument import op_performance_analysis_generic

parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--then", type=int, default=0)
args = parser.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
net = torch.nn.Linear(16, 4)
x = torch.randn(8, 16)
for batch_idx in range(4):
    with op_performance_analysis_generic(batch_idx, x, net, False):
        net(x).sum().backward()
    if batch_idx == 0 and args.then:
        torch.set_num_threads(args.then)
"""


def run_script(tmp_path: Path, threads: int, *arguments: str) -> dict:
    """The script started as task=evaluate starts it (:func:`script_environment` of ``threads=``); its facts."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    profile = tmp_path / "profile"
    env = clean_env(**script_environment(DlbenchConfig(task="list", threads=threads), profile, {}))
    result = subprocess.run(
        [sys.executable, str(script), *arguments], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return read_facts(profile)


@pytest.mark.parametrize("threads", [1, 0])
def test_a_script_leaving_threads_to_torch_runs_with_the_benchmarks_count(tmp_path: Path, threads: int):
    facts = run_script(tmp_path, threads)
    assert facts["observed"]["threads"] == resolve_threads(threads)
    agreement = ThreadAgreement.of(threads, facts)
    assert agreement.state == "agree" and agreement.benchmark == resolve_threads(threads)
    assert agreement.tags() == {"dlbench.threads": "agree", "dlbench.threads_differ": "false"}
    assert agreement.problem() == ""


def test_a_script_setting_its_own_count_is_followed_and_said(tmp_path: Path):
    facts = run_script(tmp_path, 2, "--threads", "1")
    agreement = ThreadAgreement.of(2, facts)
    assert facts["observed"]["threads"] == 1 and "threads_at_end" not in facts["observed"]
    assert agreement.state == "followed_script" and agreement.benchmark == 1
    assert agreement.params() == {"benchmark_threads": 1}
    assert agreement.metrics() == {"threads.benchmark": 1.0, "threads.requested_resolved": 2.0, "threads.script": 1.0}
    assert agreement.tags()["dlbench.threads_differ"] == "true"
    assert "ran with 1 threads, not the 2 of threads=2" in agreement.problem()


def test_a_script_changing_its_count_after_the_first_batch_is_seen_at_its_end(tmp_path: Path):
    first = physical_cores()
    if first < 2:
        pytest.skip("needs two cores to change from one count to another")
    facts = run_script(tmp_path, 0, "--then", "1")
    assert facts["observed"]["threads"] == first and facts["observed"]["threads_at_end"] == 1
    agreement = ThreadAgreement.of(0, facts)
    assert agreement.state == "changed" and agreement.benchmark == 1
    assert f"from {first} to 1" in agreement.problem()


def test_a_script_that_never_showed_its_threads_is_named_unknown():
    agreement = ThreadAgreement.of(1, {"reported": {}, "observed": {"steps": 4}})
    assert agreement.state == "unknown" and agreement.benchmark == 1
    assert "unknown" in agreement.problem() and agreement.tags()["dlbench.threads_differ"] == "true"
    assert "threads.script" not in agreement.metrics()

"""bench/gpu_check.sh and its summary table (bench/gpu_summary.py), run here without a GPU: every step of the
script gets what is left of its budget and a step that finds none is reported as skipped; the summary holds
each figure against its target from the files the steps leave (the all-reduce's: the real collectives
executable, on the CPU here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
from helpers import REPO, clean_env

from dlbench.operators.protocol import output_path_for, write_input


def summarise(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / "gpu_summary.py"), str(out)], capture_output=True,
                          text=True, timeout=120, check=False, env=clean_env())  # fmt: skip


def test_the_summary_holds_each_figure_against_its_target(tmp_path: Path) -> None:
    errors = [
        ("mlp", 64, 1.9, 1.77),
        ("mlp", 1024, 1.9, 1.96),
        ("transformer_lm", 64, 8.5, 8.74),
        ("transformer_lm", 256, 7.9, 7.51),
        ("resnet_cifar", 64, 13.9, 11.44),
        ("resnet_cifar", 512, 18.5, 18.21),
    ]
    table = pd.DataFrame(errors, columns=["model", "batch_size", "step_time_predicted_ms", "step_time_measured_ms"])
    table["prediction_error_pct"] = 100 * (table["step_time_predicted_ms"] / table["step_time_measured_ms"] - 1)
    table.to_csv(tmp_path / "evaluations.csv", index=False)
    vendor = [
        ("conv", "fp32-ieee", "l1_reduce_in", "fwd", 1.02),
        ("conv", "fp32-ieee", "l2_expand", "dgrad", 1.08),
        ("conv", "bf16", "l1_reduce_in", "fwd", 0.97),
        ("gemm", "fp32-tf32", "qkv", "fwd", 1.3),
    ]
    pd.DataFrame(vendor, columns=["op", "precision", "layer", "mode", "ratio_heuristic"]).to_csv(
        tmp_path / "vendor.csv", index=False
    )
    (tmp_path / "ctest.log").write_text("100% tests passed, 0 tests failed out of 20\n")
    (tmp_path / "steps.tsv").write_text("native\t0\t80\npytest -m gpu\tskipped\t0\n")
    rows = write_input(tmp_path / "allreduce.csv", [(0, [4096, 1]), (1, [1 << 20, 1])])
    ran = subprocess.run([sys.executable, "-m", "dlbench.backends.collectives", "AllReduce", str(rows)],
                         env=clean_env(DLBENCH_DEVICE="cpu", DLBENCH_THREADS="1", DLBENCH_MIN_REPS="3",
                                       DLBENCH_MIN_TIME_S="0", PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0 and output_path_for(rows).is_file(), ran.stderr[-2000:]
    done = summarise(tmp_path)
    assert done.returncode == 1, done.stdout  # some checks failed
    verdicts = {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |")
                for line in (tmp_path / "summary.md").read_text().splitlines()[2:]}  # fmt: skip
    assert verdicts["evaluate resnet_cifar bs64"] == "FAIL" and verdicts["evaluate mlp bs1024"] == "ok"
    assert verdicts["prediction over the evaluations"] == "FAIL"  # max 21.5% over 15%
    assert verdicts["conv fp32-ieee native/torch"] == "FAIL" and verdicts["conv bf16 native/torch"] == "ok"
    assert verdicts["gemm fp32-tf32 native/torch"] == "-"  # reported, no target
    assert verdicts["ctest (verify modes)"] == "ok" and verdicts["NCCL all-reduce, 1 rank"] == "ok"
    assert verdicts["step pytest -m gpu"] == "FAIL" and "step native" not in verdicts
    assert "1/2 over 1.05" in done.stdout


def test_the_check_script_records_the_steps_its_budget_left_out(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(REPO / "bench" / "gpu_check.sh")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False,
                          env=clean_env(OUT=str(tmp_path), GPU_CHECK_BUDGET_S="1"))  # fmt: skip
    steps = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    evaluations = [f"evaluate {m} bs{b}" for m, sizes in (("mlp", (64, 1024)), ("transformer_lm", (64, 256)),
                                                           ("resnet_cifar", (64, 512))) for b in sizes]  # fmt: skip
    assert [s[0] for s in steps] == ["native", "ctest", *evaluations, "evaluate resnet_cifar bs64 amp=bf16",
                                     "conv and gemm: native vs torch",
                                     "NCCL all-reduce, 1 rank", "pytest -m gpu"]  # fmt: skip
    assert {s[1] for s in steps} == {"skipped"}
    assert "gpu check: " in done.stdout and (tmp_path / "summary.md").is_file()

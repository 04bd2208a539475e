"""An instrumented training loop records which optimizer stepped (class, options, foreach/fused as torch resolved
them, the shapes per parameter group) and how gradients were clipped, and folds what ran inside the optimizer's
step, zero_grad and clip_grad_norm_ into rows of their own; the evaluation reads them back per step."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from dlbench.analysis.step_run import read_step_profile, step_run
from dlbench.training.instrument import ProfileSession, ProfileSettings


def train(tmp_path: Path, steps: int = 4) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    decay = [p for p in model.parameters() if p.dim() > 1]
    no_decay = [p for p in model.parameters() if p.dim() == 1]
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], weight_decay=0.1)
    session = ProfileSession(ProfileSettings(warmup=1, batches=2, out_dir=tmp_path))
    inputs, targets = torch.randn(5, 6), torch.randn(5, 3)
    for batch_idx in range(steps):
        with session.batch(batch_idx):
            optimizer.zero_grad(set_to_none=False)
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
            optimizer.step()
    session.finish()
    return tmp_path


def test_the_optimizer_that_stepped_is_recorded_with_its_groups_options_and_shapes(tmp_path: Path) -> None:
    facts = json.loads((train(tmp_path) / "run_facts.json").read_text())
    (record,) = facts["optimizers"]
    assert (record["class"], record["module"], record["steps"]) == ("AdamW", "torch.optim.adamw", 4)
    decay, no_decay = record["groups"]
    assert decay["shapes"] == [[8, 6], [3, 8]] and no_decay["shapes"] == [[8], [3]]
    assert decay["options"]["weight_decay"] == 0.1 and no_decay["options"]["weight_decay"] == 0.0
    assert decay["options"]["betas"] == [0.9, 0.999] and "lr" not in decay["options"]
    assert decay["options"]["foreach"] is False and decay["options"]["fused"] is False  # torch's CPU default
    assert facts["clip_grad_norm"] == {"max_norm": 0.5, "norm_type": 2.0, "foreach": None}


def test_the_step_zero_grad_and_clipping_are_one_row_each_and_their_operators_are_not_counted_twice(
    tmp_path: Path,
) -> None:
    profile_dir = train(tmp_path)
    ops = pd.concat([pd.read_csv(p) for p in sorted(profile_dir.glob("batch_*_ops.csv"))])
    profile, folded = read_step_profile(profile_dir)
    names = set(profile["name"])
    assert {"dlbench::optimizer_step#AdamW", "dlbench::zero_grad", "dlbench::clip_grad_norm"} <= names
    assert not names & {"aten::lerp_", "aten::addcdiv_", "aten::_foreach_norm", "Optimizer.step#AdamW.step"}
    # folding moves time between rows, it neither adds nor loses any (two batches: the median is the mean)
    assert profile["time_us"].sum() == pytest.approx(ops["self_cpu_us"].sum() / 2, rel=1e-9)
    ran = step_run(json.loads((profile_dir / "run_facts.json").read_text()), profile, folded)
    assert ran.zero_grad == {"foreach": False}  # set_to_none=False: aten::zero_ inside zero_grad
    assert [(loss.op_type, dict(loss.params)) for loss in ran.losses] == [("MSELoss", {"N": 1, "C": 1, "H": 5, "W": 3})]


def test_cross_entropy_is_one_loss_and_its_own_nll_loss_is_not_a_second_one(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = ProfileSession(ProfileSettings(warmup=1, batches=2, out_dir=tmp_path))
    inputs, targets = torch.randn(5, 6), torch.randint(0, 4, (5,))
    for batch_idx in range(4):
        with session.batch(batch_idx):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
    session.finish()
    profile, folded = read_step_profile(tmp_path)
    assert "aten::nll_loss_nd" in set(profile["name"])  # cross entropy runs it inside
    ran = step_run(json.loads((tmp_path / "run_facts.json").read_text()), profile, folded)
    assert ran.losses is not None
    assert [(loss.op_type, loss.params) for loss in ran.losses] == [("SoftmaxCrossEntropyLoss", {"N": 5, "C": 4})]

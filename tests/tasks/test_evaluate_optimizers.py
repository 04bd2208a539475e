"""task=evaluate costs the loss and the optimizer a script ran, as it ran them: real training scripts with AdamW,
Adam, RMSprop and SGD without momentum, MSE, BCE-with-logits and NLL losses, zero_grad in place and gradient
clipping; an optimizer and a loss dlbench has no benchmark for are named with their measured share, never costed
as another."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

SCRIPT = """\
import torch
from torch import nn

from dlbench.instrument import op_performance_analysis_generic

torch.manual_seed(0)
torch.set_num_threads(1)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 6){head})
{optimizer}
inputs = torch.randn(8, 16)
for batch_idx in range(10):
    with op_performance_analysis_generic(batch_idx, inputs, net, False):
        optimizer.zero_grad(set_to_none={set_to_none})
        out = net(inputs)
        loss = {loss}
        loss.backward()
        {clip}
        optimizer.step()
        {extra}
"""

SCRIPTS = {
    "adamw_mse": dict(
        head="", optimizer="optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.05)",
        set_to_none="False", loss="nn.functional.mse_loss(out, torch.ones_like(out))",
        clip="torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)", extra="",
    ),
    "adam_bce": dict(
        head="", optimizer="optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, amsgrad=True, foreach=True)",
        set_to_none="True", loss="nn.functional.binary_cross_entropy_with_logits(out, (out > 0).float().detach())",
        clip="", extra="",
    ),
    "sgd_nll": dict(
        head=", nn.LogSoftmax(dim=1)", optimizer="optimizer = torch.optim.SGD(net.parameters(), lr=0.1)",
        set_to_none="True", loss="nn.functional.nll_loss(out, torch.arange(8) % 6)", clip="", extra="",
    ),
    # two optimizers: RMSprop for the first layer, one of the script's own for the rest; an L1 loss
    "rmsprop_own_l1": dict(
        head="",
        optimizer=(
            "class Sign(torch.optim.Optimizer):\n"
            "    def __init__(self, params):\n"
            "        super().__init__(params, {'lr': 1e-3})\n"
            "    @torch.no_grad()\n"
            "    def step(self, closure=None):\n"
            "        for group in self.param_groups:\n"
            "            for p in group['params']:\n"
            "                p.add_(p.grad.sign(), alpha=-group['lr'])\n"
            "optimizer = torch.optim.RMSprop(net[0].parameters(), lr=1e-3, momentum=0.9, centered=True)\n"
            "own = Sign(net[2].parameters())"
        ),
        set_to_none="True", loss="nn.functional.l1_loss(out, torch.ones_like(out))", clip="", extra="own.step()",
    ),
}  # fmt: skip


def evaluate(tmp_path: Path, store: Store, name: str) -> tuple[object, pd.DataFrame, pd.DataFrame, str]:
    script = tmp_path / "elsewhere" / f"{name}.py"
    script.parent.mkdir(parents=True)
    script.write_text(SCRIPT.format(**SCRIPTS[name]))
    conf = tmp_path / "conf"
    (conf / "training").mkdir(parents=True)
    (conf / "benchmark").mkdir(parents=True)
    (conf / "training" / "theirs.yaml").write_text(f"name: theirs\nexe: {script}\nparameters: ''\n")
    (conf / "benchmark" / "theirs.yaml").write_text(
        "# @package benchmark\nname: theirs\nkind: training\ntraining: theirs\n"
    )
    result = run_dlbench(
        "+benchmark=theirs", "task=evaluate", "profile.warmup=2", "profile.batches=2", "threads=1",
        "evaluate.bracket=false", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    operations = pd.read_csv(StringIO(artifact_text(store, run.info.run_id, "operations.csv")))
    terms = pd.read_csv(StringIO(artifact_text(store, run.info.run_id, "prediction_terms.csv")))
    return run, operations, terms, artifact_text(store, run.info.run_id, "notes.txt")


def of_pass(operations: pd.DataFrame, *passes: str) -> pd.DataFrame:
    return operations[operations["pass"].isin(passes)]


def measured_and_matched(rows: pd.DataFrame) -> bool:
    return bool(len(rows)) and set(rows["status"]) <= {"ok", "unstable"} and rows["in_training_ms"].sum() > 0


@pytest.mark.slow
def test_adamw_mse_zero_grad_in_place_and_clipping_are_costed_as_they_ran(tmp_path: Path, store: Store):
    run, operations, terms, notes = evaluate(tmp_path, store, "adamw_mse")
    update = of_pass(operations, "optimizer")
    assert set(update["op_type"]) == {"AdamW", "ZeroGrad", "ClipGradNorm"}
    adamw = update[update["op_type"] == "AdamW"]
    assert len(adamw) == 4 and adamw["params"].str.contains("weight_decay=0.05").all()  # per tensor: foreach off
    assert adamw["params"].str.contains("foreach=0").all()
    assert measured_and_matched(adamw) and measured_and_matched(update[update["op_type"] == "ClipGradNorm"])
    loss = of_pass(operations, "loss_forward", "loss_backward")
    assert list(loss["op_type"]) == ["MSELoss", "MSELoss"] and measured_and_matched(loss)
    assert terms.set_index("term").loc["optimizer", "ms"] > 0 and terms.set_index("term").loc["loss", "ms"] > 0
    assert "optimizer: AdamW group 0, 4 tensors, per tensor" in notes and "not costed" not in notes
    assert "zero_grad(set_to_none=False)" in notes and "gradient clipping" in notes
    assert run.data.params["ran.optimizers"] == "AdamW" and run.data.params["ran.losses"] == "MSELoss"
    assert run.data.params["ran.clip_grad_norm"] == "true" and run.data.params["ran.zero_grad_in_place"] == "true"


@pytest.mark.slow
def test_adam_with_foreach_is_one_step_over_all_tensors_and_bce_with_logits_is_its_loss(tmp_path: Path, store):
    _, operations, _, notes = evaluate(tmp_path, store, "adam_bce")
    update = of_pass(operations, "optimizer")
    assert list(update["op_type"]) == ["Adam"]  # zero_grad set gradients to None: nothing to cost
    assert update["params"].str.contains("tensors=4").all() and update["params"].str.contains("amsgrad=1").all()
    assert measured_and_matched(update)
    loss = of_pass(operations, "loss_forward", "loss_backward")
    assert list(loss["op_type"]) == ["BCEWithLogitsLoss", "BCEWithLogitsLoss"] and measured_and_matched(loss)
    assert "foreach" in notes and "SGD" not in set(operations["op_type"])


@pytest.mark.slow
def test_sgd_without_momentum_and_an_nll_loss_after_the_networks_log_softmax(tmp_path: Path, store: Store):
    _, operations, _, _ = evaluate(tmp_path, store, "sgd_nll")
    update = of_pass(operations, "optimizer")
    assert set(update["op_type"]) == {"SGD"} and update["params"].str.contains("momentum=0;").all()
    assert measured_and_matched(update)
    loss = of_pass(operations, "loss_forward", "loss_backward")
    assert list(loss["op_type"]) == ["NLLLoss", "NLLLoss"] and measured_and_matched(loss)
    assert loss["params"].str.startswith("N=8;C=6").all()


@pytest.mark.slow
def test_an_optimizer_and_a_loss_dlbench_cannot_cost_are_named_with_their_share(tmp_path: Path, store: Store):
    run, operations, terms, notes = evaluate(tmp_path, store, "rmsprop_own_l1")
    update = of_pass(operations, "optimizer")
    assert set(update["op_type"]) == {"RMSprop"} and update["params"].str.contains("centered=1").all()
    assert measured_and_matched(update)
    assert of_pass(operations, "loss_forward", "loss_backward").empty
    assert "not costed: optimizer Sign (__main__)" in notes and "not costed: loss aten::l1_loss" in notes
    assert run.data.params["ran.optimizers"] == "RMSprop,Sign" and run.data.params["ran.losses"] == "aten::l1_loss"
    m = run.data.metrics
    assert 0 < m["not_costed.optimizer_Sign_pct"] < 100 and m["not_costed.optimizer_Sign_ms"] > 0
    assert m["not_costed_time_pct"] >= m["not_costed.optimizer_Sign_pct"]

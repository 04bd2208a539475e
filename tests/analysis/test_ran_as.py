"""Each operation of a real profiled step in the dtype and memory format it ran: a small CNN trained under
bfloat16 autocast in channels_last has its convolutions and GEMM benchmarked in bfloat16 (forward and the
backward autograd ran), its loss in float32, its convolutions in channels_last; the float32 twin keeps every
operation at the sweep's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from dlbench.analysis.match import load_table
from dlbench.analysis.ran_as import call_dtype, operations_as_ran
from dlbench.analysis.step_run import read_step_profile, step_run
from dlbench.training.instrument import ProfileSession, ProfileSettings


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


def evaluated_step(tmp_path: Path, amp: str, channels_last: bool):
    """Train TinyNet for two steps (the second profiled) as a script would, export it, and decide its
    operations' dtypes and layouts as the evaluation does."""
    from dlbench.onnx.extract import extract_operations
    from dlbench.onnx.opdb import deduplicate
    from dlbench.onnx.step import graph_facts, training_step
    from dlbench.onnx.unfold import load_table as load_unfold_table
    from dlbench.onnx.unfold import unfold_operations

    torch.manual_seed(0)
    model, x, y = TinyNet(), torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model, x = model.to(memory_format=layout), x.contiguous(memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=tmp_path / "profile"))
    for step in range(2):
        with session.batch(step):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    session.finish()
    onnx_path = tmp_path / "tiny.onnx"
    model.eval()
    torch.onnx.export(model, (x,), str(onnx_path), opset_version=17, dynamo=False,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)  # fmt: skip
    facts = json.loads((tmp_path / "profile" / "run_facts.json").read_text())
    extraction = extract_operations(onnx_path, 4, training=True)
    forward = deduplicate(extraction.operations())
    profile, folded = read_step_profile(tmp_path / "profile")
    graph = graph_facts(onnx_path, 4).with_inferred_outputs(extraction.nodes)
    table = load_table()
    step = training_step(forward, unfold_operations(forward, load_unfold_table()), graph, table.training,
                         4, step_run(facts, profile, folded))  # fmt: skip
    return step, operations_as_ran(step.operations, step.passes, profile, table, amp=facts["observed"]["amp"])


def kinds(step, ran) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for op in ran.operations:
        out.setdefault(f"{op.op_type}/{step.pass_of(op.id)}", set()).add((op.dtype, op.memory_format))
    return out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_bfloat16_channels_last_step_is_benchmarked_as_it_ran(tmp_path: Path):
    step, ran = evaluated_step(tmp_path, "bf16", channels_last=True)
    got = kinds(step, ran)
    assert got["Conv/forward"] == {("bfloat16", "channels_last")}
    assert got["Conv/backward_weights"] == {("bfloat16", "channels_last")}
    assert got["Gemm/forward"] == {("bfloat16", "")}
    assert {("bfloat16", "")} <= got["Gemm/backward_a"] | got["Gemm/backward_b"]
    # the batch norm, relu and their gradients ran on the convolution's bfloat16 output, in its layout
    assert got["BatchNormalization/forward"] == {("bfloat16", "channels_last")}
    assert got["Relu/backward"] == {("bfloat16", "channels_last")}
    # autocast ran the loss in float32 (the sweep's own: empty); the optimizer updates the float32 weights
    assert got["SoftmaxCrossEntropyLoss/loss_forward"] == {("", "")}
    assert all(pair == ("", "") for kind, pairs in got.items() if kind.endswith("/optimizer") for pair in pairs)
    sources = dict(zip(ran.table["id"], ran.table["source"], strict=True))
    assert {sources[op.id] for op in ran.operations if op.op_type == "Conv"} == {"profile"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_float32_step_keeps_the_sweeps_default(tmp_path: Path):
    step, ran = evaluated_step(tmp_path, "none", channels_last=False)
    assert ran.operations == step.operations
    assert set(ran.table["dtype"]) == {"float32"} and set(ran.table["memory_format"]) == {"contiguous"}
    assert ran.notes == ()


def test_a_call_computes_in_its_first_floating_input_that_is_not_a_scalar():
    assert call_dtype("[[],[4,10],[4]]", '["float32","bfloat16","int64"]') == "bfloat16"
    assert call_dtype("[[4],[]]", '["int64",""]') == ""
    assert call_dtype("[[]]", '["float16"]') == "float16"

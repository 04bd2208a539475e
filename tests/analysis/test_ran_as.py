"""Each operation of a real profiled step in the dtype and memory format it ran: a small CNN trained under
bfloat16 autocast in channels_last has its convolutions and GEMM benchmarked in bfloat16 (forward and the
backward autograd ran), its loss in float32, its convolutions in channels_last; the float32 twin keeps every
operation at the sweep's default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pytest
import torch
from torch import nn

from dlbench.analysis.match import load_table, match_profile
from dlbench.analysis.ran_as import EMULATED, call_dtype, emulation_notes, step_as_ran
from dlbench.analysis.step_run import read_step_profile, step_run
from dlbench.backends.torch.kernels import KERNELS
from dlbench.backends.torch.params import MEMORY_FORMATS, laid_out_as
from dlbench.training.instrument import ProfileSession, ProfileSettings


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


class Evaluated(NamedTuple):
    step: Any  # the training step before
    ran: Any  # the step as it ran
    table: pd.DataFrame  # ran_as.csv
    profile: pd.DataFrame
    nodes: tuple[Any, ...]  # the extraction's node records
    graph: Any  # its graph facts
    unfolding: Any


def evaluated_step(
    tmp_path: Path, amp: str, channels_last: bool, convert_batches: bool = False, net: type[nn.Module] | None = None,
    input_shape: tuple[int, ...] = (4, 3, 8, 8),
) -> Evaluated:  # fmt: skip
    """Train TinyNet for two steps (the second profiled) as a script would (fp16 with a GradScaler; with
    ``convert_batches``, each NCHW batch converted to channels_last in the step), export it, and make its training
    step as the evaluation does (:class:`Evaluated`)."""
    from dlbench.onnx.extract import extract_operations
    from dlbench.onnx.opdb import deduplicate
    from dlbench.onnx.step import graph_facts, training_step
    from dlbench.onnx.unfold import load_table as load_unfold_table
    from dlbench.onnx.unfold import unfold_operations

    torch.manual_seed(0)
    model, x, y = (net or TinyNet)(), torch.randn(*input_shape), torch.randint(0, 10, (input_shape[0],))
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model, x = model.to(memory_format=layout), x if convert_batches else x.contiguous(memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lower = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler("cpu") if amp == "fp16" else None
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=tmp_path / "profile"))
    for step in range(2):
        with session.batch(step):
            optimizer.zero_grad(set_to_none=True)
            batch = x.to(memory_format=layout) if convert_batches else x
            with torch.autocast("cpu", dtype=lower or torch.float32, enabled=lower is not None):
                loss = nn.functional.cross_entropy(model(batch), y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
    session.finish()
    onnx_path = tmp_path / "tiny.onnx"
    model.eval()
    torch.onnx.export(model, (x.contiguous(memory_format=layout),), str(onnx_path), opset_version=17, dynamo=False,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)  # fmt: skip
    facts = json.loads((tmp_path / "profile" / "run_facts.json").read_text())
    extraction = extract_operations(onnx_path, 4, training=True)
    forward = deduplicate(extraction.operations())
    profile, folded = read_step_profile(tmp_path / "profile")
    graph = graph_facts(onnx_path, 4).with_inferred_outputs(extraction.nodes)
    table = load_table()
    unfolding = unfold_operations(forward, load_unfold_table())
    step = training_step(forward, unfolding, graph, table.training, 4, step_run(facts, profile, folded))
    ran, ran_table = step_as_ran(step, profile, table, facts, "float32", "cpu")
    return Evaluated(step, ran, ran_table, profile, tuple(extraction.nodes), graph, unfolding)


def kinds(step) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for op in step.operations:
        out.setdefault(f"{op.op_type}/{step.pass_of(op.id)}", set()).add((op.dtype, op.memory_format))
    return out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_bfloat16_channels_last_step_is_benchmarked_as_it_ran(tmp_path: Path):
    _, ran, table, profile, *_ = evaluated_step(tmp_path, "bf16", channels_last=True)
    got = kinds(ran)
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
    sources = dict(zip(table["id"], table["source"], strict=True))
    assert {sources[op.id] for op in ran.operations if op.op_type == "Conv"} == {"profile"}
    # the casts autocast inserted: each weight and the input to bfloat16 once per forward, the weights'
    # gradients back to float32; each one operation, its profiled calls matched to it and not framework
    casts = {(op.param_dict["N"] * op.param_dict["C"] * op.param_dict["H"] * op.param_dict["W"], op.dtype,
              op.param_dict["to"]): op.count for op in ran.operations if ran.pass_of(op.id) == "autocast"}  # fmt: skip
    assert casts[(8 * 3 * 3 * 3, "float32", 16)] == 1 and casts[(10 * 512, "float32", 16)] == 1
    assert casts[(4 * 3 * 8 * 8, "float32", 16)] == 1
    assert casts[(8 * 3 * 3 * 3, "bfloat16", 1)] == 1 and casts[(10 * 512, "bfloat16", 1)] == 1
    result = match_profile(profile, ran.operations, ran.passes, load_table())
    copies = result.rows[result.rows["name"] == "aten::copy_"]
    assert set(copies.loc[copies["status"] == "matched", "category"]) == {"Cast/autocast", "Cast/layout"}
    # the one copy within bfloat16: flatten's of the NHWC activations to NCHW, a layout conversion
    assert set(copies.loc[copies["category"] == "Cast/layout", "within"]) == {"aten::flatten"}
    cast_ids = {op.id for op in ran.operations if op.op_type == "Cast"}
    assert all(result.assigned_us.get(i, 0) > 0 for i in cast_ids)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_float16_step_with_a_grad_scaler_has_its_unscale_and_update(tmp_path: Path):
    _, ran, _, profile, *_ = evaluated_step(tmp_path, "fp16", channels_last=False)
    (unscale,) = [op for op in ran.operations if op.op_type == "AmpUnscale"]
    (update,) = [op for op in ran.operations if op.op_type == "AmpUpdateScale"]
    parameters = sum(p.numel() for p in TinyNet().parameters())
    assert unscale.param_dict == {"tensors": 5, "elements": parameters} and unscale.count == 1
    assert ran.pass_of(unscale.id) == ran.pass_of(update.id) == "grad_scaler"
    assert kinds(ran)["Conv/forward"] == {("float16", "")}
    # the loss's scaling: the float32 loss times the scale, and its gradient times the scale in the backward
    (scaling,) = [op for op in ran.operations if op.op_type == "Mul"]
    assert ran.pass_of(scaling.id) == "grad_scaler" and scaling.count == 2 and scaling.dtype == "float32"
    assert {k: v for k, v in scaling.params if k != "mode"} == dict.fromkeys(("N", "C", "H", "W", "N_b", "C_b",
                                                                              "H_b", "W_b"), 1)  # fmt: skip
    result = match_profile(profile, ran.operations, ran.passes, load_table())
    scalar = result.rows[(result.rows["name"] == "aten::mul") & (result.rows["input_shapes"] == "[[],[]]")]
    assert set(scalar["category"]) == {"Mul/grad_scaler"} and result.assigned_us[scaling.id] > 0
    kernel = KERNELS["Mul"](scaling.param_dict, torch.device("cpu"), torch.float32)  # it is benchmarked
    assert torch.equal(kernel(), kernel.inputs[0] * kernel.inputs[1])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_scripts_layout_conversions_are_operations_and_a_kernels_own_are_not(tmp_path: Path):
    _, ran, table, profile, *_ = evaluated_step(tmp_path, "none", channels_last=True, convert_batches=True)
    conversions = {(tuple(op.param_dict[d] for d in "NCHW"), op.dtype, op.memory_format): op.count
                   for op in ran.operations if ran.pass_of(op.id) == "layout"}  # fmt: skip
    # the script converts each NCHW batch into channels_last, and flatten (a framework call, no benchmark of its
    # own) copies the NHWC activations to NCHW: one conversion each per step
    assert conversions == {((4, 3, 8, 8), "float32", "channels_last"): 1, ((4, 8, 8, 8), "float32", "contiguous"): 1}
    ids = {op.memory_format: op.id for op in ran.operations if ran.pass_of(op.id) == "layout"}
    assert {dict(zip(table["id"], table["memory_format"], strict=True))[i] for i in ids.values()} == set(ids)
    result = match_profile(profile, ran.operations, ran.passes, load_table())
    assert all(result.assigned_us.get(i, 0) > 0 for i in ids.values())
    copies = result.rows[result.rows["name"] == "aten::copy_"]
    converted = copies[copies["category"] == "Cast/layout"]
    assert set(converted["within"]) == {"", "aten::flatten"}
    # a copy convolution_backward's kernel makes (its weight gradient into the weight's layout, on this PyTorch)
    # is the Conv operation's, timed by its benchmark: never a layout operation
    assert "aten::convolution_backward" not in set(converted["within"])
    for op in ran.operations:
        if ran.pass_of(op.id) == "layout":  # benchmarked as it ran: from the other format into its own
            with laid_out_as(op.memory_format):
                timed = KERNELS["Cast"](op.param_dict, torch.device("cpu"), torch.float32)
            assert not timed.inputs[0].is_contiguous(memory_format=MEMORY_FORMATS[op.memory_format])
            assert timed().is_contiguous(memory_format=MEMORY_FORMATS[op.memory_format])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_autocast_step_has_its_one_loss_once_though_autocast_records_it_twice(tmp_path: Path):
    # the script computes one cross entropy per step; the profile has it as called (bfloat16 logits) and
    # re-dispatched on their float32 cast: one loss, forward and backward, each once per step (it had been two)
    _, ran, *_ = evaluated_step(tmp_path, "bf16", channels_last=False)
    losses = [(ran.pass_of(op.id), op.count) for op in ran.operations if op.op_type == "SoftmaxCrossEntropyLoss"]
    assert sorted(losses) == [("loss_backward", 1), ("loss_forward", 1)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_float32_step_keeps_the_sweeps_default(tmp_path: Path):
    step, ran, table, *_ = evaluated_step(tmp_path, "none", channels_last=False)
    assert ran.operations == step.operations
    assert set(table["dtype"]) == {"float32"} and set(table["memory_format"]) == {"contiguous"}
    assert ran.notes == step.notes


def test_a_call_computes_in_its_first_floating_input_that_is_not_a_scalar():
    assert call_dtype("[[],[4,10],[4]]", '["float32","bfloat16","int64"]') == "bfloat16"
    assert call_dtype("[[4],[]]", '["int64",""]') == ""
    assert call_dtype("[[]]", '["float16"]') == "float16"


def test_a_dtype_the_cpu_has_no_instructions_for_is_said_in_one_line():
    from dlbench.backends.torch.peaks import emulation

    table = pd.DataFrame({"dtype": ["bfloat16", "bfloat16", "float32"]})
    notes = emulation_notes(table, "float32", "cpu")
    missing = emulation("bfloat16", "cpu")  # empty on a CPU with avx512_bf16 or AMX
    assert notes == ([f"{EMULATED}2 operation(s) ran in bfloat16 and are benchmarked in it, as they ran: {missing}"]
                     if missing else [])  # fmt: skip


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_autocasts_own_dispatch_of_the_loss_does_not_decide_its_dtype_however_long_it_took(tmp_path: Path):
    # autocast records cross_entropy_loss twice: as called, on the bfloat16 logits, and re-dispatched on their
    # float32 cast. On another machine the first once took more of the loss's time and the loss came out in
    # bfloat16; the times are the machine's, so here they are made so
    step, _, _, profile, *_ = evaluated_step(tmp_path, "bf16", channels_last=False)
    wrapper = (profile["name"] == "aten::cross_entropy_loss") & profile["input_types"].str.contains("bfloat16")
    assert wrapper.sum() == 1
    profile.loc[wrapper, "time_us"] *= 1000.0
    facts = json.loads((tmp_path / "profile" / "run_facts.json").read_text())
    ran, _ = step_as_ran(step, profile, load_table(), facts, "float32", "cpu")
    assert kinds(ran)["SoftmaxCrossEntropyLoss/loss_forward"] == {("", "")}
    assert kinds(ran)["Gemm/forward"] == {("bfloat16", "")}

"""A GPT-like transformer's real profile matched to its training step: the backward operators of its glue
(gelu_backward, embedding_dense_backward, the bias gradients' sums, the scaled scores' div) are counted under
the backward passes the unfold table derives, never under a forward one; a pass the step lacks is named as not
predicted with its share of the profiled step."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import REPO

from dlbench.analysis.match import load_table, match_profile, profile_per_step
from dlbench.analysis.predict import not_predicted_frame, not_predicted_notes, prediction_frame, prediction_metrics
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.onnx.unfold import load_table as load_unfold_table
from dlbench.onnx.unfold import unfold_operations
from dlbench.training.instrument import ProfileSession, ProfileSettings

BATCH, SEQ, VOCAB, DIM = 2, 16, 64, 32


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """TrainingBenchmarks/transformer_lm.py's TinyGPT, small: two steps trained, the second profiled, and the
    network exported as the evaluation exports it."""
    folder = tmp_path_factory.mktemp("gpt")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "TrainingBenchmarks"))
        from transformer_lm import TinyGPT, lm_loss, synthetic_tokens

        sys.modules.pop("transformer_lm", None)
    torch.manual_seed(0)
    model = TinyGPT(VOCAB, SEQ, DIM, 1, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ((tokens, targets),) = synthetic_tokens(1, BATCH, SEQ, VOCAB, torch.device("cpu"), 0)
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=folder / "profile"))
    for step in range(2):
        with session.batch(step):
            optimizer.zero_grad(set_to_none=True)
            lm_loss(model(tokens), targets).backward()
            optimizer.step()
    session.finish()
    onnx_path = folder / "gpt.onnx"
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (tokens,), str(onnx_path), opset_version=17, dynamo=False,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)  # fmt: skip
    return folder / "profile", onnx_path


def matched_step(gpt: tuple[Path, Path], unfold_table=None):
    profile_dir, onnx_path = gpt
    extraction = extract_operations(onnx_path, BATCH)
    forward = deduplicate(extraction.operations())
    facts = graph_facts(onnx_path, BATCH).with_inferred_outputs(extraction.nodes)
    step = training_step(forward, unfold_operations(forward, unfold_table or load_unfold_table()), facts,
                         load_table().training)  # fmt: skip
    return step, match_profile(profile_per_step(profile_dir), step.operations, step.passes, load_table())


def categories(result, name: str) -> set[str]:
    rows = result.rows[result.rows["name"] == name]
    return set(rows["category"])


def test_the_glue_backward_operators_count_under_backward_passes_never_a_forward_one(gpt):
    step, result = matched_step(gpt)
    assert categories(result, "aten::gelu_backward") == {"Erf/backward"}
    assert categories(result, "aten::embedding_dense_backward") == {"Gather/backward"}
    assert categories(result, "aten::_softmax_backward_data") == {"Softmax/backward"}
    matched = result.rows[result.rows["status"] == "matched"]
    backward_calls = matched[matched["name"].str.contains("backward")]
    assert not backward_calls.empty
    assert not backward_calls["category"].str.endswith("/forward").any(), backward_calls.to_string()
    # the bias gradients of the Linear layers (aten::sum in AddmmBackward0) go to the ReduceSum problems the
    # Add rules derive; the scores' division by a constant runs one div per backward (its numerator's)
    reduce_sum = {step.pass_of(op.id) for op in step.operations if op.op_type == "ReduceSum"}
    assert reduce_sum and reduce_sum <= {"backward_a", "backward_b"}
    sums = result.rows[result.rows["name"] == "aten::sum"]
    assert sums["status"].eq("matched").any()
    summed_to = {int(i) for ids in sums["operations"] for i in str(ids).split(";") if i}
    assert {step.pass_of(i) for i in summed_to} <= {"backward_a", "backward_b"}
    div_passes = sorted(step.pass_of(op.id) for op in step.operations if op.op_type == "Div")
    assert "backward_a" in div_passes and "backward_b" not in div_passes  # the divisor is a constant
    assert result.total_us("not_predicted") == 0


def test_a_backward_pass_the_step_lacks_is_not_predicted_with_its_share_of_the_step(gpt):
    kept = {t: [_raw(r) for r in rules] for t, rules in load_unfold_table().rules.items()}
    table = load_unfold_table({"strategies": {**kept, "Erf": [], "Gather": []}})
    step, result = matched_step(gpt, table)
    assert categories(result, "aten::gelu_backward") == {"Erf/backward"}
    for name in ("aten::gelu_backward", "aten::embedding_dense_backward"):
        assert set(result.rows.loc[result.rows["name"] == name, "status"]) == {"not_predicted"}
    frame = prediction_frame(step, {}, {}, result.assigned_us)
    frame["status"] = "ok"  # as if every operation had a benchmark: only the missing passes are left out
    profiled_ms = result.total_us() / 1e3
    table_out = not_predicted_frame(frame, result, profiled_ms)
    assert {"aten::gelu_backward", "aten::embedding_dense_backward"} <= set(table_out["aten_op"])
    gelu = table_out[table_out["aten_op"] == "aten::gelu_backward"].iloc[0]
    expected = result.rows.loc[result.rows["name"] == "aten::gelu_backward", "time_us"].sum() / 1e3
    assert gelu["ms"] == pytest.approx(expected) and gelu["share_pct"] == pytest.approx(100 * expected / profiled_ms)
    metrics = prediction_metrics(frame, result, 1.0, profiled_ms)
    assert metrics["not_predicted_time_pct"] == pytest.approx(table_out["share_pct"].sum())
    assert metrics["not_predicted_passes_time_pct"] == pytest.approx(metrics["not_predicted_time_pct"])
    (note,) = not_predicted_notes(table_out)
    assert "aten::gelu_backward (Erf backward)" in note


def _raw(rule) -> dict:
    """A parsed rule back as table data."""
    raw: dict = {"pass": rule.pass_name, "input": rule.input}
    if rule.when is not None:
        raw["when"] = rule.when.text
    if rule.assignments:
        raw["set"] = {d: e.text for d, e in rule.assignments}
    if rule.derived_op_type != rule.op_type:
        raw["op_type"] = rule.derived_op_type
    if rule.kind == "free":
        raw.update(cost="none", why=rule.why)
    elif rule.kind == "not_predicted":
        raw.update(predicted=False, why=rule.why)
    return raw


def test_time_of_operations_without_a_measurement_is_not_predicted_by_operator_and_pass(gpt):
    step, result = matched_step(gpt)
    frame = prediction_frame(step, {}, {}, result.assigned_us)  # nothing measured: status "no benchmark"
    profiled_ms = result.total_us() / 1e3
    table = not_predicted_frame(frame, result, profiled_ms)
    assert table["ms"].sum() == pytest.approx(sum(result.assigned_us.values()) / 1e3)
    assert set(table["reason"]) == {"no benchmark measurement (no benchmark)"}
    gelu = table[table["aten_op"] == "aten::gelu_backward"]
    assert list(zip(gelu["op_type"], gelu["pass"], strict=True)) == [("Erf", "backward")]
    assert prediction_metrics(frame, result, 1.0, profiled_ms)["not_predicted_passes_time_pct"] == 0

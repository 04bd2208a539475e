"""task=evaluate on the GPT-like transformer benchmark: the backward passes of its glue (GELU, the embeddings'
Gather, the attention's Div and Where, the Linear biases' sums) are benchmarked and predicted, passes that cost
nothing are declared so, and what the prediction leaves out is named with its share of the profiled step."""

from __future__ import annotations

from io import StringIO

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

SMALL = ("steps=8", "profile.warmup=3", "profile.batches=2", "batch_size=2", "threads=1", "evaluate.bracket=false")


def table(store: Store, run_id: str, name: str) -> pd.DataFrame:
    return pd.read_csv(StringIO(artifact_text(store, run_id, name)))


# ~40 s on a quiet 2-core machine (training, 60 operations benchmarked), minutes when it is busy
@pytest.mark.slow
def test_evaluating_the_transformer_predicts_its_glue_backward_passes_and_names_what_it_leaves_out(tmp_path, store):
    result = run_dlbench(
        "+benchmark=transformer_lm", "task=evaluate", *SMALL, *FAST, cwd=tmp_path, store=store, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    run_id = run.info.run_id
    operations = table(store, run_id, "operations.csv")
    backward = operations[~operations["pass"].isin(["forward", "optimizer", "loss_forward", "loss_backward"])]
    passes = set(zip(backward["op_type"], backward["pass"], strict=True))
    for expected in [("Gelu", "backward"), ("Gather", "backward"), ("Div", "backward_a"), ("Where", "backward_c"),
                     ("ReduceSum", "backward_a"), ("Split", "backward"), ("Transpose", "backward"),
                     ("Softmax", "backward")]:  # fmt: skip
        assert expected in passes, f"{expected} not in the training step: {sorted(passes)}"
    # the divisor and the mask's fill value are constants: their gradients are not computed, nor predicted
    assert ("Div", "backward_b") not in passes and ("Where", "backward_b") not in passes
    assert "Add" not in set(backward["op_type"])  # the gradient passes through (declared free)
    # PyTorch's GELU ran: each exported Div-Erf-Add-Mul-Mul is one Gelu operation, forward and backward
    assert not {"Erf", "Mul"} & set(operations["op_type"])
    glue = backward[~backward["op_type"].isin(["MatMul", "Gemm", "LayerNormalization", "Softmax"])]
    assert glue["status"].isin(["ok", "unstable"]).all(), glue[["op_type", "pass", "status", "error"]].to_string()
    assert (glue["predicted_ms"] > 0).all()
    terms = table(store, run_id, "prediction_terms.csv").set_index("term")["ms"]
    assert terms["backward"] == pytest.approx(backward["predicted_ms"].sum(), rel=1e-6)
    # profiled backward operators are counted under the backward passes, not under the forward ones
    matching = table(store, run_id, "profile_matching.csv")
    gelu = matching[matching["name"] == "aten::gelu_backward"]
    assert set(gelu["category"]) == {"Gelu/backward"} and set(gelu["status"]) == {"matched"}
    gelu_backward = operations[(operations["op_type"] == "Gelu") & (operations["pass"] == "backward")]
    assert gelu_backward["in_training_ms"].sum() > 0
    # what the prediction leaves out: a metric, a table and a note
    metrics = run.data.metrics
    not_predicted = table(store, run_id, "not_predicted.csv")
    assert list(not_predicted.columns) == ["aten_op", "op_type", "pass", "ms", "share_pct", "reason"]
    assert metrics["not_predicted_time_pct"] == pytest.approx(not_predicted["share_pct"].sum(), abs=1e-3)
    notes = artifact_text(store, run_id, "notes.txt")
    assert ("not predicted (" in notes) == (len(not_predicted) > 0)
    assert "Add backward_a of" in notes and "costs nothing" in notes
    assert "pruned: no gradient needed" in notes and "GELU: 2 exported Div-Erf-Add-Mul-Mul" in notes

"""How a served model's engines are summed up: onnxruntime from the nodes its session runs (the original-node
figure kept beside it), and every engine that cannot be predicted or measured named with its reason."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlbench.analysis.inference import engine_problems, session_prediction, with_session_prediction
from dlbench.core.values import TimeStats


def table(torch_terms: list[float]) -> pd.DataFrame:
    return pd.DataFrame({
        "op_type": ["MatMul", "Mod"][: len(torch_terms)], "count": [1] * len(torch_terms),
        "torch_term_ms": torch_terms, "torch_status": ["ok", "unserved"][: len(torch_terms)],
        "torch_note": ["", "no benchmark of this engine serves it"][: len(torch_terms)],
        "onnxruntime_term_ms": [1.0] * len(torch_terms), "onnxruntime_status": ["ok"] * len(torch_terms),
        "onnxruntime_note": [""] * len(torch_terms),
    })  # fmt: skip


def test_an_engine_is_named_with_each_reason_it_cannot_be_evaluated() -> None:
    problems = engine_problems(table([0.5, math.nan]), {}, {"torch": "onnx2torch has no converter for Mod"})
    assert set(problems) == {"torch"}  # onnxruntime was predicted completely and measured
    assert "1 operations without a benchmark time (Mod" in problems["torch"]
    assert "not measured end to end: onnx2torch has no converter for Mod" in problems["torch"]
    failed = engine_problems(table([0.5]), {"onnxruntime": "the executable died"}, {})
    assert failed == {"onnxruntime": "operator benchmarks failed: the executable died"}


def test_the_session_prediction_sums_its_nodes_and_pays_the_session_run_once() -> None:
    nodes = [{"domain": "com.microsoft.nchwc", "op_type": "Conv", "count": "2", "median_ms": "1.0"},
             {"domain": "", "op_type": "Gemm", "count": "1", "median_ms": "0.5"}]  # fmt: skip
    facts = {"probes": {"onnxruntime_run_ms": 0.1, "onnxruntime_node_ms": 0.02}}
    result = session_prediction(nodes, facts, TimeStats(median_ms=2.6))
    # three one-node sessions each paid 0.08 ms of fixed cost; the model's session pays it once
    assert result["predicted_ms"] == pytest.approx(2.0 + 0.5 - 2 * 0.08)
    assert result["error_pct"] == pytest.approx(100 * (2.34 - 2.6) / 2.6)
    assert result["term/nchwc.Conv_ms"] == 2.0 and result["nodes"] == 3
    partial = session_prediction([*nodes, {"domain": "", "op_type": "Mod", "count": "1", "median_ms": ""}], facts, None)
    assert "predicted_ms" not in partial and partial["nodes_missing"] == 1


def test_the_original_node_prediction_stays_as_the_second_figure() -> None:
    metrics = {"engine/onnxruntime/predicted_ms": 3.0, "engine/onnxruntime/error_pct": 15.0,
               "engine/torch/predicted_ms": 4.0}  # fmt: skip
    summary = pd.DataFrame([{"engine": "onnxruntime", "predicted_ms": 3.0, "error_pct": 15.0, "complete": True},
                            {"engine": "torch", "predicted_ms": 4.0, "error_pct": 1.0, "complete": True}])  # fmt: skip
    session = {"predicted_ms": 2.5, "error_pct": -4.0, "term/nchwc.Conv_ms": 2.4, "overhead/session_runs_ms": -0.1}
    out, frame = with_session_prediction(metrics, summary, session)
    assert out["engine/onnxruntime/predicted_ms"] == 2.5 and out["engine/onnxruntime/error_pct"] == -4.0
    assert out["engine/onnxruntime/original_nodes/predicted_ms"] == 3.0
    assert out["engine/onnxruntime/original_nodes/error_pct"] == 15.0
    assert out["engine/onnxruntime/session/term/nchwc.Conv_ms"] == 2.4 and out["engine/torch/predicted_ms"] == 4.0
    ort = frame[frame["engine"] == "onnxruntime"].iloc[0]
    assert ort["predicted_ms"] == 2.5 and ort["original_nodes_ms"] == 3.0 and ort["original_nodes_error_pct"] == 15.0
    assert pd.isna(frame[frame["engine"] == "torch"].iloc[0]["original_nodes_ms"])

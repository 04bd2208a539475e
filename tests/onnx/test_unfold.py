"""Training unfolding from the strategy table: backward problems of each forward operation, the GEMM rules
checked against torch autograd, and the table read as data."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from onnx_models import exported

from dlbench.core.values import Operation
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.unfold import DEFAULT_TABLE, UnfoldError, load_table, unfold_operations


def gemm(m: int, k: int, n: int, trans_a: int, trans_b: int, batch: int = 1, op_type: str = "Gemm") -> Operation:
    params = (("M", m), ("K", k), ("N", n), ("transA", trans_a), ("transB", trans_b), ("batch", batch))
    return Operation(id=0, op_type=op_type, params=params, nodes=("node_a", "node_b"), count=2)


def stored(rows: int, cols: int, transposed: int) -> tuple[int, int]:
    return (cols, rows) if transposed else (rows, cols)


def run_gemm(derived: dict, operands: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every way of feeding two of the operands to the derived GEMM whose stored shapes fit its flags."""
    m, k, n = derived["M"], derived["K"], derived["N"]
    results = []
    for x, y in itertools.permutations(operands.values(), 2):
        if tuple(x.shape) == stored(m, k, derived["transA"]) and tuple(y.shape) == stored(k, n, derived["transB"]):
            op_x = x.T if derived["transA"] else x
            op_y = y.T if derived["transB"] else y
            results.append(op_x @ op_y)
    return results


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_backward_problems_compute_the_autograd_gradients(trans_a: int, trans_b: int):
    m, k, n = 3, 5, 7
    torch.manual_seed(0)
    a = torch.randn(*stored(m, k, trans_a), dtype=torch.float64, requires_grad=True)
    b = torch.randn(*stored(k, n, trans_b), dtype=torch.float64, requires_grad=True)
    c = (a.T if trans_a else a) @ (b.T if trans_b else b)
    grad_c = torch.randn_like(c)
    c.backward(grad_c)

    unfolded = unfold_operations([gemm(m, k, n, trans_a, trans_b)], load_table())
    derived = {unfolded.pass_of(op.id): op for op in unfolded.operations[1:]}
    assert set(derived) == {"backward_a", "backward_b"}
    operands = {"dC": grad_c, "A": a.detach(), "B": b.detach()}
    for name, expected in (("backward_a", a.grad), ("backward_b", b.grad)):
        problem = derived[name].param_dict
        candidates = run_gemm(problem, operands)
        assert any(torch.allclose(r, expected) for r in candidates), (name, problem)
        assert derived[name].nodes == ("node_a", "node_b") and derived[name].count == 2
        assert unfolded.sources[derived[name].id] == (0, name)


def test_batched_matmul_keeps_its_batch_in_the_backward_problems():
    unfolded = unfold_operations([gemm(16, 8, 16, 0, 0, batch=128, op_type="MatMul")], load_table())
    assert [op.op_type for op in unfolded.operations] == ["MatMul"] * 3
    assert {op.param_dict["batch"] for op in unfolded.operations} == {128}
    assert unfolded.operations[1].param_dict["K"] == 16 and unfolded.operations[1].param_dict["N"] == 8


def test_resnet_unfolds_convolutions_into_backward_data_and_weights():
    forward = deduplicate(extract_operations(exported("resnet"), 8).operations())
    unfolded = unfold_operations(forward, load_table())
    by_pass: dict[str, list[Operation]] = {}
    for op in unfolded.operations:
        by_pass.setdefault(f"{op.op_type}:{unfolded.pass_of(op.id)}", []).append(op)
    convs = by_pass["Conv:forward"]
    assert len(by_pass["Conv:backward_data"]) == len(by_pass["Conv:backward_weights"]) == len(convs)
    for conv, data, weights in zip(convs, by_pass["Conv:backward_data"], by_pass["Conv:backward_weights"], strict=True):
        assert data.param_dict == {**conv.param_dict, "mode": 1}
        assert weights.param_dict == {**conv.param_dict, "mode": 2}
        assert data.nodes == conv.nodes and data.count == conv.count
        assert data.flops == conv.flops  # same multiply-adds as the forward convolution
    for op_type in ("BatchNormalization", "Relu", "MaxPool", "GlobalAveragePool"):
        backward = by_pass[f"{op_type}:backward"]
        assert [op.param_dict["mode"] for op in backward] == [1] * len(by_pass[f"{op_type}:forward"])
    assert "Add:backward" not in by_pass and "Flatten:backward" not in by_pass
    assert len(by_pass["Gemm:backward_a"]) == len(by_pass["Gemm:backward_b"]) == 1


def test_encoder_softmax_and_layernorm_get_backward_modes():
    forward = deduplicate(extract_operations(exported("encoder"), 4).operations())
    unfolded = unfold_operations(forward, load_table())
    backward = [op for op in unfolded.operations if unfolded.pass_of(op.id) == "backward"]
    assert {"Softmax", "LayerNormalization", "Relu"} <= {op.op_type for op in backward}
    assert all(op.param_dict["mode"] == 1 for op in backward)
    matmuls = [op for op in unfolded.operations if op.op_type == "MatMul"]
    assert len(matmuls) == 3 * len([op for op in forward if op.op_type == "MatMul"])


def test_the_table_is_data_a_new_rule_changes_the_result(tmp_path: Path):
    table = tmp_path / "table.yaml"
    table.write_text(
        "strategies:\n"
        "  Relu:\n"
        "    - {pass: twice_as_wide, when: W < 100, set: {W: W * 2, mode: 1}}\n"
        "    - {pass: as_add, op_type: Add, set: {mode: 0}}\n"
    )
    op = Operation(id=4, op_type="Relu", params=(("N", 1), ("C", 1), ("H", 2), ("W", 8), ("mode", 0)))
    unfolded = unfold_operations([op], load_table(table))
    assert [(o.op_type, o.param_dict["W"], o.param_dict["mode"]) for o in unfolded.operations] == [
        ("Relu", 8, 0),
        ("Relu", 16, 1),
        ("Add", 8, 0),
    ]
    assert unfolded.sources == {5: (4, "twice_as_wide"), 6: (4, "as_add")}


def test_a_hydra_config_node_is_accepted_as_the_table():
    config = OmegaConf.load(DEFAULT_TABLE)
    assert load_table(config).rules.keys() == load_table().rules.keys()


@pytest.mark.parametrize(
    "text,message",
    [
        ("rules: {}\n", "top-level 'strategies'"),
        ("strategies:\n  Relu: {pass: x}\n", r"strategies\.Relu must be a list"),
        ("strategies:\n  Relu:\n    - {pass: x, sett: {mode: 1}}\n", r"strategies\.Relu\[0\]: unknown key\(s\) sett"),
        ("strategies:\n  Relu:\n    - {set: {mode: 1}}\n", r"strategies\.Relu\[0\]: 'pass'"),
        ("strategies:\n  Relu:\n    - {pass: x, set: {mode: 'W +'}}\n", r"Relu\[0\]\.set\.mode: cannot parse"),
        (
            "strategies:\n  Relu:\n    - {pass: x, set: {mode: \"__import__('os')\"}}\n",
            r"Relu\[0\]\.set\.mode: Call is not allowed",
        ),
        ("strategies:\n  Relu:\n    - {pass: x, when: 'W.real', set: {}}\n", r"Relu\[0\]\.when: Attribute is not"),
        ("strategies: [\n", "not valid YAML"),
    ],
)
def test_bad_tables_are_named_with_the_file_and_rule(text: str, message: str, tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UnfoldError, match=message) as caught:
        load_table(path)
    assert "bad.yaml" in str(caught.value)


def test_a_rule_setting_a_descriptor_the_operation_lacks_is_an_error(tmp_path: Path):
    path = tmp_path / "table.yaml"
    path.write_text("strategies:\n  Relu:\n    - {pass: odd, set: {alpha: 2}}\n")
    op = Operation(id=0, op_type="Relu", params=(("N", 1), ("C", 1), ("H", 2), ("W", 8), ("mode", 0)))
    with pytest.raises(UnfoldError, match=r"table\.yaml: operation 0 .*odd: sets alpha, which the operation"):
        unfold_operations([op], load_table(path))


def test_the_shipped_table_covers_the_canonical_operators():
    table = load_table()
    assert {r.pass_name for r in table.rules_for("Conv")} == {"backward_data", "backward_weights"}
    assert {r.pass_name for r in table.rules_for("Add")} == {"backward_a", "backward_b"}
    for op_type in ("BatchNormalization", "Relu", "GlobalAveragePool", "MaxPool", "AveragePool", "Softmax"):
        assert [r.pass_name for r in table.rules_for(op_type)] == ["backward"]

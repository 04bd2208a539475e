"""The backward passes of the glue operators in the shipped unfold table: every op type the embedded torch backend
serves forward is listed (its backward problems, a pass declared free or not predicted), but those whose output
has no gradient (core/glue.py NO_GRADIENT), and on real Hugging Face transformers every derived problem is one the
torch kernels run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlbench.backends.torch import kernels as tk
from dlbench.core.descriptors import AMP, LOSSES, OPTIMIZERS
from dlbench.core.glue import NO_GRADIENT, NON_DIFFERENTIABLE
from dlbench.core.values import Operation
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import deduplicate
from dlbench.onnx.step import graph_facts, training_step
from dlbench.onnx.unfold import FREE, UnfoldError, declared_notes, load_table, unfold_operations

#: op types of the torch backend that are training operations or microbenchmarks, not ONNX operators
NOT_ONNX = {*OPTIMIZERS, *LOSSES, *AMP, "SoftmaxCrossEntropyLoss", "FrameworkOverhead"}  # AMP: GradScaler steps


def test_every_op_type_the_torch_backend_serves_forward_has_its_backward_declared():
    table = load_table()
    for op_type in sorted(set(tk.KERNELS) - NOT_ONNX):
        rules = table.rules_for(op_type)
        if op_type in NO_GRADIENT:
            assert rules == (), f"{op_type} gives booleans: no gradient"
        else:
            assert rules, f"{op_type} has a gradient: list its backward pass(es) in conf/unfold/default.yaml"
        for rule in rules:
            assert rule.kind == "derived" or rule.why, f"{op_type}/{rule.pass_name}: a declared pass says why"


def op(op_type: str, **params: int) -> Operation:
    return Operation(id=0, op_type=op_type, params=tuple(params.items()), nodes=("n",), count=3)


def test_a_broadcast_operands_gradient_is_a_sum_and_a_full_one_passes_through_for_free():
    bias_add = op("Add", N=1, C=1, H=1, W=8, N_b=2, C_b=4, H_b=5, W_b=8)
    unfolded = unfold_operations([bias_add], load_table())
    (reduce,) = unfolded.operations[1:]
    assert reduce.op_type == "ReduceSum" and unfolded.pass_of(reduce.id) == "backward_a"
    assert reduce.param_dict == dict(N=2, C=4, H=5, W=8, reduce_N=1, reduce_C=1, reduce_H=1, reduce_W=0, mode=0)
    assert unfolded.input_of(reduce.id) == 0 and reduce.count == 3
    (free,) = unfolded.declared
    assert (free.pass_name, free.kind, free.input) == ("backward_b", FREE, 1)
    x = torch.randn(2, 4, 5, 8, requires_grad=True)
    bias = torch.randn(1, 1, 1, 8, requires_grad=True)
    grad = torch.randn(2, 4, 5, 8)
    (bias + x).backward(grad)
    torch.testing.assert_close(bias.grad, grad.sum((0, 1, 2), keepdim=True))  # the problem the rule derives
    torch.testing.assert_close(x.grad, grad)  # passed through
    (note,) = declared_notes(unfolded.declared)
    assert note.startswith("Add backward_b of 3 node(s) costs nothing: the gradient passes through")


def test_a_product_differentiates_each_input_alone_so_a_constant_one_can_be_pruned():
    unfolded = unfold_operations([op("Mul", N=1, C=2, H=3, W=4, N_b=1, C_b=1, H_b=1, W_b=1, mode=0)], load_table())
    derived = {unfolded.pass_of(o.id): (o.param_dict["mode"], unfolded.input_of(o.id)) for o in unfolded.operations[1:]}
    assert derived == {"backward_a": (3, 0), "backward_b": (4, 1)}


def test_a_pass_that_derives_nothing_must_say_why(tmp_path: Path):
    path = tmp_path / "t.yaml"
    path.write_text("strategies:\n  Relu:\n    - {pass: backward, cost: none}\n")
    with pytest.raises(UnfoldError, match=r"Relu\[0\]: say why the pass costs nothing"):
        load_table(path)
    path.write_text("strategies:\n  Relu:\n    - {pass: backward, predicted: false, set: {mode: 1}, why: x}\n")
    with pytest.raises(UnfoldError, match="derives no problem has no 'set'"):
        load_table(path)
    path.write_text("strategies:\n  Relu:\n    - {pass: backward, predicted: false, why: a fused kernel}\n")
    unfolded = unfold_operations([op("Relu", N=1, C=1, H=2, W=2, mode=0)], load_table(path))
    assert unfolded.operations[1:] == () and [d.kind for d in unfolded.declared] == ["not_predicted"]
    assert "NOT PREDICTED" in declared_notes(unfolded.declared)[0]


@pytest.fixture(scope="module")
def transformers_onnx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("transformers")
    from hf_models import export_transformer

    folder = tmp_path_factory.mktemp("hf")
    return {name: export_transformer(name, folder / f"{name}.onnx") for name in ("gpt2", "bert")}


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_every_backward_problem_of_a_transformer_runs_on_the_torch_kernels(transformers_onnx, name: str):
    path = transformers_onnx[name]
    extraction = extract_operations(path, 2, dims={"seq": 8})
    forward = deduplicate(extraction.operations())
    unfolded = unfold_operations(forward, load_table())
    step = training_step(forward, unfolded, graph_facts(path, 2), {"loss": {"enabled": False}})
    # every forward operation of a differentiable op type has its backward: derived problems or declared passes
    by_id = {o.id: o for o in forward}
    with_backward = {by_id[source].op_type for source, _ in unfolded.sources.values()}
    with_backward |= {d.op_type for d in unfolded.declared}
    float_casts = {o.op_type for o in forward if o.op_type == "Cast" and o.param_dict["to"] in (1, 10, 11, 16)}
    differentiable = {o.op_type for o in forward if o.op_type in tk.KERNELS and o.op_type != "Cast"}
    assert differentiable - set(NON_DIFFERENTIABLE) | float_casts <= with_backward
    # what the step keeps (inputs that need a gradient) runs on the torch kernels as derived
    backward = [o for o in step.operations if step.pass_of(o.id) not in ("forward", "optimizer")]
    assert {"Mul", "Where", "Gather"} <= {o.op_type for o in backward}
    for operation in backward:
        timed = tk.KERNELS[operation.op_type](operation.param_dict, torch.device("cpu"), torch.float32)
        timed()  # the kernel accepts the problem the table derives, and runs it
    notes = "\n".join(step.notes)
    assert "costs nothing" in notes and "pruned: no gradient needed" in notes

"""Operations benchmarked as they ran. Where as ``masked_fill`` runs it: ONNX writes ``t.masked_fill(mask, value)``
as ``Where(mask, value, t)``, and PyTorch fills the tensor in place (``masked_fill_``, forward and in
MaskedFillBackward0), which the benchmark times, not an out-of-place ``torch.where`` over three operands. DDP's
gradient copies: a Mul into a view of a bucket that outlives the calls, not a fresh output per call."""

from __future__ import annotations

import torch
from torch.profiler import profile

from dlbench.backends.torch import kernels
from dlbench.core.costs import operation_cost
from dlbench.core.glue import BUCKET_VIEW_MODE
from dlbench.operators.collectives import gradient_copy_operations

CPU, F32 = torch.device("cpu"), torch.float32
MASK = {"N": 1, "C": 1, "H": 16, "W": 16}
FULL = {"N_c": 4, "C_c": 2, "H_c": 16, "W_c": 16}
SCALAR = {"N_b": 1, "C_b": 1, "H_b": 1, "W_b": 1}


def aten_calls(run) -> set[str]:
    run()
    with profile() as prof:
        run()
    return {e.name for e in prof.events() if e.name.startswith("aten::")}


def test_a_where_with_a_scalar_value_is_timed_as_an_in_place_masked_fill() -> None:
    timed = kernels.KERNELS["Where"]({**MASK, **SCALAR, **FULL, "mode": 0}, CPU, F32)
    condition, value, tensor = (t.clone() for t in timed.inputs)
    got = timed()
    torch.testing.assert_close(got, torch.where(condition, value, tensor))
    calls = aten_calls(timed)
    assert "aten::masked_fill_" in calls and "aten::where" not in calls


def test_its_backward_zeroes_the_incoming_gradient_in_place_where_the_mask_is_set() -> None:
    timed = kernels.KERNELS["Where"]({**MASK, **SCALAR, **FULL, "mode": 5}, CPU, F32)  # the tensor's gradient
    incoming = timed.grad_outputs[0].clone()
    (got,) = timed()
    condition, value, tensor = timed.inputs
    leaf = tensor.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(tensor.new_zeros(()) + torch.where(condition, value, leaf), [leaf], incoming)
    torch.testing.assert_close(got, expected)
    assert got.data_ptr() == timed.grad_outputs[0].data_ptr(), "in place"
    assert "aten::masked_fill_" in aten_calls(timed)


def test_a_where_of_two_tensors_stays_torch_where() -> None:
    both = {**MASK, **{k: v for k, v in zip(SCALAR, FULL.values(), strict=True)}, **FULL, "mode": 0}
    timed = kernels.KERNELS["Where"](both, CPU, F32)
    assert "aten::where" in aten_calls(timed)


def test_a_gradient_copy_writes_into_the_same_bucket_view_every_call() -> None:
    (op,) = gradient_copy_operations([1000])
    assert op.param_dict["mode"] == BUCKET_VIEW_MODE
    timed = kernels.KERNELS["Mul"](op.param_dict, CPU, F32)
    gradient, scale = timed.inputs
    first, second = timed(), timed()
    torch.testing.assert_close(first, gradient * scale)
    assert first.data_ptr() == second.data_ptr(), "no fresh output: the bucket's view"
    bucket = first.untyped_storage()
    assert bucket.nbytes() > first.numel() * 4 and first.data_ptr() > bucket.data_ptr(), "a slice inside a bucket"
    assert "aten::mul" in aten_calls(timed) and "aten::empty" not in aten_calls(timed)
    forward = {**op.param_dict, "mode": 0}
    assert operation_cost("Mul", op.param_dict) == operation_cost("Mul", forward) == (1000.0, 4.0 * 2001)

"""The optimizer and loss benchmarks of the torch backend compute what the script computed: an optimizer recorded
from a real torch.optim instance, turned into operations and run by the kernel, makes the same update as that
instance (options, foreach, fused and all); the losses' forward and backward are torch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlbench.backends.torch import optim as optim_kernels
from dlbench.backends.torch.kernels import KERNELS
from dlbench.backends.torch.optim import parameter_shapes
from dlbench.backends.torch.params import UnsupportedRow
from dlbench.onnx.update import StepRun, update_operations
from dlbench.training.optimizers import optimizer_record

CPU = torch.device("cpu")
#: The script's parameters: two tensors of one shape, one of another (per tensor: two calls; foreach: one)
SHAPES = [(4, 3), (4, 3), (5,)]
LR = 0.05  # large enough that every option shows in the update

CASES = [
    (torch.optim.SGD, {}),
    (torch.optim.SGD, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (torch.optim.SGD, {"momentum": 0.8, "dampening": 0.1, "foreach": True, "maximize": True}),
    (torch.optim.SGD, {"momentum": 0.9, "fused": True}),
    (torch.optim.Adam, {"amsgrad": True, "betas": (0.8, 0.99), "eps": 1e-6}),
    (torch.optim.Adam, {"foreach": True, "weight_decay": 0.1}),
    (torch.optim.Adam, {"fused": True}),
    (torch.optim.AdamW, {"weight_decay": 0.05}),
    (torch.optim.AdamW, {"foreach": True, "maximize": True, "amsgrad": True}),
    (torch.optim.RMSprop, {"centered": True, "momentum": 0.5}),
    (torch.optim.RMSprop, {"foreach": True, "alpha": 0.9, "weight_decay": 0.01}),
]


def script_optimizer(cls: type, options: dict) -> torch.optim.Optimizer:
    params = [torch.randn(s, requires_grad=True) for s in SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape)
    return cls(params, lr=LR, **options)


@pytest.mark.parametrize(("cls", "options"), CASES, ids=lambda v: getattr(v, "__name__", None) or str(v))
def test_the_benchmarked_update_is_the_update_of_the_optimizer_the_script_ran(cls, options, monkeypatch) -> None:
    monkeypatch.setattr(optim_kernels, "LEARNING_RATE", LR)
    record = optimizer_record(script_optimizer(cls, options))
    made = update_operations(StepRun(optimizers=(record,)))
    together = bool(options.get("foreach") or options.get("fused"))
    assert len(made.operations) == (1 if together else 2) and not made.not_costed
    for op_type, params, count, pass_name, _ in made.operations:
        assert (op_type, count, pass_name) == (cls.__name__, 1, "optimizer")
        row = {k: float(v) for k, v in params.items()}
        torch.manual_seed(3)
        bench = KERNELS[op_type](row, CPU, torch.float32)  # steps once on building: the state exists
        torch.manual_seed(3)
        reference = []
        for shape in parameter_shapes(row):
            t = torch.randn(shape).requires_grad_(True)
            t.grad = torch.randn(shape)
            reference.append(t)
        script_like = cls(reference, lr=LR, **options)  # the script's own options, not the recorded ones
        script_like.step()
        before = [t.detach().clone() for t in reference]
        script_like.step()
        bench()
        for ours, theirs, start in zip(bench.inputs, reference, before, strict=True):
            assert not torch.allclose(theirs, start), "the update is visible"
            torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-5, atol=1e-6)


def test_a_foreach_step_over_many_shapes_is_one_call_over_as_many_elements_and_tensors() -> None:
    record = optimizer_record(script_optimizer(torch.optim.Adam, {"foreach": True}))
    ((_, params, _, _, _),) = update_operations(StepRun(optimizers=(record,))).operations
    shapes = parameter_shapes({k: float(v) for k, v in params.items()})
    assert len(shapes) == 3 and sum(s[0] for s in shapes) == 4 * 3 * 2 + 5


def test_an_optimizer_of_the_scripts_own_is_named_and_not_costed_as_another() -> None:
    class Lion(torch.optim.SGD):  # looks like SGD to isinstance; its update is its own
        pass

    record = optimizer_record(script_optimizer(Lion, {"momentum": 0.9}))
    made = update_operations(StepRun(optimizers=(record,)))
    assert made.operations == [] and len(made.not_costed) == 1
    assert made.not_costed[0][0].startswith("optimizer Lion (")


def test_zero_grad_zeroes_in_place_and_clipping_is_clip_grad_norm() -> None:
    row = {"N": 1.0, "C": 1.0, "H": 4.0, "W": 3.0, "tensors": 2.0, "numel": 24.0, "foreach": 0.0}
    zero = KERNELS["ZeroGrad"](row, CPU, torch.float32)
    grads = [p.grad for p in zero.inputs]
    zero()
    assert all(p.grad is g and not g.any() for p, g in zip(zero.inputs, grads, strict=True))
    torch.manual_seed(5)
    clip = KERNELS["ClipGradNorm"]({**row, "max_norm": 0.5, "norm_type": 2.0, "foreach": 2.0}, CPU, torch.float32)
    torch.manual_seed(5)
    expected = [torch.randn(4, 3) for _ in range(4)][1::2]  # parameters and gradients are drawn in turn
    total = clip()
    assert float(total) == pytest.approx(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in expected]))))
    scale = 0.5 / (float(total) + 1e-6)
    for p, g in zip(clip.inputs, expected, strict=True):
        torch.testing.assert_close(p.grad, (g * scale).reshape(p.grad.shape))


@pytest.mark.parametrize("op_type", ["MSELoss", "BCEWithLogitsLoss"])
def test_an_elementwise_loss_forward_and_backward_are_torchs(op_type: str) -> None:
    function = F.mse_loss if op_type == "MSELoss" else F.binary_cross_entropy_with_logits
    row = {"N": 1.0, "C": 1.0, "H": 6.0, "W": 5.0}
    forward = KERNELS[op_type]({**row, "mode": 0.0}, CPU, torch.float32)
    x, target = forward.inputs
    torch.testing.assert_close(forward(), function(x, target))
    backward = KERNELS[op_type]({**row, "mode": 1.0}, CPU, torch.float32)
    x, target = (t.detach() for t in backward.inputs[:2])
    leaf = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(function(leaf, target), leaf, *backward.grad_outputs)
    result = backward()
    torch.testing.assert_close(result if isinstance(result, torch.Tensor) else result[0], expected)


def test_the_nll_loss_takes_log_probabilities_and_its_backward_is_autograds() -> None:
    forward = KERNELS["NLLLoss"]({"N": 6.0, "C": 4.0, "mode": 0.0}, CPU, torch.float32)
    log_probs, targets = forward.inputs
    torch.testing.assert_close(forward(), F.nll_loss(log_probs, targets))
    backward = KERNELS["NLLLoss"]({"N": 6.0, "C": 4.0, "mode": 1.0}, CPU, torch.float32)
    log_probs, targets = backward.inputs
    leaf = log_probs.detach().clone().requires_grad_()
    F.nll_loss(leaf, targets).backward()
    torch.testing.assert_close(backward(), leaf.grad)
    with pytest.raises(UnsupportedRow, match="mode=2"):
        KERNELS["NLLLoss"]({"N": 6.0, "C": 4.0, "mode": 2.0}, CPU, torch.float32)

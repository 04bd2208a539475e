"""The optimizer's work in a training step as the script ran it: a real ``torch.optim`` optimizer over parameters
of the recorded shapes with their gradients set, one ``step()`` per call (foreach, fused and every option as
the script had them, the learning rate aside), and ``zero_grad(set_to_none=False)`` and
``clip_grad_norm_`` over the same tensors. The whole call is timed, its Python included, as the script's
``Optimizer.step`` range is."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlbench.backends.torch.params import Pass, UnsupportedRow, integer, positive, shape4

#: The learning rate of the timed updates: small, so thousands of repetitions keep the values finite.
LEARNING_RATE = 1e-6


def flag(p: dict[str, float], key: str) -> bool:
    return bool(integer(p, key, 0))


def parameter_shapes(p: dict[str, float]) -> list[tuple[int, ...]]:
    """``tensors`` tensors of N C H W, or ``numel`` elements split evenly over ``tensors`` 1-D tensors when
    ``numel`` is not ``tensors`` x N C H W (a foreach step over tensors of many shapes)."""
    positive(p, "tensors")
    shape, tensors = shape4(p), integer(p, "tensors", 1)
    each = shape[0] * shape[1] * shape[2] * shape[3]
    numel = integer(p, "numel", 0) or each * tensors
    if numel == each * tensors:
        return [shape] * tensors
    if numel < tensors:
        raise UnsupportedRow(f"numel={numel} is fewer elements than tensors={tensors}")
    base, extra = divmod(numel, tensors)
    return [(base + (1 if i < extra else 0),) for i in range(tensors)]


def parameters(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    """Leaf tensors with a gradient each, as the step finds them."""
    out = []
    for shape in parameter_shapes(p):
        param = torch.randn(shape, device=device, dtype=dtype).requires_grad_(True)
        param.grad = torch.randn(shape, device=device, dtype=dtype)
        out.append(param)
    return out


def _common(p: dict[str, float], fused: bool = True) -> dict[str, object]:
    options: dict[str, object] = {
        "weight_decay": float(p.get("weight_decay", 0.0)),
        "maximize": flag(p, "maximize"),
        "foreach": flag(p, "foreach") and not flag(p, "fused"),
    }
    if fused:
        options["fused"] = flag(p, "fused") or None
    return options


def optimizer_options(op_type: str, p: dict[str, float]) -> dict[str, object]:
    """The keyword arguments of ``torch.optim.<op_type>`` that a row's descriptors say."""
    if op_type == "SGD":
        return {**_common(p), "momentum": float(p.get("momentum", 0.0)),
                "dampening": float(p.get("dampening", 0.0)), "nesterov": flag(p, "nesterov")}  # fmt: skip
    if op_type in ("Adam", "AdamW"):
        return {**_common(p), "betas": (float(p.get("beta1", 0.9)), float(p.get("beta2", 0.999))),
                "eps": float(p.get("eps", 1e-8)), "amsgrad": flag(p, "amsgrad")}  # fmt: skip
    if op_type == "RMSprop":
        return {**_common(p, fused=False), "alpha": float(p.get("alpha", 0.99)), "eps": float(p.get("eps", 1e-8)),
                "momentum": float(p.get("momentum", 0.0)), "centered": flag(p, "centered")}  # fmt: skip
    raise UnsupportedRow(f"{op_type} is no optimizer dlbench builds")


def optimizer_kernel(op_type: str) -> Callable[[dict[str, float], torch.device, torch.dtype], Pass]:
    def kernel_fn(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
        params = parameters(p, device, dtype)
        try:
            optimizer = getattr(torch.optim, op_type)(params, lr=LEARNING_RATE, **optimizer_options(op_type, p))
        except (ValueError, RuntimeError) as err:  # e.g. fused on a device torch has no fused kernel for
            raise UnsupportedRow(f"torch.optim.{op_type} refuses these options: {err}") from err
        optimizer.step()  # the state (momentum buffers, moments) exists from the first step on, as in training
        return Pass(optimizer.step, tuple(params))

    return kernel_fn


def zero_grad(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """``optimizer.zero_grad(set_to_none=False)``: every gradient zeroed in place (``_foreach_zero_`` when
    foreach ran)."""
    params = parameters(p, device, dtype)
    optimizer = torch.optim.SGD(params, lr=LEARNING_RATE, foreach=flag(p, "foreach"))
    return Pass(lambda: optimizer.zero_grad(set_to_none=False), tuple(params))


def clip_grad_norm(p: dict[str, float], device: torch.device, dtype: torch.dtype) -> Pass:
    """``torch.nn.utils.clip_grad_norm_`` over the gradients: their total norm, then each scaled."""
    params = parameters(p, device, dtype)
    max_norm, norm_type = float(p.get("max_norm", 1.0)), float(p.get("norm_type", 2.0))
    foreach = flag(p, "foreach") or None  # None: torch's default, as a call without foreach= had it
    clip = torch.nn.utils.clip_grad.clip_grad_norm_  # the function itself, not a wrapper around it
    return Pass(lambda: clip(params, max_norm, norm_type, foreach=foreach), tuple(params))

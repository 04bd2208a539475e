"""The loss and the optimizer of a training step as the script ran them: which loss at which shape (read from
its profile), which optimizer with which options over which parameters, whether ``zero_grad`` zeroed in
place and whether gradients were clipped (its run facts), each as operations a benchmark times as it ran.
What dlbench cannot cost (an optimizer of its own class, a loss without a benchmark) becomes no operation:
:class:`UpdateOperations` names it, and the evaluation gives its measured share of the step."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.core.descriptors import DESCRIPTORS, OPTIMIZERS
from dlbench.core.shapes import rank4

#: Optimizers dlbench benchmarks: ``torch.optim`` classes (a subclass elsewhere may change the update).
COSTED_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "RMSprop"})
#: ClipGradNorm's ``foreach`` when the script left it to torch (None)
FOREACH_DEFAULT = 2


@dataclass(frozen=True)
class LossRun:
    """A loss the profile shows: its op_type (empty when dlbench has no benchmark for it), its parameters
    (N C H W of the input, or N rows x C classes), calls per step, and the profiled operator it was seen by."""

    op_type: str
    params: Mapping[str, int]
    calls: int
    operator: str
    why_not: str = ""


@dataclass(frozen=True)
class StepRun:
    """What the script ran besides its network. ``optimizers``: the run facts' records (None: the facts have
    none, a script from before dlbench recorded them); ``losses``: from the profile (None: not read)."""

    optimizers: tuple[Mapping[str, Any], ...] | None = None
    clipping: Mapping[str, Any] | None = None
    zero_grad: Mapping[str, bool] | None = None  # {"foreach": bool} when zero_grad zeroed gradients in place
    losses: tuple[LossRun, ...] | None = None


@dataclass
class UpdateOperations:
    """The operations (op_type, params, count, pass, node) and what was not costed (what, why)."""

    operations: list[tuple[str, dict[str, Any], int, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_costed: list[tuple[str, str]] = field(default_factory=list)


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def optimizer_params(op_type: str, options: Mapping[str, Any]) -> dict[str, float]:
    """An optimizer group's options as the op_type's descriptors (betas split, booleans 0/1)."""
    values = {k: _number(v) for k, v in options.items() if not isinstance(v, list | tuple)}
    betas = options.get("betas") or (0.9, 0.999)
    values.update(beta1=_number(betas[0], 0.9), beta2=_number(betas[1], 0.999))
    return {d: values.get(d, 0.0) for d in OPTIMIZERS[op_type] if d not in ("N", "C", "H", "W", "tensors", "numel")}


def geometries(shapes: Sequence[Sequence[int]], together: bool) -> list[dict[str, int]]:
    """The ``N C H W tensors numel`` of the calls that update ``shapes``: one call over all of them when
    ``together`` (foreach, fused: exact shapes when they are all alike, else their elements split evenly), else
    one per distinct shape (each tensor's own loop, at its own size)."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    if not shapes:
        return []
    folded = [rank4("SGD", s) for s in shapes]
    if together and len(set(folded)) > 1:
        numel = sum(math.prod(s) for s in shapes)
        return [{"N": 1, "C": 1, "H": 1, "W": max(numel // len(shapes), 1), "tensors": len(shapes), "numel": numel}]
    groups: dict[tuple[int, ...], int] = {}
    for shape in folded:
        groups[shape] = groups.get(shape, 0) + 1
    return [{**dict(zip("NCHW", shape, strict=True)), "tensors": k, "numel": k * math.prod(shape)}
            for shape, k in groups.items()]  # fmt: skip


def update_operations(ran: StepRun, default_optimizer: str = "SGD") -> UpdateOperations:
    """Operations of the optimizer's step, ``zero_grad`` in place and clipping, from the recorded facts."""
    out = UpdateOperations()
    all_shapes: list[list[int]] = []
    for record in ran.optimizers or ():
        cls, module = str(record.get("class", "?")), str(record.get("module", ""))
        if record.get("error"):
            out.not_costed.append((f"optimizer {cls}", f"its options could not be recorded: {record['error']}"))
            continue
        if cls not in COSTED_OPTIMIZERS or not module.startswith("torch.optim"):
            out.not_costed.append((f"optimizer {cls} ({module})", "dlbench has no benchmark of its update"))
            continue
        for index, group in enumerate(record.get("groups") or ()):
            options, shapes = group.get("options") or {}, group.get("shapes") or []
            all_shapes.extend(shapes)
            together = bool(options.get("foreach") or options.get("fused"))
            for geometry in geometries(shapes, together):
                params = {**geometry, **optimizer_params(cls, options)}
                out.operations.append((cls, params, 1, "optimizer", f"optimizer:{cls}:group{index}"))
            how = "fused" if options.get("fused") else "foreach" if options.get("foreach") else "per tensor"
            shown = {k: v for k, v in options.items() if k not in ("foreach", "fused")}
            out.notes.append(f"optimizer: {cls} group {index}, {len(shapes)} tensors, {how}, as the script ran it "
                             f"({', '.join(f'{k}={v}' for k, v in sorted(shown.items()))})")  # fmt: skip
        if ran.zero_grad:
            foreach = bool(ran.zero_grad.get("foreach"))
            for geometry in geometries([s for g in record.get("groups") or () for s in g.get("shapes") or []], foreach):
                out.operations.append(("ZeroGrad", {**geometry, "foreach": int(foreach)}, 1, "optimizer", "zero_grad"))
            out.notes.append(
                f"zero_grad(set_to_none=False): gradients zeroed in place{' (foreach)' if foreach else ''}"
            )
    if ran.clipping is not None and all_shapes:
        foreach = ran.clipping.get("foreach")
        flag = FOREACH_DEFAULT if foreach is None else int(bool(foreach))
        params = {**geometries(all_shapes, True)[0], "max_norm": _number(ran.clipping.get("max_norm"), 1.0),
                  "norm_type": _number(ran.clipping.get("norm_type"), 2.0), "foreach": flag}  # fmt: skip
        out.operations.append(("ClipGradNorm", params, 1, "optimizer", "clip_grad_norm_"))
        out.notes.append(f"gradient clipping: clip_grad_norm_ over {len(all_shapes)} tensors")
    return out


def loss_operations(losses: Sequence[LossRun]) -> UpdateOperations:
    """Forward and backward operations of each costed loss; the others named."""
    out = UpdateOperations()
    for loss in losses:
        if not loss.op_type or loss.op_type not in DESCRIPTORS:
            out.not_costed.append((f"loss {loss.operator}", loss.why_not or "dlbench has no benchmark of it"))
            continue
        for mode, pass_name in enumerate(("loss_forward", "loss_backward")):
            out.operations.append((loss.op_type, {**loss.params, "mode": mode}, loss.calls, pass_name, "loss"))
        shown = " x ".join(str(v) for v in loss.params.values())
        out.notes.append(f"loss: {loss.op_type} forward and backward at {shown} ({loss.operator} in the profile)")
    return out

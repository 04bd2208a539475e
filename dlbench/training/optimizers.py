"""What a script's optimizer ran, seen from inside its process: torch.optim's global step hook records each
optimizer that steps (its class, every option but the learning rate, whether foreach or fused ran, the shapes
it updates, per parameter group), and ``clip_grad_norm_`` gets a profiler range of its own so its time can be
told apart. :data:`FOLDED` names the profiler ranges whose whole time is one operation of the training step
(the optimizer step, ``zero_grad``, the clipping, a composite loss), and :func:`folded_rows` writes what ran
inside each, so the evaluation counts it once, as that operation."""

from __future__ import annotations

import fnmatch
import functools
from typing import Any

from dlbench.training.profile import PROFILE_COLUMNS, operator_table
from dlbench.training.trace import OPERATOR, TraceEvent

#: Columns of ``batch_<i>_folded.csv``: the folded row's name, then the operator table's columns.
FOLDED_COLUMNS = ("folded", *PROFILE_COLUMNS)


def batch_folded_file(batch_idx: int) -> str:
    return f"batch_{batch_idx}_folded.csv"


#: The range dlbench opens around ``torch.nn.utils.clip_grad_norm_``.
CLIP_RANGE = "dlbench::clip_grad_norm_"

#: Loss operators dlbench has no benchmark for (the profile names them; their time is measured, not predicted).
UNCOSTED_LOSSES = (
    "aten::l1_loss aten::smooth_l1_loss aten::huber_loss aten::binary_cross_entropy aten::kl_div "
    "aten::soft_margin_loss aten::multi_margin_loss aten::multilabel_margin_loss aten::margin_ranking_loss "
    "aten::hinge_embedding_loss aten::cosine_embedding_loss aten::ctc_loss aten::poisson_nll_loss "
    "aten::triplet_margin_loss aten::nll_loss2d"
).split()

#: The folded row of an optimizer's step ends with its class: ``dlbench::optimizer_step#AdamW``.
OPTIMIZER_STEP = "dlbench::optimizer_step"

#: Profiler ranges whose time (their own and everything nested in them) is one operation: pattern -> the row
#: name the folded time gets. Ranges named as they are keep their name (and their recorded shapes).
FOLDED: dict[str, str] = {
    "Optimizer.step#*": OPTIMIZER_STEP,  # + "#<class>", see folded_name
    "Optimizer.zero_grad#*": "dlbench::zero_grad",
    CLIP_RANGE: "dlbench::clip_grad_norm",
    # BCE-with-logits runs as several aten operators, forward and backward
    "aten::binary_cross_entropy_with_logits": "aten::binary_cross_entropy_with_logits",
    # the losses dlbench has no benchmark for: their forward's whole time, for the share the notes give
    **{name: name for name in UNCOSTED_LOSSES},
    "autograd::engine::evaluate_function: BinaryCrossEntropyWithLogitsBackward0": "dlbench::bce_with_logits_backward",
}

#: Options that do not change the work of an update (the learning rate's value, bookkeeping).
_IGNORED_OPTIONS = frozenset({"params", "lr", "initial_lr", "differentiable", "capturable", "param_names"})


def folded_name(name: str) -> str | None:
    """The row name a folded range's time goes to (None: not a folded range)."""
    for pattern, folded in FOLDED.items():
        if fnmatch.fnmatchcase(name, pattern):
            if folded == OPTIMIZER_STEP:  # Optimizer.step#AdamW.step -> dlbench::optimizer_step#AdamW
                return f"{OPTIMIZER_STEP}#{name.partition('#')[2].removesuffix('.step')}"
            return folded
    return None


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and getattr(value, "numel", lambda: 2)() == 1:
        return _plain(value.item())  # a tensor learning rate or beta
    return str(value)


def optimizer_record(optimizer: Any) -> dict[str, Any]:
    """One optimizer as it steps now: class, module, and per parameter group its options and the shapes of the
    parameters that have a gradient (those the step updates), with foreach/fused as torch resolves them."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    groups = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if getattr(p, "grad", None) is not None]
        options = {k: _plain(v) for k, v in group.items() if k not in _IGNORED_OPTIONS}
        fused = bool(group.get("fused") or False)
        foreach = group.get("foreach")
        if foreach is None and not fused and params:
            _, foreach = _default_to_fused_or_foreach(params, bool(group.get("differentiable", False)), False)
        options.update(fused=fused, foreach=bool(foreach) and not fused)
        groups.append(
            {
                "options": options,
                "shapes": [list(p.shape) for p in params],
                "dtype": str(params[0].dtype).removeprefix("torch.") if params else "",
                "device": params[0].device.type if params else "",
            }
        )
    cls = type(optimizer)
    return {"class": cls.__name__, "module": cls.__module__, "groups": groups}


#: The recorders of this process's open sessions (the latest records); the hook and the wrapper go in once.
_ACTIVE: list[OptimizerRecorder] = []
_INSTALLED: list[bool] = []


def _install_once() -> None:
    """torch.optim's global step pre-hook, and ``clip_grad_norm_`` wrapped in :data:`CLIP_RANGE` (looked up
    at call time as ``torch.nn.utils.clip_grad_norm_``, so a script's call goes through it)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def on_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _ACTIVE:
            _ACTIVE[-1].on_step(optimizer)

    register_optimizer_step_pre_hook(on_step)
    original = torch.nn.utils.clip_grad_norm_

    @functools.wraps(original)
    def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0, *args: Any, **kw: Any) -> Any:
        if _ACTIVE:
            _ACTIVE[-1].on_clip(max_norm, norm_type, kw.get("foreach", args[1] if len(args) > 1 else None))
        with torch.autograd.profiler.record_function(CLIP_RANGE):
            return original(parameters, max_norm, norm_type, *args, **kw)

    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_
    torch.nn.utils.clip_grad.clip_grad_norm_ = clip_grad_norm_


class OptimizerRecorder:
    """Installed in a script's process by the instrumentation: each optimizer's record (taken at its first
    step) and step count, and the arguments ``clip_grad_norm_`` was first called with."""

    def __init__(self) -> None:
        self.optimizers: dict[int, dict[str, Any]] = {}
        self.clipping: dict[str, Any] = {}

    def install(self) -> None:
        _install_once()
        if self not in _ACTIVE:
            _ACTIVE.append(self)

    def uninstall(self) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def on_clip(self, max_norm: Any, norm_type: Any, foreach: Any) -> None:
        if not self.clipping:
            self.clipping = {"max_norm": _plain(max_norm), "norm_type": _plain(norm_type), "foreach": _plain(foreach)}

    def on_step(self, optimizer: Any) -> None:
        entry = self.optimizers.get(id(optimizer))
        if entry is None:
            try:
                entry = {**optimizer_record(optimizer), "steps": 0}
            except Exception as err:  # noqa: BLE001 - recording must never break the script's training
                entry = {"class": type(optimizer).__name__, "error": str(err), "groups": [], "steps": 0}
            self.optimizers[id(optimizer)] = entry
        entry["steps"] += 1

    def facts(self) -> dict[str, Any]:
        """For ``run_facts.json``: ``optimizers`` (a list, empty when none stepped) and ``clip_grad_norm``."""
        out: dict[str, Any] = {"optimizers": list(self.optimizers.values())}
        if self.clipping:
            out["clip_grad_norm"] = dict(self.clipping)
        return out


# -------------------------------------------------------------------------------- folded profiler ranges


def folded_events(events: list[TraceEvent]) -> dict[str, list[TraceEvent]]:
    """Per folded row name, the events of every range :data:`FOLDED` names, with everything nested in them on
    their thread (a range inside another folded range belongs to the outer one) and the device activities
    those operators launched."""
    operators = sorted((e for e in events if e.kind == OPERATOR), key=lambda e: (e.thread, e.start, -e.end))
    groups: dict[str, list[TraceEvent]] = {}
    open_range: TraceEvent | None = None
    target: list[TraceEvent] = []
    for e in operators:
        if open_range is not None and (e.thread != open_range.thread or e.start >= open_range.end):
            open_range = None
        if open_range is not None:
            target.append(e)
            continue
        name = folded_name(e.name)
        if name is not None:
            open_range = e
            target = groups.setdefault(name, [])
            target.append(e)
    inside = {e.correlation: name for name, group in groups.items() for e in group if e.correlation}
    for e in events:
        if e.kind != OPERATOR and e.op in inside:  # runtime calls and device activities they launched
            groups[inside[e.op]].append(e)
    return groups


def folded_rows(events: list[TraceEvent], batch_idx: int) -> list[tuple[Any, ...]]:
    """``(folded name, *operator table row)`` for each operator that ran inside a folded range: the rows the
    evaluation takes out of the batch's table and counts as that range's operation instead."""
    rows = []
    for name, group in folded_events(events).items():
        rows.extend((name, *row) for row in operator_table(group, batch_idx))
    return rows

"""What a profiled training step ran besides its network, for the prediction: the profile with the optimizer's
step, ``zero_grad``, clipping and a composite loss each folded into one row (``batch_<i>_folded.csv``,
:mod:`dlbench.training.optimizers`), the losses the profile shows with their shapes, and what the run facts
recorded of the optimizer; and the share of the step of what dlbench could not cost."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis.match import MatchError, profile_from_batches
from dlbench.core.shapes import rank4
from dlbench.onnx.update import LossRun, StepRun
from dlbench.training.optimizers import OPTIMIZER_STEP, UNCOSTED_LOSSES, folded_name

#: Loss operators of the profile dlbench benchmarks: forward aten operator -> op_type, and how its input reads.
LOSSES = {
    "aten::cross_entropy_loss": ("SoftmaxCrossEntropyLoss", "rows"),
    "aten::binary_cross_entropy_with_logits": ("BCEWithLogitsLoss", "elements"),
    "aten::mse_loss": ("MSELoss", "elements"),
    "aten::nll_loss_nd": ("NLLLoss", "rows"),
}


def loss_operators(name: str) -> tuple[str, ...]:
    """A loss's aten operators by name: itself, its ``_forward`` level and its ``_backward`` operator."""
    return (name, f"{name}_forward", f"{name}_backward")


def read_step_profile(profile_dir: str | Path, time_column: str = "self_cpu_us") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (name, input_shapes): calls and time per step (as :func:`dlbench.analysis.match.profile_per_step`),
    with what ran inside each folded range taken out and counted as one row of the range's folded name; and the
    folded rows themselves per step (column ``folded``: the range they ran in)."""
    rows, folded = batch_profiles(profile_dir, time_column)
    return profile_from_batches(rows, time_column), _per_step_folded(folded, time_column)


def batch_profiles(profile_dir: str | Path, time_column: str = "self_cpu_us") -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`read_step_profile` per profiled batch (column ``batch``), before the median over batches."""
    from dlbench.training.profile import PROFILE_KEY, read_profile, with_profile_key

    paths = sorted(Path(profile_dir).glob("batch_*_ops.csv"))
    if not paths:
        raise MatchError(f"{profile_dir}: no batch_*_ops.csv profile files")
    rows = pd.concat([read_profile(p) for p in paths], ignore_index=True)
    folded_paths = sorted(Path(profile_dir).glob("batch_*_folded.csv"))
    text = {column: str for column in PROFILE_KEY}
    folded = pd.concat([pd.read_csv(p, dtype=text, keep_default_na=False) for p in folded_paths] or
                       [pd.DataFrame(columns=["folded", "batch", *PROFILE_KEY, "calls", time_column])],
                       ignore_index=True)  # fmt: skip
    folded = with_profile_key(folded)
    if folded.empty:
        return rows, folded
    key = ["batch", *PROFILE_KEY]
    inside = folded.groupby(key)[["calls", time_column]].sum()
    rows = rows.set_index(key)
    common = rows.index.intersection(inside.index)
    rows.loc[common, "calls"] = rows.loc[common, "calls"] - inside.loc[common, "calls"]
    rows.loc[common, time_column] = rows.loc[common, time_column] - inside.loc[common, time_column]
    rows = rows[(rows["calls"] > 0) | (rows[time_column] > 1e-6)].reset_index()
    ranges = []
    for (batch, name), group in folded.groupby(["batch", "folded"], sort=False):
        own = group[group["name"].map(folded_name) == name]  # the range's own event(s)
        first = own.iloc[0] if len(own) and own["name"].iloc[0] == name else None
        ranges.append({"batch": batch, "name": name, "calls": int(own["calls"].sum()) or 1,
                       "input_shapes": str(first["input_shapes"]) if first is not None else "[]",
                       "input_types": str(first["input_types"]) if first is not None else "[]",
                       "memory_format": str(first["memory_format"]) if first is not None else "",
                       "input_formats": str(first["input_formats"]) if first is not None else "[]",
                       "within": str(first["within"]) if first is not None else "",
                       time_column: float(group[time_column].sum())})  # fmt: skip
    rows = pd.concat([rows[[*key, "calls", time_column]], pd.DataFrame(ranges)])
    return rows, folded


def _per_step_folded(folded: pd.DataFrame, time_column: str) -> pd.DataFrame:
    if folded.empty:
        return pd.DataFrame(columns=["folded", "name", "input_shapes", "input_types", "memory_format", "input_formats",
                                     "within", "calls", "time_us"])  # fmt: skip
    out = []
    for range_name, group in folded.groupby("folded", sort=False):
        step = profile_from_batches(group, time_column)
        out.append(step.assign(folded=range_name))
    return pd.concat(out, ignore_index=True)


def _shapes(text: Any) -> list[Any]:
    try:
        shapes = json.loads(text) if isinstance(text, str) else list(text)
    except (json.JSONDecodeError, TypeError):
        return []
    return shapes if isinstance(shapes, list) else []


def _calls_by_shapes(profile: pd.DataFrame, name: str) -> dict[str, int]:
    """Calls per step of operator ``name`` per input shapes. Calls of one shape recorded in several dtypes are
    one loss, counted once (the most calls): autocast records a loss on its float32 list as called, on the
    lower-precision logits, and again re-dispatched on their float32 cast, nested in the first."""
    out: dict[str, int] = {}
    for row in profile[profile["name"] == name].itertuples(index=False):
        key = str(row.input_shapes)
        out[key] = max(out.get(key, 0), int(round(float(row.calls))))
    return out


def profiled_losses(profile: pd.DataFrame) -> tuple[LossRun, ...]:
    """The losses of a per-step profile: for each loss operator, its input shape and calls per step. Cross
    entropy's own nll_loss is not a second loss; a loss over a spatial input (rank above 2 for the class
    losses) is named, not costed."""
    out = []
    cross_entropy = _calls_by_shapes(profile, "aten::cross_entropy_loss")
    for name, (op_type, reading) in LOSSES.items():
        for input_shapes, calls in _calls_by_shapes(profile, name).items():
            shapes = _shapes(input_shapes)
            if name == "aten::nll_loss_nd":  # the nll_loss inside cross_entropy_loss (same input) is that loss's
                calls -= sum(n for ce, n in cross_entropy.items() if _shapes(ce)[:1] == shapes[:1])
            if calls <= 0 or not shapes or not isinstance(shapes[0], list) or not shapes[0]:
                continue
            shape = [int(d) for d in shapes[0]]
            if reading == "rows":
                if len(shape) > 2:
                    out.append(LossRun("", {}, calls, name, f"input of rank {len(shape)} (a spatial loss)"))
                    continue
                params = {"N": shape[0] if len(shape) == 2 else 1, "C": shape[-1]}
            else:
                params = dict(zip("NCHW", rank4(op_type, shape), strict=True))
            out.append(LossRun(op_type, params, calls, name))
    for name in UNCOSTED_LOSSES:
        calls = profile.loc[profile["name"].isin(loss_operators(name)), "calls"].max()
        if calls > 0 and not (name == "aten::nll_loss2d" and "aten::cross_entropy_loss" in set(profile["name"])):
            out.append(LossRun("", {}, int(calls), name, "dlbench has no benchmark of this loss"))
    return tuple(out)


def step_run(facts: Mapping[str, Any], profile: pd.DataFrame, folded: pd.DataFrame) -> StepRun:
    """What the script ran: its optimizers and clipping from the run facts (None when the facts have no
    record), zero_grad in place when the zero_grad range zeroed gradients, the losses from the profile."""
    records = facts.get("optimizers")
    zeroed = folded[
        (folded["folded"] == "dlbench::zero_grad") & folded["name"].isin(("aten::zero_", "aten::_foreach_zero_"))
    ]
    return StepRun(
        optimizers=tuple(records) if isinstance(records, list) else None,
        clipping=facts.get("clip_grad_norm") if isinstance(facts.get("clip_grad_norm"), dict) else None,
        zero_grad={"foreach": bool((zeroed["name"] == "aten::_foreach_zero_").any())} if len(zeroed) else None,
        losses=profiled_losses(profile),
    )


def not_costed_time(
    not_costed: tuple[tuple[str, str], ...], profile: pd.DataFrame, profiled_ms: float
) -> tuple[list[str], dict[str, float]]:
    """Notes and metrics naming each thing the script ran that dlbench could not cost, with its measured time
    per step and share of the profiled step (an optimizer: its whole step; a loss: its forward operator)."""
    notes, metrics = [], {}
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) and profiled_ms > 0 else math.nan
    for what, why in not_costed:
        kind, _, rest = what.partition(" ")
        label = rest.split(" ")[0]
        if kind == "optimizer":
            rows = profile[profile["name"] == f"{OPTIMIZER_STEP}#{label}"]
            part = "its step"
        else:
            rows = profile[profile["name"].isin(loss_operators(label))]
            part = f"its forward ({label} with all it ran) and {label}_backward"
        ms = float(rows["time_us"].sum()) / 1e3
        share = 100.0 * ms / base
        notes.append(f"not costed: {what} ({why}); {part} took {ms:.3g} ms per profiled step ({share:.1f}%), "
                     "not in the prediction")  # fmt: skip
        key = "".join(c if c.isalnum() else "_" for c in f"{kind}_{label}").strip("_")
        metrics[f"not_costed.{key}_ms"] = ms
        metrics[f"not_costed.{key}_pct"] = share
    if not_costed:
        metrics["not_costed_time_pct"] = sum(v for k, v in metrics.items() if k.endswith("_pct"))
    return notes, metrics


def ran_params(ran: StepRun) -> dict[str, str]:
    """The run's params naming what the script ran: its optimizers and losses (``assumed`` where no record)."""
    optimizers = "assumed" if ran.optimizers is None else ",".join(str(r.get("class", "?")) for r in ran.optimizers)
    losses = "assumed" if ran.losses is None else ",".join(loss.op_type or loss.operator for loss in ran.losses)
    return {"ran.optimizers": optimizers or "none", "ran.losses": losses or "none",
            "ran.clip_grad_norm": str(ran.clipping is not None).lower(),
            "ran.zero_grad_in_place": str(ran.zero_grad is not None).lower()}  # fmt: skip

"""The two sides of a comparison (``compare.baseline`` A, ``compare.candidate`` B: a run id, a system, or
``key=value``), the pairs of configurations to compare (repeated runs of one configuration pooled, each of
their rounds a block), and the samples each side recorded (``protocol/*_samples.csv``, split into rounds by
``*_rounds.csv``), ready for :func:`dlbench.analysis.comparison.change.compare_samples`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.analysis.comparison.change import CHANGE_COLUMNS, TOTAL, ChangeSettings, compare_samples
from dlbench.analysis.comparison.machine import machine_moved, probe_ratio, probe_ratios, with_moves
from dlbench.analysis.comparison.runs import CONFIGURATION
from dlbench.analysis.marks import is_true
from dlbench.core.errors import ConfigurationError

#: what a side's spec may name as ``key=value``: columns of the runs table
SIDE_KEYS = ("system", "implementation", "backend", "batch_size", "dtype", "device", "threads", "benchmark")
#: statuses whose number is never judged (the threads waited for cores)
UNCLEAN_STATUSES = ("contended",)


@dataclass(frozen=True)
class Recorded:
    """What one run recorded: samples (``key, block, ms``) and per operation ``key, count, why``."""

    samples: pd.DataFrame
    operations: pd.DataFrame


#: what ``changes.csv`` says of each row's pair, beside :data:`CHANGE_COLUMNS`
PAIR_COLUMNS = ("pair", "key", "op_id", "differs", "a_runs", "a_names", "b_runs", "b_names")
#: the settings a pair's two sides may differ in (``differs``)
DIFFERING = ("implementation", "backend", "system", "dtype", "device", "threads")


@dataclass(frozen=True)
class Pair:
    """Runs of one configuration on each side, compared operation by operation: ``label`` is unique among the
    comparison's pairs, ``differs`` the configuration that differs between the sides (``backend torch ->
    onednn; threads 1 -> 2``; empty where the sides ran the same)."""

    label: str
    a_runs: tuple[str, ...]
    b_runs: tuple[str, ...]
    differs: str = ""
    a_names: tuple[str, ...] = ()
    b_names: tuple[str, ...] = ()


def side_mask(runs: pd.DataFrame, spec: str, key: str) -> pd.Series:
    """Which runs ``spec`` names: ``key:value`` or ``key=value`` (a column of the runs table; ``=`` must be
    quoted on Hydra's command line), a run id (or its first 8+ characters), a run name, or a system (``system.id``, or a
    part of it). ``key`` names the setting in messages."""
    spec = spec.strip()
    named = spec.partition(":")[0].strip() in SIDE_KEYS  # key:value, which needs no quotes on Hydra's line
    if "=" in spec or named:
        column, _, value = spec.partition("=" if "=" in spec else ":")
        column = column.strip()
        if column not in SIDE_KEYS or column not in runs.columns:
            raise ConfigurationError(f"{key}={spec}: {column!r} is not a run column; use one of {', '.join(SIDE_KEYS)}")
        return runs[column].map(_text) == value.strip()
    ids = runs["run_id"].astype(str)
    if len(spec) >= 8 and ids.str.startswith(spec).any():
        return ids.str.startswith(spec)
    names = runs["run_name"].fillna("").astype(str) if "run_name" in runs.columns else ids.map(lambda _: "")
    if (names == spec).any():
        return names == spec
    systems = runs["system"].fillna("").astype(str)
    if (systems == spec).any():
        return systems == spec
    if spec and systems.str.contains(spec, regex=False).any():
        return systems.str.contains(spec, regex=False)
    if _numeric(spec):
        raise ConfigurationError(
            f"{key}={spec}: the command line read this as a number (a short run id like 5070e823 is one); give the "
            f"whole run id, or quote it: {key}=\"'5070e823'\""
        )
    raise ConfigurationError(
        f"{key}={spec}: no run found has that id, name, system or key:value (systems: "
        f"{', '.join(sorted(set(systems) - {''})) or 'none'}); give a run id, a system, or e.g. {key}=dtype:float32"
    )


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None or value != value else str(value)


def pair_runs(runs: pd.DataFrame, a: pd.Series, b: pd.Series) -> list[Pair]:
    """Per configuration of B's finished operator sweeps, the A runs of the same benchmark and batch size
    that agree with it on the most other settings (implementation, system, dtype, device, threads); the runs
    of a configuration are pooled on each side."""
    sweeps = (runs["kind"] == "operator_sweep") & (runs["status"] == "FINISHED")
    runs_a, runs_b = runs[a & sweeps], runs[b & ~a & sweeps]
    others = [c for c in CONFIGURATION if c in runs.columns and c not in ("kind", "benchmark", "batch_size")]
    pairs = []
    for (benchmark, batch), group in runs_b.groupby(["benchmark", "batch_size"], sort=True, dropna=False):
        for config, part in group.groupby(others, sort=True, dropna=False):
            config = config if isinstance(config, tuple) else (config,)
            same = runs_a[(runs_a["benchmark"] == benchmark) & (runs_a["batch_size"] == batch)]
            if same.empty:
                continue
            agree = sum((same[c].map(_text) == _text(v)).astype(int) for c, v in zip(others, config, strict=True))
            best = same[agree == agree.max()]
            pairs.append(Pair(f"{benchmark} bs{_text(batch)}", tuple(best["run_id"]), tuple(part["run_id"]),
                              differs(best, part), _names(best), _names(part)))  # fmt: skip
    return unique_labels(pairs)


def _names(runs: pd.DataFrame) -> tuple[str, ...]:
    names = runs["run_name"] if "run_name" in runs.columns else runs["run_id"]
    return tuple(_text(n) for n in names)


def differs(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """The settings of :data:`DIFFERING` whose values differ between the runs of ``a`` and ``b``, as
    ``backend torch -> onednn; threads 1 -> 2`` (a side whose runs disagree lists its values with ``|``)."""
    parts = []
    for column in DIFFERING:
        if column not in a.columns or column not in b.columns:
            continue
        values_a = " | ".join(sorted({_text(v) for v in a[column]}))
        values_b = " | ".join(sorted({_text(v) for v in b[column]}))
        if values_a != values_b:
            parts.append(f"{column} {values_a or '-'} -> {values_b or '-'}")
    return "; ".join(parts)


def unique_labels(pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs with labels that never coincide: a label several pairs share gets what differs between each
    pair's sides in brackets, and where that is the same too, B's run names."""
    out = list(pairs)
    for attempt in (lambda p: p.differs or "same configuration", lambda p: ", ".join(p.b_names or p.b_runs)):
        counts: dict[str, int] = {}
        for pair in out:
            counts[pair.label] = counts.get(pair.label, 0) + 1
        out = [replace(p, label=f"{p.label} [{attempt(p)}]") if counts[p.label] > 1 else p for p in out]
    seen: dict[str, int] = {}
    for index, pair in enumerate(out):  # still alike (two B runs of one name): numbered
        seen[pair.label] = seen.get(pair.label, 0) + 1
        if seen[pair.label] > 1:
            out[index] = replace(pair, label=f"{pair.label} #{seen[pair.label]}")
    return out


def blocks_from_rounds(samples: pd.DataFrame, rounds: pd.DataFrame | None, run_id: str) -> pd.DataFrame:
    """``id, block, ms``: each operation's samples labelled with the round they came from (``rounds``: the
    sweep's ``_rounds.csv``; its kept rounds, in order, hold ``reps`` samples each); one block per run where
    the rounds do not account for the samples (one round, or a program that wrote statistics per round)."""
    out = []
    for op_id, part in samples.groupby("id", sort=False):
        labels = [f"{run_id}:1"] * len(part)
        if rounds is not None and len(rounds):
            kept = rounds[(rounds["id"] == op_id) & (rounds["kept"].astype(str) == "1")]
            reps = pd.to_numeric(kept["reps"], errors="coerce")
            if len(kept) and reps.notna().all() and int(reps.sum()) == len(part):
                labels = [f"{run_id}:{r}" for r, n in zip(kept["round"].astype(str), reps.astype(int), strict=True)
                          for _ in range(n)]  # fmt: skip
        out.append(pd.DataFrame({"id": op_id, "block": labels, "ms": part["ms"].to_numpy()}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["id", "block", "ms"])


def recorded_from(results: pd.DataFrame, protocol: Path | None, run_id: str, noisy: bool) -> Recorded:
    """A run's samples by operation key and each operation's count and reason not to judge it, from its
    ``results.csv`` and its downloaded ``protocol/`` folder."""
    results = results.copy()
    if "key" not in results.columns:
        results["key"] = results["name"] if "name" in results.columns else results["id"].astype(str)
    frames = []
    for path in sorted(protocol.glob("*_samples.csv")) if protocol is not None else []:
        rounds_path = path.with_name(path.name[: -len("_samples.csv")] + "_rounds.csv")
        rounds = pd.read_csv(rounds_path, comment="#") if rounds_path.exists() else None
        frames.append(blocks_from_rounds(pd.read_csv(path), rounds, run_id))
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["id", "block", "ms"])
    keys = dict(zip(results["id"], results["key"].astype(str), strict=False))
    samples = samples.assign(key=samples["id"].map(keys)).dropna(subset=["key"])
    status = results["status"].astype(str) if "status" in results.columns else pd.Series("ok", index=results.index)
    # each operation's own record of a busy machine where the sweep kept one, else the run's
    busy = results["machine_busy"].map(is_true) if "machine_busy" in results.columns else status.map(lambda _: noisy)
    why = [", ".join(([s] if s in UNCLEAN_STATUSES else []) + (["measured on a busy machine"] if b else []))
           for s, b in zip(status, busy, strict=True)]  # fmt: skip
    count = results["count"] if "count" in results.columns else 1
    operations = pd.DataFrame({"key": results["key"].astype(str), "count": count, "why": why, "id": results["id"]})
    return Recorded(samples[["key", "block", "ms"]], operations)


def pooled(recorded: Sequence[Recorded]) -> Recorded:
    """Several runs of one configuration as one side: every run's rounds are blocks; an operation is unclean
    when it is in any run."""
    samples = pd.concat([r.samples for r in recorded], ignore_index=True)
    operations = pd.concat([r.operations for r in recorded], ignore_index=True)
    if "id" not in operations.columns:
        operations["id"] = None
    operations = operations.groupby("key", sort=False).agg(
        count=("count", "first"), why=("why", lambda w: "; ".join(sorted({x for x in w if x}))), id=("id", "first")
    )
    return Recorded(samples, operations.reset_index())


def changes_of_pairs(pairs: Sequence[Pair], read: Callable[[str], Recorded], settings: ChangeSettings) -> pd.DataFrame:
    """``changes.csv`` over every pair: operations named ``<label> <key>`` where several pairs are compared,
    each pair's total as ``<label> total``."""
    frames = []
    for pair in pairs:
        a = pooled([read(r) for r in pair.a_runs])
        b = pooled([read(r) for r in pair.b_runs])
        info = a.operations.merge(b.operations, on="key", how="outer", suffixes=("_a", "_b"))
        info["count"] = info["count_a"].fillna(info["count_b"])
        changes = compare_samples(a.samples, b.samples, info.fillna({"why_a": "", "why_b": ""}), settings)
        ids = info.assign(op_id=info["id_a"].fillna(info["id_b"])).set_index("key")["op_id"]
        frames.append(labelled(changes, pair, ids, several=len(pairs) > 1))
    columns = [*CHANGE_COLUMNS, *PAIR_COLUMNS]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def labelled(changes: pd.DataFrame, pair: Pair, ids: pd.Series, several: bool) -> pd.DataFrame:
    """One pair's ``changes`` with the columns of :data:`PAIR_COLUMNS`: operations named ``<label> <key>``
    where several pairs are compared, the total always ``<label> total``; ``ids``: each key's operation id."""
    changes = changes.assign(key=changes["operation"], pair=pair.label)
    changes["op_id"] = changes["key"].map(ids).astype("Int64") if len(ids) else pd.NA
    if several or changes.empty:
        changes["operation"] = pair.label + " " + changes["operation"]
    else:
        changes.loc[changes["operation"] == TOTAL, "operation"] = f"{pair.label} {TOTAL}"
    return changes.assign(differs=pair.differs, a_runs=",".join(pair.a_runs), a_names=",".join(pair.a_names),
                          b_runs=",".join(pair.b_runs), b_names=",".join(pair.b_names))  # fmt: skip


def protocol_reader(target: Any, noisy: Callable[[str], bool]) -> Callable[[str], Recorded]:
    """``read(run_id)``: a run's :class:`Recorded`, downloading ``results.csv`` and ``protocol/`` through
    tracking (each run once)."""
    from dlbench.tracking.store import download_artifact

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    cache: dict[str, Recorded] = {}

    def read(run_id: str) -> Recorded:
        if run_id not in cache:
            with tempfile.TemporaryDirectory() as tmp:
                results = pd.read_csv(download_artifact(target, run_id, "results.csv", Path(tmp)))
                try:
                    protocol: Path | None = download_artifact(target, run_id, "protocol", Path(tmp))
                except Exception:  # noqa: BLE001 - a run without samples is compared as unsure, not fatal
                    protocol = None
                cache[run_id] = recorded_from(results, protocol, run_id, noisy(run_id))
        return cache[run_id]

    return read


@dataclass(frozen=True)
class Judged:
    """A comparison's outcome: the changes, the pairs, the fields of the machines that differ (``field, A,
    B``) and the noisy settings found on either side (each with its fix); ``machine_note`` where a side has no
    recorded state."""

    changes: pd.DataFrame
    pairs: tuple[Pair, ...]
    machines: pd.DataFrame
    noisy_settings: tuple[str, ...]
    machine_note: str = ""
    #: per pair, B / A of the reference probe's readings (NaN where a side has none)
    probe_ratios: tuple[float, ...] = ()
    #: how the ratios and intervals were made (the summary's last sentence); empty: from stored runs' samples
    method: str = ""


def side_machine(found: pd.DataFrame, run_ids: Sequence[str]) -> dict[str, str]:
    """The machine state of a side's runs (their ``dlbench.machine.*`` tags); a field its runs disagree on
    lists every value."""
    from dlbench.tracking.system import machine_of_run

    rows = found[found["run_id"].isin(set(run_ids))] if "run_id" in found.columns else found.iloc[0:0]
    states = [machine_of_run(row) for row in rows.to_dict("records")]
    fields = sorted({k for s in states for k in s})
    return {k: " | ".join(sorted({s[k] for s in states if k in s})) for k in fields}


def judge(
    runs: pd.DataFrame, found: pd.DataFrame, baseline: str, candidate: str, settings: ChangeSettings, target: Any
) -> Judged:
    """Side A (``baseline``) and B (``candidate``, else every other run), paired and compared with
    :func:`changes_of_pairs` from the runs' recorded samples; the machines' differences beside them."""
    from dlbench.core.machine_state import differences, noisy_settings

    a = side_mask(runs, baseline, "compare.baseline")
    b = side_mask(runs, candidate, "compare.candidate") & ~a if candidate else ~a
    pairs = pair_runs(runs, a, b)
    if not pairs:
        raise ConfigurationError(
            f"compare.baseline={baseline}: its {int(a.sum())} run(s) and the {int(b.sum())} other(s) share no "
            "finished operator sweep of one benchmark and batch size; choose sides that measured the same sweep"
        )
    noisy = dict(zip(runs["run_id"], runs["noisy"].astype(bool), strict=False)) if "noisy" in runs else {}
    changes = changes_of_pairs(pairs, protocol_reader(target, lambda r: noisy.get(r, False)), settings)
    machine_a = side_machine(found, [r for p in pairs for r in p.a_runs])
    machine_b = side_machine(found, [r for p in pairs for r in p.b_runs])
    both = bool(machine_a) and bool(machine_b)  # a run logged before machine.json has no state to compare
    machines = pd.DataFrame(differences(machine_a, machine_b) if both else [], columns=["field", "A", "B"])
    note = "" if both else f"{'A' if not machine_a else 'B'}'s runs recorded no machine state (dlbench.machine.*)"
    warnings = sorted(set(noisy_settings(machine_a)) | set(noisy_settings(machine_b)))
    probes = tuple(probe_ratio(runs, p.a_runs, p.b_runs) for p in pairs)
    moves = [machine_moved(probe_ratios(runs, p.a_runs, p.b_runs), settings.threshold) for p in pairs]
    return Judged(with_moves(changes, pairs, moves), tuple(pairs), machines, tuple(warnings), note, probes)

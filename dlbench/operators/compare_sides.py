"""The two sides of a comparison measured in one run (``compare.a``, ``compare.b``): each side's benchmark
(a backend, a registry entry, or an executable taking that entry's parameters, run by another Python
interpreter where ``python`` says so), its settings (threads, dtype, environment variables, the rounds) and
its operations; and what differs between the two, for the labels of ``changes.csv``."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dlbench import PROJECT_ROOT
from dlbench.core.cores import resolve_threads
from dlbench.core.errors import ConfigurationError
from dlbench.core.values import Operation
from dlbench.operators.registry import OperatorBenchmark, Registry, resolve_command
from dlbench.operators.runner import RunSettings, Side


@dataclass(frozen=True)
class ResolvedSide:
    """A side ready to measure, and what describes it (``backend``, ``implementation``, ``threads``, ``dtype``,
    ``exe``, ``python``, ``env``: the values ``differs`` compares)."""

    name: str  # A or B
    side: Side
    description: dict[str, str]


def side_benchmark(
    registry: Registry, op_type: str, side: Any, backend: str, device: str, key: str
) -> OperatorBenchmark:
    """The benchmark a side runs: ``side.implementation`` (a registry entry by name), else the one available
    entry of ``side.backend`` (else ``backend``, the run's) serving ``op_type``; ``side.exe`` runs instead of
    the entry's command, with its parameters; ``side.python`` runs a Python entry's command."""
    if side.implementation:
        try:
            entry = registry.operator(side.implementation)
        except KeyError as err:  # the registry's own message names what is registered
            raise ConfigurationError(f"{key}.implementation={side.implementation}: {err.args[0]}") from err
    else:
        chosen = side.backend or backend
        found = [e for e in registry.serving(op_type, chosen, device) if e.available]
        if len(found) != 1:
            offered = ", ".join(f"{e.name} (backend={e.backend})" for e in registry.serving(op_type)) or "none"
            what = "no available" if not found else f"{len(found)} ({', '.join(e.name for e in found)})"
            raise ConfigurationError(
                f"{key}.backend={chosen}: {what} {op_type} benchmark(s) on {device}; name one with "
                f"{key}.implementation=<name> (registered for {op_type}: {offered})"
            )
        entry = found[0]
    if side.exe:
        entry = replace(entry, name=f"{entry.name}+{os.path.basename(side.exe[0])}",
                        command=resolve_command(list(side.exe), f"{key}.exe"))  # fmt: skip
    if side.python:
        entry = with_python(entry, side.python, key)
    reason = entry.unavailable_reason
    if reason:
        raise ConfigurationError(f"{key}: {entry.name} cannot run here: {reason}")
    return entry


def with_python(entry: OperatorBenchmark, python: str, key: str) -> OperatorBenchmark:
    """``entry`` with its Python command run by ``python`` (an interpreter of another environment): the
    embedded kernels then run as a program of their own, not in this interpreter's worker."""
    found = shutil.which(python) or python
    if not os.path.isabs(found) or not os.access(found, os.X_OK):
        raise ConfigurationError(f"{key}.python={python}: no such interpreter (give a path or a name on PATH)")
    if entry.command[0] != sys.executable:
        raise ConfigurationError(f"{key}.python={python}: {entry.name} runs {entry.command[0]}, not Python")
    return replace(entry, command=(found, *entry.command[1:]))


def side_settings(base: RunSettings, side: Any, rounds: int, python: str = "") -> RunSettings:
    """The run's settings with the side's threads, dtype and environment, in ``rounds`` rounds; another
    interpreter gets this project on its ``PYTHONPATH`` (unless the side sets one)."""
    env = {str(k): str(v) for k, v in dict(side.env).items()}
    if python and "PYTHONPATH" not in env:
        env["PYTHONPATH"] = str(PROJECT_ROOT)
    return replace(
        base,
        threads=resolve_threads(side.threads) if side.threads is not None else base.threads,
        dtype=side.dtype or base.dtype,
        rounds=rounds,
        extra_env=tuple(sorted(env.items())),
    )


def describe(entry: OperatorBenchmark, settings: RunSettings, side: Any) -> dict[str, str]:
    """What a side ran, as text: the values compared by :func:`differs`."""
    return {
        "implementation": entry.name,
        "backend": entry.backend,
        "threads": str(settings.threads),
        "dtype": settings.dtype,
        "exe": " ".join(side.exe),
        "python": side.python,
        "env": " ".join(f"{k}={v}" for k, v in sorted(dict(side.env).items())),
    }


def differs(a: dict[str, str], b: dict[str, str]) -> str:
    """``backend torch -> onednn; threads 1 -> 2``: the described values that differ."""
    return "; ".join(f"{k} {a.get(k) or '-'} -> {b.get(k) or '-'}" for k in a if a.get(k) != b.get(k))


def resolved(name: str, entry: OperatorBenchmark, operations: Sequence[Operation], settings: RunSettings,
             side: Any, stem: str) -> ResolvedSide:  # fmt: skip
    return ResolvedSide(name, Side(entry, operations, settings, stem), describe(entry, settings, side))

"""Each operation's dtype and memory format on its way to an executable (docs/protocol.md): refused up front
where the registry entry does not run them ("unable: bfloat16"), handed over per row as numbers after the
parameters where the entry takes them (``row_settings``), else by running each group of rows of one dtype and
memory format as an invocation of its own, told by ``DLBENCH_DTYPE`` and ``DLBENCH_MEMORY_FORMAT``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlbench.core.cpu_dtypes import instructions_note
from dlbench.core.dtypes import MEMORY_FORMATS
from dlbench.core.settings import ROW_SETTINGS, row_code, to_environment
from dlbench.core.values import Measurement, Operation, SweepResult
from dlbench.operators.registry import OperatorBenchmark

DEFAULT_MEMORY_FORMAT = MEMORY_FORMATS[0]


def row_values(operation: Operation, sweep_dtype: str) -> dict[str, str]:
    """The dtype and memory format ``operation`` runs in: its own, else the sweep's dtype and contiguous."""
    return {"dtype": operation.dtype or sweep_dtype, "memory_format": operation.memory_format or DEFAULT_MEMORY_FORMAT}


def unable_reason(entry: OperatorBenchmark, operation: Operation) -> str:
    """Why ``entry`` cannot run ``operation`` in the dtype or memory format the operation names ("unable:
    bfloat16 (onednn_conv runs float32)"), or empty. An operation in the sweep's own dtype is the
    executable's to refuse: ``dtype=`` says it for every row."""
    if operation.dtype and entry.dtypes and operation.dtype not in entry.dtypes:
        return f"unable: {operation.dtype} ({entry.name} runs {', '.join(entry.dtypes)})"
    if operation.memory_format and operation.memory_format not in entry.memory_formats:
        return f"unable: {operation.memory_format} ({entry.name} runs {', '.join(entry.memory_formats)})"
    return ""


def unable_measurement(operation_id: int, reason: str) -> Measurement:
    """The measurement of an operation its implementation cannot run as it ran: ``unsupported``, with why."""
    return Measurement(operation_id, None, f"unsupported: {reason}", unsupported=True)


def none_runnable(entry: OperatorBenchmark, operations: Sequence[Operation]) -> SweepResult | None:
    """Where ``entry`` runs none of ``operations`` in their dtype or memory format: each one ``unsupported``, and a
    run error that says so (not "no operation could be aligned"); None where it runs some."""
    reasons = {op.id: unable_reason(entry, op) for op in operations}
    if not operations or not all(reasons.values()):
        return None
    kinds = sorted({reason.split(" (")[0] for reason in reasons.values()})
    measurements = {op_id: unable_measurement(op_id, reason) for op_id, reason in reasons.items()}
    return SweepResult(measurements, run_error=(
        f"{entry.name} runs {', '.join(entry.dtypes) or 'its dtypes'} in {', '.join(entry.memory_formats)}, none "
        f"of these operations as they ran ({'; '.join(kinds)}): choose a backend that does, e.g. backend=torch"
    ))  # fmt: skip


def with_row_codes(
    entry: OperatorBenchmark, operations: Sequence[Operation], rows: Sequence[tuple[int, Sequence]], sweep_dtype: str
) -> list[tuple[int, Sequence]]:
    """``rows`` with the numbers of the entry's ``row_settings`` after each row's parameters."""
    if not entry.row_settings:
        return list(rows)
    by_id = {op.id: op for op in operations}
    out = []
    for op_id, values in rows:
        settings = row_values(by_id[op_id], sweep_dtype)
        out.append((op_id, [*values, *(row_code(key, settings[key]) for key in entry.row_settings)]))
    return out


@dataclass(frozen=True)
class RowGroup:
    """Rows an executable runs in one invocation, and the settings that invocation is told."""

    dtype: str
    memory_format: str
    rows: tuple[tuple[int, Sequence], ...]

    def environment(self) -> dict[str, str]:
        """``DLBENCH_MEMORY_FORMAT`` for a group not in the default layout (the dtype travels in RunSettings)."""
        if self.memory_format == DEFAULT_MEMORY_FORMAT:
            return {}
        return to_environment({"memory_format": self.memory_format})

    def suffix(self) -> str:
        """A name for the group's protocol files."""
        return f"{self.dtype}" + ("" if self.memory_format == DEFAULT_MEMORY_FORMAT else f"_{self.memory_format}")


def row_groups(
    entry: OperatorBenchmark, operations: Sequence[Operation], rows: Sequence[tuple[int, Sequence]], sweep_dtype: str
) -> list[RowGroup]:
    """``rows`` in groups of one value of each setting the entry does not take per row, in first-seen order
    (each row keeps its place in its group); a single group where nothing differs."""
    by_id = {op.id: op for op in operations}
    grouped: dict[tuple[str, str], list[tuple[int, Sequence]]] = {}
    for op_id, values in rows:
        settings = row_values(by_id[op_id], sweep_dtype)
        key = tuple(
            settings[name] if name not in entry.row_settings else "" for name in ROW_SETTINGS
        )  # the per-row ones do not split
        grouped.setdefault(key, []).append((op_id, values))  # type: ignore[arg-type]
    return [
        RowGroup(dtype or sweep_dtype, layout or DEFAULT_MEMORY_FORMAT, tuple(group))
        for (dtype, layout), group in grouped.items()
    ]


def merge_text_files(target: Path, parts: Sequence[Path]) -> None:
    """``target`` from ``parts`` in order, a header line (first field ``id``) kept only where it comes first;
    nothing is written when no part exists."""
    present = [p for p in parts if p.exists()]
    if not present:
        return
    lines: list[str] = []
    for part in present:
        for line in part.read_text(encoding="utf-8", errors="replace").splitlines():
            if not lines or line.partition(",")[0].strip().lower() != "id":
                lines.append(line)
    target.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def unable_line(operations: Sequence[Operation], result: SweepResult) -> str:
    """One line naming the operations the sweep could not time in the dtype or memory format they ran in, by
    reason ("unable: bfloat16 (onednn_conv runs float32): ids 1, 4"), or empty."""
    by_reason: dict[str, list[int]] = {}
    for op in operations:
        m = result.measurements.get(op.id)
        if m is not None and not m.ok and "unable: " in m.error:
            reason = m.error[m.error.index("unable: ") :]
            by_reason.setdefault(reason, []).append(op.id)
    if not by_reason:
        return ""
    count = sum(len(ids) for ids in by_reason.values())
    parts = [f"{reason}: ids {', '.join(map(str, ids[:8]))}{' ...' if len(ids) > 8 else ''}"
             for reason, ids in by_reason.items()]  # fmt: skip
    return f"{count} operations could not be timed as they ran: " + "; ".join(parts)


def sweep_notes(operations: Sequence[Operation], result: SweepResult, sweep_dtype: str, device: str) -> list[str]:
    """What a sweep says about its rows' dtypes: those it could not time, and a dtype this CPU computes without
    instructions of its own."""
    dtypes = {row_values(op, sweep_dtype)["dtype"] for op in operations}
    return [line for line in (unable_line(operations, result), instructions_note(dtypes, device)) if line]

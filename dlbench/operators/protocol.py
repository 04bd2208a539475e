"""The executable CSV protocol of operator benchmarks: write the input, run the program, parse its output.

Input: ``<name>.csv`` with one row ``id, p1, p2, ...`` per operation and no header. The program gets the
path as its last argument and writes ``<input stem>_out.csv`` beside it: an optional header ``id, <unit>``
(unit one of s, ms, us, ns; ms when there is no header or the column is called ``time``), optionally more
named statistic columns (:data:`OUTPUT_COLUMNS`: ``min, max, mean, std, iqr, p10, p90, ci_low, ci_high`` in
the same unit, ``reps``, ``converged``; ``cpu_efficiency``, see :data:`EFFICIENCY_COLUMN`; empty when
unknown), then one ``id, time[, ...]`` row per operation. It may also write ``<input stem>_samples.csv``
(``id,<unit>`` then one row per timed repetition), from which dlbench recomputes every statistic. Settings
reach the program through environment variables (:data:`ENV_VARS`): the command line stays the original one.

An executable registered with ``node_file: true`` also finds ``<input stem>_nodes.json`` beside the input
(:mod:`dlbench.operators.node_file`). Other executables never see it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.core.settings import EXECUTABLE_SETTINGS, MEMORY_FORMAT_SETTING
from dlbench.core.values import TIME_UNITS_TO_MS, Number, TimeStats

#: Environment variables an executable may read (see :mod:`dlbench.core.settings`). Unset: its own default.
ENV_VARS = {s.env: s.help for s in (*EXECUTABLE_SETTINGS, MEMORY_FORMAT_SETTING)}

MAX_OUTPUT_BYTES = 64 * 1024 * 1024


class ProtocolError(ValueError):
    """An output file that does not follow the protocol; the message names the file and the row."""


def output_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_out.csv")


def format_value(value: Number) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def write_input(path: Path, rows: Iterable[tuple[int, Sequence[Number]]]) -> Path:
    """Write ``id, p1, p2, ...`` rows (no header) to ``path``; the outputs of an earlier run of the same
    input are removed, so they can never pass for this run's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    output_path_for(path).unlink(missing_ok=True)
    samples_path_for(path).unlink(missing_ok=True)
    lines = [",".join([str(op_id), *(format_value(v) for v in values)]) for op_id, values in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_input(path: Path) -> list[tuple[int, list[float]]]:
    """Parse an input CSV, as an executable sees it (used by the embedded backends and tests)."""
    rows: list[tuple[int, list[float]]] = []
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ProtocolError(f"{path}:{line}: not UTF-8 text (byte {err.start})") from err
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            rows.append((int(fields[0]), [float(f) for f in fields[1:]]))
        except ValueError as err:
            raise ProtocolError(f"{path}:{lineno}: not a row of numbers: {line[:200]!r}") from err
    return rows


@dataclass(frozen=True)
class ParsedOutput:
    """Rows that parsed, by id, and one message per row that did not (naming file and line); ``launch_ms``: by
    id, the host ms of issuing one call, where the row has the ``launch`` column."""

    unit: str
    rows: Mapping[int, TimeStats]
    problems: Sequence[str]
    #: the problems that concern one asked-for id (a bad row of that id), by id
    problems_by_id: Mapping[int, Sequence[str]] = field(default_factory=dict)
    #: the raw samples file the statistics were recomputed from, when the executable wrote one
    samples_path: Path | None = None
    #: by id, where the row has it: CPU time over (wall x threads that took part) while it was timed
    cpu_efficiency: Mapping[int, float] = field(default_factory=dict)
    launch_ms: Mapping[int, float] = field(default_factory=dict)


#: Optional statistic columns after ``id, <time>``: times in the header's unit, ``reps`` a count,
#: ``converged`` 0/1. Missing ones (or empty cells, ``nan``, ``NA``) are missing, never 0 or 1.
TIME_COLUMNS = ("min", "max", "mean", "std", "iqr", "p10", "p90", "ci_low", "ci_high")
OUTPUT_COLUMNS = ("min", "max", "mean", "std", "iqr", "reps", "p10", "p90", "ci_low", "ci_high", "converged")
#: Optional column: the row's CPU time over (wall time x threads that took part) while it was timed
#: (:mod:`dlbench.core.contention`); where a program does not write it, dlbench reads its process tree.
EFFICIENCY_COLUMN = "cpu_efficiency"
_MISSING = ("", "na", "nan", "none")


def _optional(text: str) -> float | None:
    # float() also takes "1_000" and "infinity": fine, since non-finite times are rejected
    return None if text.strip().lower() in _MISSING else float(text)


def _leading_id(fields: Sequence[str]) -> int | None:
    try:
        return int(fields[0])
    except (ValueError, IndexError):
        return None


def samples_path_for(input_path: Path) -> Path:
    """``<stem>_samples.csv`` beside the input ``<stem>.csv``: where a program may write its raw samples."""
    return input_path.with_name(f"{input_path.stem}_samples.csv")


def _samples_beside_output(output_path: Path) -> Path | None:
    name = output_path.name
    return output_path.with_name(name[: -len("_out.csv")] + "_samples.csv") if name.endswith("_out.csv") else None


def _stats_from_columns(values: Mapping[str, float | None], factor: float) -> TimeStats:
    def time(name: str) -> float | None:
        v = values.get(name)
        return v * factor if v is not None and math.isfinite(v) and v >= 0 else None

    reps = values.get("reps")
    converged = values.get("converged")
    return TimeStats(
        median_ms=float(values["time"] or 0.0) * factor,
        min_ms=time("min"),
        max_ms=time("max"),
        mean_ms=time("mean"),
        std_ms=time("std"),
        iqr_ms=time("iqr"),
        reps=int(reps) if reps is not None and math.isfinite(reps) and reps >= 1 else None,
        p10_ms=time("p10"),
        p90_ms=time("p90"),
        ci_low_ms=time("ci_low"),
        ci_high_ms=time("ci_high"),
        converged=None if converged is None or not math.isfinite(converged) else bool(converged),
    )


def _honest(stats: TimeStats, target_rel_ci: float | None, asked_reps: int | None) -> TimeStats:
    """``stats`` judged against the target (where it carries an interval), with a note for whatever is
    weaker than asked."""
    stats = stats.judged(target_rel_ci)
    if stats.reps is None:
        stats = stats.with_note("repetitions not reported")
    elif asked_reps is not None and stats.reps < asked_reps:
        stats = stats.with_note(f"{stats.reps} repetitions, {asked_reps} asked")
    if target_rel_ci is not None and stats.converged is None:
        stats = stats.with_note("no confidence interval reported: convergence unknown")
    return stats


def read_samples(path: Path, expected_ids: Iterable[int] | None = None) -> tuple[dict[int, list[float]], list[str]]:
    """The raw samples file (header ``id,<unit>``, one row per timed repetition) in milliseconds by id, and
    one message per line that does not parse."""
    samples: dict[int, list[float]] = {}
    problems: list[str] = []
    expected = set(expected_ids) if expected_ids is not None else None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        return {}, [f"{path}: cannot read the samples file: {err}"]
    if not lines:
        return {}, []
    head = [f.strip().lower() for f in lines[0].split(",")]
    if len(head) != 2 or head[0] != "id" or head[1] not in TIME_UNITS_TO_MS:
        return {}, [f"{path}:1: expected the header 'id,<unit>' with a unit of {', '.join(TIME_UNITS_TO_MS)}"]
    factor = TIME_UNITS_TO_MS[head[1]]
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split(",")
        try:
            if len(fields) != 2:
                raise ValueError
            op_id, value = int(fields[0]), float(fields[1])
            if not math.isfinite(value) or value < 0:
                raise ValueError
        except ValueError:
            problems.append(f"{path}:{lineno}: not 'id, time': {line[:200]!r}")
            continue
        if expected is None or op_id in expected:
            samples.setdefault(op_id, []).append(value * factor)
    return samples, problems


def parse_output(
    path: Path,
    expected_ids: Iterable[int] | None = None,
    max_bytes: int = MAX_OUTPUT_BYTES,
    *,
    target_rel_ci: float | None = None,
    asked_reps: int | None = None,
) -> ParsedOutput:
    """Parse ``<stem>_out.csv``. Rows that do not parse are reported, not fatal, so good rows survive.

    Where the executable also wrote ``<stem>_samples.csv``, every statistic of an id is recomputed from its
    samples (so that artifact reproduces the table). ``target_rel_ci`` judges convergence; ``asked_reps``
    (the ``min_reps`` the program was given) marks rows with fewer repetitions.

    Raises :class:`ProtocolError` when the file as a whole is unusable (missing, too big, not text, empty).
    """
    content = [(i, line) for i, line in enumerate(_output_text(path, max_bytes).splitlines(), start=1) if line.strip()]
    if not content:
        raise ProtocolError(f"{path}: output file is empty")
    unit, columns, has_header = _header(path, *content[0])
    data = content[1:] if has_header else content
    if not data:
        raise ProtocolError(f"{path}: output has a header but no rows")
    table = _OutputRows(set(expected_ids) if expected_ids is not None else None, TIME_UNITS_TO_MS[unit])
    for lineno, line in data:
        table.add(f"{path}:{lineno}", lineno, line, columns, has_header)
    samples_path = _samples_beside_output(path)
    if samples_path is not None and samples_path.is_file():
        table.recompute_from_samples(samples_path, target_rel_ci)
    else:
        samples_path = None
    return ParsedOutput(
        unit=unit,
        rows={op_id: _honest(stats, target_rel_ci, asked_reps) for op_id, stats in table.rows.items()},
        problems=table.problems,
        problems_by_id={k: tuple(v) for k, v in table.by_id.items()},
        samples_path=samples_path,
        cpu_efficiency=table.efficiency,
        launch_ms=table.launch,
    )


def _output_text(path: Path, max_bytes: int) -> str:
    """The output file as text, or a :class:`ProtocolError` saying why it is unusable as a whole."""
    if not path.exists():
        raise ProtocolError(f"{path}: the benchmark wrote no output file")
    if not path.is_file():
        raise ProtocolError(f"{path}: the output is not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ProtocolError(f"{path}: output is {size} bytes, over the {max_bytes}-byte limit")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ProtocolError(
            f"{path}:{line}: not UTF-8 text (byte {err.start}: {raw[err.start : err.start + 8]!r})"
        ) from err


def _header(path: Path, lineno: int, head: str) -> tuple[str, list[str], bool]:
    """The time unit, the column names and whether the first non-empty line is a header (``id, <unit>, ...``)."""
    fields = [f.strip().lower() for f in head.split(",")]
    if fields[0] != "id":
        return "ms", ["id", "time"], False
    if len(fields) < 2:
        raise ProtocolError(f"{path}:{lineno}: header {head!r} names no time column")
    unit = "ms" if (fields[1] or "ms") == "time" else (fields[1] or "ms")
    if unit not in TIME_UNITS_TO_MS:
        raise ProtocolError(
            f"{path}:{lineno}: unknown time unit {fields[1]!r}; use one of {', '.join(TIME_UNITS_TO_MS)}"
        )
    return unit, ["id", "time", *fields[2:]], True


class _OutputRows:
    """The rows of one output file as they are read: statistics per id, and each problem (per id too)."""

    def __init__(self, expected: set[int] | None, factor: float) -> None:
        self.expected, self.factor = expected, factor
        self.rows: dict[int, TimeStats] = {}
        self.efficiency: dict[int, float] = {}
        self.launch: dict[int, float] = {}
        self.first_line: dict[int, int] = {}
        self.problems: list[str] = []
        self.by_id: dict[int, list[str]] = {}

    def report(self, message: str, op_id: int | None = None) -> None:
        self.problems.append(message)
        if op_id is not None and (self.expected is None or op_id in self.expected):
            self.by_id.setdefault(op_id, []).append(message)

    def add(self, where: str, lineno: int, line: str, columns: list[str], has_header: bool) -> None:
        """One data line: kept, or reported (to its id where it names one) and skipped."""
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != (len(columns) if has_header else 2):
            count = f"{len(fields)} columns, the header has {len(columns)}" if has_header else (
                f"expected 'id, time', got {len(fields)} columns")  # fmt: skip
            return self.report(f"{where}: {count}: {line[:200]!r}", _leading_id(fields))
        try:
            op_id = int(fields[0])
        except ValueError:
            return self.report(f"{where}: id {fields[0][:50]!r} is not an integer")
        try:
            values = {name: _optional(v) for name, v in zip(columns[1:], fields[1:], strict=True)}
            values["time"] = float(fields[1])
        except ValueError:
            return self.report(f"{where}: id {op_id}: a time is not a number: {line[:200]!r}", op_id)
        if not math.isfinite(values["time"]) or values["time"] <= 0:
            return self.report(f"{where}: id {op_id}: time {fields[1][:50]!r} is not a finite positive number", op_id)
        if self.expected is not None and op_id not in self.expected:
            return self.report(f"{where}: id {op_id} was never asked for")
        if op_id in self.rows:
            return self.report(
                f"{where}: id {op_id} appears more than once (first at line {self.first_line[op_id]})", op_id
            )
        self.first_line[op_id] = lineno
        self.rows[op_id] = _stats_from_columns(values, self.factor)
        cpu = values.get(EFFICIENCY_COLUMN)
        if cpu is not None and math.isfinite(cpu) and cpu > 0:
            self.efficiency[op_id] = cpu
        if (issuing := values.get(LAUNCH_COLUMN)) is not None and math.isfinite(issuing) and issuing >= 0:
            self.launch[op_id] = issuing * self.factor

    def recompute_from_samples(self, samples_path: Path, target_rel_ci: float | None) -> None:
        """Every statistic of an id with samples recomputed from them (a count that disagrees is noted)."""
        samples, sample_problems = read_samples(samples_path, self.rows)
        self.problems.extend(sample_problems)
        for op_id, taken in samples.items():
            recomputed = TimeStats.from_samples(taken, target_rel_ci)
            reported = self.rows[op_id].reps
            if reported is not None and reported != len(taken):
                recomputed = recomputed.with_note(f"{len(taken)} samples written, {reported} repetitions reported")
            self.rows[op_id] = recomputed


def ids_written(path: Path) -> list[int]:
    """The ids of the complete rows an executable has written to its output so far (while it runs)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    ids = []
    for line in text.split("\n")[:-1]:  # the last piece is an unfinished row, or empty
        head = line.partition(",")[0].strip()
        if head.lstrip("-").isdigit():
            ids.append(int(head))
    return ids


#: Optional last column: the median host time of issuing one call, where the device time is timed apart
#: (CUDA events); the host lane of the GPU timeline (:mod:`dlbench.analysis.timeline`) reads it.
LAUNCH_COLUMN = "launch"


def output_header(unit: str = "ms", launch: bool = False) -> str:
    """The header line of an output file with every statistic column and the cpu efficiency (what the
    embedded backends write), and :data:`LAUNCH_COLUMN` last with ``launch``."""
    return ",".join(["id", unit, *OUTPUT_COLUMNS, EFFICIENCY_COLUMN, *([LAUNCH_COLUMN] if launch else [])]) + "\n"


def output_row(
    op_id: int,
    stats: TimeStats,
    unit: str = "ms",
    cpu_efficiency: float | None = None,
    launch_ms: float | None | bool = False,
) -> str:
    """One output line for ``stats`` under :func:`output_header`; missing statistics are empty cells.
    ``launch_ms`` (None: not measured) fills the launch column of a header written with ``launch``; False: no
    such column."""
    factor = TIME_UNITS_TO_MS[unit]
    cells = [str(op_id), repr(stats.median_ms / factor)]
    for name in OUTPUT_COLUMNS:
        value = getattr(stats, f"{name}_ms") if name in TIME_COLUMNS else getattr(stats, name)
        if value is None:
            cells.append("")
        elif name in TIME_COLUMNS:
            cells.append(repr(value / factor))
        else:
            cells.append(str(int(value)))
    cells.append("" if cpu_efficiency is None else f"{cpu_efficiency:.4f}")
    if launch_ms is not False:
        cells.append("" if launch_ms is None or launch_ms is True else repr(launch_ms / factor))
    return ",".join(cells) + "\n"


SAMPLES_HEADER = "id,ms\n"


def samples_rows(op_id: int, samples_ms: Iterable[float]) -> str:
    """The raw samples of one operation as lines of a samples file (7 significant digits: far below timer
    noise, and half the size of exact floats)."""
    return "".join(f"{op_id},{value:.7g}\n" for value in samples_ms)


def write_output(path: Path, rows: Iterable[tuple[int, TimeStats]], unit: str = "ms") -> None:
    """Write an output file with the extended statistic columns (what the embedded backends produce)."""
    with path.open("w", encoding="utf-8") as handle:
        handle.write(output_header(unit))
        for op_id, stats in rows:
            handle.write(output_row(op_id, stats, unit))

"""The executable CSV protocol of operator benchmarks: write the input, run the program, parse its output.

Input: ``<name>.csv`` with one row ``id, p1, p2, ...`` per operation and no header. The program gets the
path as its last argument and writes ``<input stem>_out.csv`` beside it: an optional header ``id, <unit>``
(unit one of s, ms, us, ns; ms when there is no header or the column is called ``time``), optionally more
named statistic columns in the same unit (``min, max, mean, std, iqr``) and ``reps``, then one
``id, time[, ...]`` row per operation. Measurement settings reach the program through environment
variables (see :data:`ENV_VARS`), so the command line stays exactly the original one.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dlbench.model import TIME_UNITS_TO_MS, Number, TimeStats

#: Environment variables an executable may read. Unset means "use your own default".
ENV_VARS = {
    "DLBENCH_WARMUP": "warm-up repetitions before timing",
    "DLBENCH_MIN_REPS": "minimum timed repetitions",
    "DLBENCH_MAX_REPS": "maximum timed repetitions",
    "DLBENCH_MIN_TIME_S": "keep repeating until this many seconds were timed",
    "DLBENCH_THREADS": "CPU threads (0: the library's default)",
    "DLBENCH_DEVICE": "cpu or cuda",
    "DLBENCH_DTYPE": "float32, float16 or bfloat16",
    "DLBENCH_VERIFY": "1: compare small problems with a reference and exit non-zero on mismatch",
    "DLBENCH_OP_BUDGET_S": "seconds one operation may take (warm-up and repetitions); 0: no limit",
    "DLBENCH_MEMORY_FRACTION": "skip an operation whose tensors need more than this fraction of free memory",
}

MAX_OUTPUT_BYTES = 64 * 1024 * 1024
STDERR_KEEP_BYTES = 256 * 1024
#: stdout or stderr beyond this size means a runaway program: it is stopped before it fills the disk
MAX_LOG_BYTES = 1024 * 1024 * 1024


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
    """Write ``id, p1, p2, ...`` rows (no header) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
    """Rows that parsed, by id, and one message per row that did not (naming file and line)."""

    unit: str
    rows: Mapping[int, TimeStats]
    problems: Sequence[str]
    #: the problems that concern one asked-for id (a bad row of that id), by id
    problems_by_id: Mapping[int, Sequence[str]] = field(default_factory=dict)


def _number(text: str) -> float:
    # float() also takes "1_000" and surrounding junk-free spellings like "infinity"; both are fine here,
    # since non-finite times are rejected below.
    return float(text)


def _leading_id(fields: Sequence[str]) -> int | None:
    try:
        return int(fields[0])
    except (ValueError, IndexError):
        return None


def parse_output(
    path: Path, expected_ids: Iterable[int] | None = None, max_bytes: int = MAX_OUTPUT_BYTES
) -> ParsedOutput:
    """Parse ``<stem>_out.csv``. Rows that do not parse are reported, not fatal, so good rows survive.

    Raises :class:`ProtocolError` when the file as a whole is unusable (missing, too big, not text, empty).
    """
    if not path.exists():
        raise ProtocolError(f"{path}: the benchmark wrote no output file")
    if not path.is_file():
        raise ProtocolError(f"{path}: the output is not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ProtocolError(f"{path}: output is {size} bytes, over the {max_bytes}-byte limit")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ProtocolError(
            f"{path}:{line}: not UTF-8 text (byte {err.start}: {raw[err.start : err.start + 8]!r})"
        ) from err
    lines = text.splitlines()
    problems: list[str] = []
    unit = "ms"
    columns = ["id", "time"]
    first_data = 0
    content = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    if not content:
        raise ProtocolError(f"{path}: output file is empty")
    head_lineno, head = content[0]
    head_fields = [f.strip().lower() for f in head.split(",")]
    if head_fields[0] == "id":
        first_data = 1
        if len(head_fields) < 2:
            raise ProtocolError(f"{path}:{head_lineno}: header {head!r} names no time column")
        unit_field = head_fields[1] or "ms"
        unit = "ms" if unit_field == "time" else unit_field
        if unit not in TIME_UNITS_TO_MS:
            raise ProtocolError(
                f"{path}:{head_lineno}: unknown time unit {head_fields[1]!r}; use one of {', '.join(TIME_UNITS_TO_MS)}"
            )
        columns = ["id", "time", *head_fields[2:]]
    factor = TIME_UNITS_TO_MS[unit]
    expected = set(expected_ids) if expected_ids is not None else None
    rows: dict[int, TimeStats] = {}
    first_line: dict[int, int] = {}
    by_id: dict[int, list[str]] = {}

    def report(message: str, op_id: int | None = None) -> None:
        problems.append(message)
        if op_id is not None and (expected is None or op_id in expected):
            by_id.setdefault(op_id, []).append(message)

    data = content[first_data:]
    if not data:
        raise ProtocolError(f"{path}: output has a header but no rows")
    for lineno, line in data:
        where = f"{path}:{lineno}"
        fields = [f.strip() for f in line.split(",")]
        if first_data and len(fields) != len(columns):
            report(
                f"{where}: {len(fields)} columns, the header has {len(columns)}: {line[:200]!r}", _leading_id(fields)
            )
            continue
        if not first_data and len(fields) != 2:
            report(f"{where}: expected 'id, time', got {len(fields)} columns: {line[:200]!r}", _leading_id(fields))
            continue
        try:
            op_id = int(fields[0])
        except ValueError:
            report(f"{where}: id {fields[0][:50]!r} is not an integer")
            continue
        try:
            values = {name: _number(v) for name, v in zip(columns[1:], fields[1:], strict=True)}
        except ValueError:
            report(f"{where}: id {op_id}: a time is not a number: {line[:200]!r}", op_id)
            continue
        time_value = values["time"]
        if not math.isfinite(time_value) or time_value <= 0:
            report(f"{where}: id {op_id}: time {fields[1][:50]!r} is not a finite positive number", op_id)
            continue
        if expected is not None and op_id not in expected:
            report(f"{where}: id {op_id} was never asked for")
            continue
        if op_id in rows:
            report(f"{where}: id {op_id} appears more than once (first at line {first_line[op_id]})", op_id)
            continue
        first_line[op_id] = lineno
        median = time_value * factor

        def stat(name: str, fallback: float, value_map: dict[str, float] = values) -> float:
            v = value_map.get(name)
            return v * factor if v is not None and math.isfinite(v) and v >= 0 else fallback

        reps_value = values.get("reps")
        reps = int(reps_value) if reps_value is not None and math.isfinite(reps_value) else 1
        rows[op_id] = TimeStats(
            median_ms=median,
            min_ms=stat("min", median),
            max_ms=stat("max", median),
            mean_ms=stat("mean", median),
            std_ms=stat("std", 0.0),
            iqr_ms=stat("iqr", 0.0),
            reps=max(reps, 1),
        )
    return ParsedOutput(unit=unit, rows=rows, problems=problems, problems_by_id={k: tuple(v) for k, v in by_id.items()})


def write_output(path: Path, rows: Iterable[tuple[int, TimeStats]], unit: str = "ms") -> None:
    """Write an output file with the extended statistic columns (what the embedded backends produce)."""
    factor = TIME_UNITS_TO_MS[unit]
    with path.open("w", encoding="utf-8") as handle:
        handle.write(f"id,{unit},min,max,mean,std,iqr,reps\n")
        for op_id, s in rows:
            values = [s.median_ms, s.min_ms, s.max_ms, s.mean_ms, s.std_ms, s.iqr_ms]
            handle.write(",".join([str(op_id), *(repr(v / factor) for v in values), str(s.reps)]) + "\n")


@dataclass(frozen=True)
class ProcessResult:
    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    #: set when the program was stopped for writing too much: which stream and how many bytes
    flooded: str = ""

    def describe_failure(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s and was killed"
        if self.flooded:
            return f"wrote {self.flooded} and was stopped"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            if name == "SIGKILL":
                # Nobody here sent it: on Linux that is almost always the kernel's out-of-memory killer.
                return (
                    "was killed by SIGKILL, most likely by the out-of-memory killer (see `dmesg`); "
                    "try smaller shapes, a smaller batch_size or a lower measure.memory_fraction"
                )
            return f"was killed by {name}"
        if self.returncode:
            return f"exited with status {self.returncode}"
        return ""


def _read_tail(handle: IO[bytes], keep: int = STDERR_KEEP_BYTES) -> str:
    """The last ``keep`` bytes of a file, without reading a flood of output into memory."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - keep))
    text = handle.read().decode("utf-8", "replace")
    return f"[... {size - keep} earlier bytes dropped ...]\n{text}" if size > keep else text


def run_command(
    command: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stderr_path: Path | None = None,
    on_poll: Callable[[], None] | None = None,
    poll_interval_s: float = 0.25,
    max_log_bytes: int = MAX_LOG_BYTES,
) -> ProcessResult:
    """Run an argument list in its own process group; on timeout or interrupt kill the whole group.

    stdout and stderr go to files (not pipes), so a program that floods them can neither block nor
    exhaust memory; only the tail of each is kept (and written to ``stderr_path``, even on interrupt).
    A program that writes more than ``max_log_bytes`` to either is stopped like one that timed out.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
            list(command),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
        timed_out = False
        flooded = ""
        deadline = start + timeout
        try:
            while True:
                try:
                    proc.wait(timeout=max(0.0, min(poll_interval_s, deadline - time.perf_counter())))
                    break
                except subprocess.TimeoutExpired:
                    if time.perf_counter() >= deadline:
                        timed_out = True
                        kill_process_group(proc)
                        break
                    flooded = _flooded(out, err, max_log_bytes)
                    if flooded:
                        kill_process_group(proc)
                        break
                    if on_poll is not None:
                        on_poll()
            _kill_leftovers(proc)
        except BaseException:
            kill_process_group(proc)
            raise
        finally:
            stderr = _read_tail(err)
            if stderr_path is not None:
                stderr_path.write_text(stderr, encoding="utf-8")
        seconds = time.perf_counter() - start
        stdout = _read_tail(out)
    return ProcessResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        stdout=stdout,
        stderr=stderr,
        seconds=seconds,
        flooded=flooded,
    )


def _flooded(out: IO[bytes], err: IO[bytes], limit: int) -> str:
    for name, handle in (("stdout", out), ("stderr", err)):
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            return f"{size} bytes to {name}, over the {limit}-byte limit,"
    return ""


def _kill_leftovers(proc: subprocess.Popen) -> None:
    """Children the program started and left running die with it: a sweep leaves no orphans."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the child's process group, then SIGKILL what is left after ``grace`` seconds.

    The group is killed even when a second Ctrl-C interrupts the grace period, and grandchildren that
    outlive the leader are killed too (the group id stays valid while any member lives)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

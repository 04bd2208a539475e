"""The reuse store: one SQLite table of operation results, keyed by everything that makes a measurement
comparable (system, implementation, device, dtype, threads, measurement settings, dlbench version) and the
operation itself (op type and parameters). An operation already measured under the same key is reused,
not measured again. The store sits in dlbench's own folder ``.dlbench/`` beside the MLflow store (or where the
user names it: ``reuse_store``); it holds copies of what the runs logged, so a corrupt file is set aside with a
warning and rebuilt, never a reason to fail."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from dlbench.core.values import Operation, SweepResult, TimeStats
from dlbench.onnx.opdb import operation_key

log = logging.getLogger(__name__)

T = TypeVar("T")

FILE_NAME = "dlbench_reuse.db"
KEY_FIELDS = ("system_id", "implementation", "command", "device", "dtype", "threads", "settings", "version")
#: Every field of TimeStats; a statistic the executable did not report stays NULL (missing, not invented).
STAT_FIELDS = tuple(f.name for f in fields(TimeStats))
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS timings (
    {", ".join(f"{k} TEXT NOT NULL" for k in KEY_FIELDS)},
    op_type TEXT NOT NULL,
    params TEXT NOT NULL,
    median_ms REAL NOT NULL,
    {", ".join(f"{s}" for s in STAT_FIELDS if s != "median_ms")},
    cost_s REAL NOT NULL,
    measured_at REAL NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY ({", ".join(KEY_FIELDS)}, op_type, params)
)
"""


@dataclass(frozen=True)
class ReuseKey:
    """What two measurements must share to stand for each other."""

    system_id: str
    implementation: str
    command: str  # the implementation's program and parameter order: a changed entry is another one
    device: str
    dtype: str
    threads: int
    settings: Mapping[str, float | int]
    version: str

    def values(self) -> tuple[str, ...]:
        settings = json.dumps(dict(sorted(self.settings.items())), separators=(",", ":"))
        return (
            self.system_id, self.implementation, self.command, self.device, self.dtype, str(self.threads),
            settings, self.version,
        )  # fmt: skip


@dataclass(frozen=True)
class Reused:
    """A stored result: its statistics and the seconds measuring it took (an estimate, see :func:`costs`)."""

    stats: TimeStats
    cost_s: float
    run_id: str


def operation_params(op: Operation) -> str:
    """The operation's part of the key: its parameters and, where it has them, a digest of its inputs' shapes
    and ONNX node (:func:`dlbench.onnx.opdb.operation_key`): two Concats with the same output and other
    inputs have the same parameters but are other problems."""
    params = json.dumps([[d, v] for d, v in op.params], separators=(",", ":"))
    _, _, shapes, node, layout = operation_key(op)
    if not shapes and node is None and not any(layout):
        return params
    keyed = (shapes, node, layout) if any(layout) else (shapes, node)  # a row's own dtype or memory format
    digest = hashlib.sha1(repr(keyed).encode(), usedforsecurity=False).hexdigest()[:16]
    return f"{params}|{digest}"


def costs(operations: Sequence[Operation], result: SweepResult, warmup: int) -> dict[int, float]:
    """Seconds each measured operation took: the sweep's wall time shared out by each operation's timed
    calls (warm-up plus repetitions, at its mean time). An estimate: start-up and set-up are spread too."""
    seconds = float(result.extra.get("seconds", 0.0) or 0.0)
    weights = {}
    for op in operations:
        m = result.measurements.get(op.id)
        if m is not None and m.ok and m.stats is not None:
            weights[op.id] = ((m.stats.reps or 1) + warmup) * (m.stats.mean_ms or m.stats.median_ms)
    total = sum(weights.values())
    if not weights:
        return {}
    if total <= 0:
        return {i: seconds / len(weights) for i in weights}
    return {i: seconds * w / total for i, w in weights.items()}


def _is_locked(err: sqlite3.Error) -> bool:
    return "locked" in str(err) or "busy" in str(err)


class ReuseStore:
    """The store at ``path``: created on first use, safe for parallel jobs (SQLite locking with a busy
    timeout and retries), set aside and rebuilt when it cannot be read."""

    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.warnings: list[str] = []
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)

    def _retry(self, fn: Callable[[sqlite3.Connection], T], attempts: int = 8) -> T:
        """Run ``fn`` on a fresh connection; "database is locked" is retried, a damaged file rebuilt once."""
        rebuilt = False
        for attempt in range(attempts):
            connection = None
            try:
                connection = self._connect()
                if not self._ready:
                    self._prepare(connection)
                return fn(connection)
            except sqlite3.OperationalError as err:
                if _is_locked(err) and attempt + 1 < attempts:
                    time.sleep(0.05 * 2**attempt)
                    continue
                if _is_locked(err) or rebuilt:
                    raise
                self._set_aside(err)
                rebuilt = True
            except sqlite3.DatabaseError as err:
                if rebuilt:
                    raise
                self._set_aside(err)
                rebuilt = True
            finally:
                if connection is not None:
                    connection.close()
        raise sqlite3.OperationalError(f"{self.path}: still locked after {attempts} attempts")

    def _prepare(self, connection: sqlite3.Connection) -> None:
        # a truncated or foreign file may open fine and fail only on reading: check it first
        (status,) = connection.execute("PRAGMA quick_check").fetchone()
        if status != "ok":
            raise sqlite3.DatabaseError(f"integrity check: {status}")
        connection.execute(_SCHEMA)  # IF NOT EXISTS: parallel first uses agree
        self._ready = True

    def _set_aside(self, err: Exception) -> None:
        """Move the unreadable file out of the way (kept for inspection) so a new store is built."""
        target = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        message = f"reuse store {self.path} cannot be read ({err}); set aside as {target.name}, rebuilding it"
        log.warning("%s", message)
        self.warnings.append(message)
        self._ready = False
        for suffix in ("", "-journal", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            try:
                source.replace(Path(f"{target}{suffix}"))
            except FileNotFoundError:
                continue  # another job set it aside first

    def lookup(self, key: ReuseKey, operations: Iterable[Operation]) -> dict[int, Reused]:
        """Stored results for ``operations`` under ``key``, by operation id."""
        wanted = {(op.op_type, operation_params(op)): op.id for op in operations}
        if not wanted:
            return {}
        where = " AND ".join(f"{k} = ?" for k in KEY_FIELDS)
        query = f"SELECT op_type, params, {', '.join(STAT_FIELDS)}, cost_s, run_id FROM timings WHERE {where}"

        def read(connection: sqlite3.Connection) -> list[tuple]:
            return connection.execute(query, key.values()).fetchall()

        found: dict[int, Reused] = {}
        for row in self._retry(read):
            op_id = wanted.get((row[0], row[1]))
            if op_id is None:
                continue
            values = dict(zip(STAT_FIELDS, row[2 : 2 + len(STAT_FIELDS)], strict=True))
            values["reps"] = None if values["reps"] is None else int(values["reps"])
            values["converged"] = None if values["converged"] is None else bool(values["converged"])
            values["note"] = values["note"] or ""
            stats = TimeStats(**values)
            found[op_id] = Reused(stats=stats, cost_s=float(row[-2]), run_id=str(row[-1]))
        return found

    def record(
        self,
        key: ReuseKey,
        operations: Sequence[Operation],
        result: SweepResult,
        cost_s: Mapping[int, float],
        run_id: str,
    ) -> int:
        """Store every operation measured ok (not one measured while its threads waited for cores); returns how
        many."""
        now = time.time()
        rows = []
        for op in operations:
            m = result.measurements.get(op.id)
            if m is None or not m.ok or m.contended or m.stats is None:
                continue
            stats = {f: getattr(m.stats, f) for f in STAT_FIELDS}
            rows.append(
                (
                    *key.values(),
                    op.op_type,
                    operation_params(op),
                    *(stats[s] for s in STAT_FIELDS),
                    float(cost_s.get(op.id, 0.0)),
                    now,
                    run_id,
                )  # fmt: skip
            )
        if not rows:
            return 0
        marks = ", ".join("?" * (len(KEY_FIELDS) + len(STAT_FIELDS) + 5))

        def write(connection: sqlite3.Connection) -> int:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(f"INSERT OR REPLACE INTO timings VALUES ({marks})", rows)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            return len(rows)

        return self._retry(write)

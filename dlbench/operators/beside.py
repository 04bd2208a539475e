"""A benchmark timed beside the step's other ranks: where a data-parallel step runs several ranks on one CPU,
each rank runs the same operations at the same time as the others (DDP holds them in step with its
all-reduce), and they share the memory bandwidth and the last-level cache. Timed alone, the operations ran
faster than in the step (on a 2-core EPYC a 16x2048x2048 GEMM 3.05 -> 3.49 ms and an SGD step over 9 MB of
parameters 13.7 -> 17.5 ms with a second process doing the same; DDP's rank 0 profiled its GEMMs 1.13-1.17x
and its SGD 1.51-1.57x the benchmarks' times). So ``count`` copies of the executable run the invocation's
rows over and over (:data:`PASSES` passes a process), each with its own protocol files, while the measuring
invocation runs; it starts once every copy has written its first row (a copy imports its framework first),
and the copies are stopped when it ends. The copies' times are not read and their files are removed: they are
load, as the other ranks are."""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from dlbench.core.process import meaningful_tail, run_command
from dlbench.operators.footprint_file import footprints_path_for, rotation_path_for
from dlbench.operators.node_file import nodes_path_for
from dlbench.operators.protocol import ids_written, output_path_for, samples_path_for

log = logging.getLogger(__name__)

#: how often a copy's input holds the rows, one pass after the other: a copy that ran out of rows would start
#: its program again, and while it imports its framework (about 2 s for torch) the measured rows run alone
PASSES = 50
#: how long the measuring invocation waits for the copies' first rows (a copy that has not written one by then
#: is still load once it does; the wait is not the measurement's)
START_WAIT_S = 120.0


class _Stopped(Exception):
    """Raised in a copy's poll once the measuring invocation has ended."""


@contextmanager
def beside_ranks(command: Sequence[str], env: Mapping[str, str], input_csv: Path, count: int) -> Iterator[None]:
    """``count`` copies of ``command`` over the rows of ``input_csv`` (and the files an executable reads beside
    it) running while the block runs; nothing when ``count`` is 0. The block starts once each copy has written
    a row, has ended, or :data:`START_WAIT_S` passed."""
    if count <= 0:
        yield
        return
    stop = threading.Event()
    copies = [_Copy(list(command), dict(env), _copied_input(input_csv, k), stop) for k in range(count)]
    threads = [threading.Thread(target=c.loop, name=f"dlbench-beside-{k + 1}", daemon=True)
               for k, c in enumerate(copies)]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        deadline = time.perf_counter() + START_WAIT_S
        while not all(c.started() for c in copies) and time.perf_counter() < deadline:
            time.sleep(0.02)
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for copy in copies:
            copy.remove_files()


def _copied_input(input_csv: Path, index: int) -> Path:
    """Copy ``index``'s input: the rows :data:`PASSES` times, and the node and footprint files beside them."""
    path = input_csv.with_name(f"{input_csv.stem}_beside{index + 1}.csv")
    rows = input_csv.read_text(encoding="utf-8")
    path.write_text(rows * PASSES, encoding="utf-8")
    for beside in (nodes_path_for, footprints_path_for):
        if beside(input_csv).exists():
            shutil.copyfile(beside(input_csv), beside(path))
    output_path_for(path).unlink(missing_ok=True)
    return path


class _Copy:
    """One copy: its program run over its input again and again until ``stop``."""

    def __init__(self, command: list[str], env: dict[str, str], input_csv: Path, stop: threading.Event) -> None:
        self.command, self.env, self.input_csv, self.stop, self.runs = command, env, input_csv, stop, 0

    def started(self) -> bool:
        """Whether the copy is under way: a row written, or one run of it over (a program that fails is no load,
        and is not waited for)."""
        return self.runs > 0 or bool(ids_written(output_path_for(self.input_csv)))

    def loop(self) -> None:
        def poll() -> None:
            if self.stop.is_set():
                raise _Stopped

        while not self.stop.is_set():
            try:
                # no timeout of its own: it runs until the measured invocation, which has one, ends
                result = run_command([*self.command, str(self.input_csv)], timeout=math.inf, env=self.env,
                                     cwd=self.input_csv.parent, on_poll=poll, poll_interval_s=0.02)  # fmt: skip
            except _Stopped:
                return
            self.runs += 1
            if result.describe_failure():  # no load from here on: said, not retried
                log.warning("a copy beside the benchmark %s: %s (%s)", self.input_csv.name, result.describe_failure(),
                            meaningful_tail(result.stderr, 3))  # fmt: skip
                self.stop.wait()
                return

    def remove_files(self) -> None:
        """The copy's protocol files: load, not measurements (its rotation must not pass for the measured one's)."""
        for path_for in (output_path_for, samples_path_for, rotation_path_for, footprints_path_for, nodes_path_for):
            path_for(self.input_csv).unlink(missing_ok=True)
        self.input_csv.unlink(missing_ok=True)

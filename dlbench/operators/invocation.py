"""One run of an operator benchmark's executable over some rows of the protocol: write the input, run the
program (the embedded torch kernels in their persistent worker), parse what it wrote, and say for each row
what it gave or why it gave nothing; the cpu efficiency of each row comes from the program's own column or,
failing that, from its process tree's CPU time read as the rows appear."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlbench.core import interrupts
from dlbench.core.contention import RowCpuWatch
from dlbench.core.process import ProcessResult, run_command
from dlbench.core.values import Measurement, Operation, TimeStats
from dlbench.operators.align import AlignmentError, align_operation, misfit
from dlbench.operators.beside import beside_ranks
from dlbench.operators.embedded import is_embedded, run_embedded
from dlbench.operators.footprint_file import footprints_path_for, write_footprints
from dlbench.operators.node_file import nodes_path_for, write_nodes
from dlbench.operators.protocol import (
    ProtocolError,
    ids_written,
    output_path_for,
    parse_output,
    read_samples,
    samples_path_for,
    write_input,
)
from dlbench.operators.registry import OperatorBenchmark
from dlbench.operators.row_settings import (
    merge_text_files,
    row_groups,
    unable_measurement,
    unable_reason,
    with_row_codes,
)


def _stderr_lines_about(stderr: str, op_id: int) -> str:
    pattern = re.compile(rf"\bid\s*[:=]?\s*{op_id}\b")
    hits = [line.strip() for line in stderr.splitlines() if pattern.search(line)]
    return "; ".join(hits[:3])


@dataclass
class Invocation:
    """What one run of the executable over some rows gave: statistics, raw samples and cpu efficiency of the
    rows that parsed, a reason for each row that did not, and the run-wide problems."""

    process: ProcessResult
    stats: dict[int, TimeStats]
    samples: dict[int, list[float]]
    efficiency: dict[int, float | None]
    failures: dict[int, str]
    run_errors: list[str]
    interrupted: bool = False
    interrupt: str = ""
    #: the host ms of issuing one call, by id, where the program wrote the protocol's launch column
    launch: dict[int, float] = field(default_factory=dict)


def align_rows(
    benchmark: OperatorBenchmark, operations: Sequence[Operation]
) -> tuple[list[tuple[int, Sequence]], dict[int, Measurement]]:
    """Each operation's values in the benchmark's parameter order, and a misfit for those that do not fit."""
    rows, misfits = [], {}
    for op in operations:
        if reason := unable_reason(benchmark, op):  # a dtype or memory format it does not run
            misfits[op.id] = unable_measurement(op.id, reason)
            continue
        try:
            values = align_operation(
                op, benchmark.param_descr, benchmark.permutations, benchmark.name, benchmark.node_file
            )
            rows.append((op.id, values))
        except AlignmentError as err:
            misfits[op.id] = misfit(op.id, err)
    return rows, misfits


def invoke_once(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    rows: Sequence[tuple[int, Sequence]],
    settings: Any,
    files: Any,
    on_poll: Callable[[], None] | None,
) -> Invocation:
    """Run ``benchmark`` over ``rows`` (in their order): once, each row with its dtype and memory format where
    the executable takes them per row, else once per group of rows of one dtype and memory format
    (:mod:`dlbench.operators.row_settings`), their protocol files merged into ``files``."""
    groups = row_groups(benchmark, operations, rows, settings.dtype)
    if len(groups) == 1:
        group = groups[0]
        coded = with_row_codes(benchmark, operations, group.rows, settings.dtype)
        told = replace(settings, dtype=group.dtype)
        return _invoke_group(benchmark, operations, coded, told, files, on_poll, group.environment())
    parts: list[tuple[Invocation, Any]] = []
    started = time.perf_counter()
    for group in groups:
        left = settings.timeout_s - (time.perf_counter() - started)
        if parts and (left <= 0 or parts[-1][0].interrupted):  # the groups not run: no result row, said per row
            break
        part_files = _group_files(files, group.suffix())
        told = replace(settings, dtype=group.dtype, timeout_s=left)
        inv = _invoke_group(benchmark, operations, list(group.rows), told, part_files, on_poll, group.environment())
        parts.append((inv, part_files))
    for name in ("input_csv", "output_csv", "stderr_txt", "samples_csv"):
        if getattr(files, name, None) is not None:
            merge_text_files(getattr(files, name), [getattr(f, name) for _, f in parts])
    return _merged([inv for inv, _ in parts])


def _group_files(files: Any, suffix: str) -> Any:
    """The protocol files of one group of rows: the round's own, named with the group's settings."""
    stem = files.input_csv.stem
    input_csv = files.input_csv.with_name(f"{stem}_{suffix}.csv")
    return replace(
        files,
        input_csv=input_csv,
        output_csv=output_path_for(input_csv),
        stderr_txt=files.stderr_txt.with_name(f"{stem}_{suffix}_stderr.txt"),
        samples_csv=samples_path_for(input_csv),
    )


def _merged(parts: Sequence[Invocation]) -> Invocation:
    """One invocation's account of the groups' invocations."""
    failed = next((p.process for p in parts if p.process.describe_failure()), None)
    process = replace(
        failed or parts[-1].process,
        stdout="".join(p.process.stdout for p in parts),
        stderr="".join(p.process.stderr for p in parts),
        seconds=sum(p.process.seconds for p in parts),
    )
    merged = Invocation(process, {}, {}, {}, {}, [], any(p.interrupted for p in parts))
    for part in parts:
        merged.stats.update(part.stats)
        merged.samples.update(part.samples)
        merged.efficiency.update(part.efficiency)
        merged.failures.update(part.failures)
        merged.launch.update(part.launch)
        merged.run_errors.extend(e for e in part.run_errors if e not in merged.run_errors)
        merged.interrupt = merged.interrupt or part.interrupt
    return merged


def write_inputs(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    rows: Sequence[tuple[int, Sequence]],
    settings: Any,
    input_csv: Path,
) -> None:
    """The protocol's input of ``rows``, and beside it what the executable may ask for: each operation's ONNX
    node (a node-file benchmark) and its footprint in its step (``caches=step``)."""
    write_input(input_csv, rows)
    aligned = {op_id for op_id, _ in rows}
    if benchmark.node_file:  # the executable reads each operation's ONNX node beside the input
        write_nodes(nodes_path_for(input_csv), [op for op in operations if op.id in aligned])
    if getattr(settings, "caches", "") == "step":  # each operation's footprint in its step, beside the input
        write_footprints(footprints_path_for(input_csv), [op for op in operations if op.id in aligned])


def _invoke_group(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    rows: Sequence[tuple[int, Sequence]],
    settings: Any,
    files: Any,
    on_poll: Callable[[], None] | None,
    environment: dict[str, str],
) -> Invocation:
    """Run ``benchmark`` once over ``rows`` (in their order), reading its process tree's CPU time as rows
    appear where the program does not report its own (:class:`dlbench.core.contention.RowCpuWatch`)."""
    write_inputs(benchmark, operations, rows, settings, files.input_csv)
    files.output_csv.unlink(missing_ok=True)
    command = [*benchmark.command, str(files.input_csv)]
    interrupted, interrupt, start_error = False, "", ""
    embedded = is_embedded(command[:-1])
    run = run_embedded if embedded else run_command  # the torch kernels: a persistent worker
    cpu_watch = RowCpuWatch(lambda: _size(files.output_csv), lambda: ids_written(files.output_csv))
    try:
        interrupts.check()  # a Ctrl-C a library lost since the job started: measure nothing more
        env = {**settings.environment(), **environment}
        copies = getattr(settings, "beside", 0)  # the other ranks' load (probes run alone)
        beside = beside_ranks(benchmark.command, env, files.input_csv, copies)
        with beside, nullcontext() if embedded or settings.device != "cpu" else cpu_watch:
            process = run(command, timeout=settings.timeout_s, env=env, cwd=files.input_csv.parent,
                          stderr_path=files.stderr_txt, on_poll=on_poll)  # fmt: skip
    except KeyboardInterrupt as err:  # also SIGTERM (RunInterrupted), see core.interrupts
        interrupted, interrupt = True, type(err).__name__
        stderr = files.stderr_txt.read_text(errors="replace") if files.stderr_txt.exists() else ""
        process = ProcessResult(returncode=None, timed_out=False, stdout="", stderr=stderr, seconds=0.0)
    except OSError as err:  # the program could not start at all: not executable, bad interpreter line
        files.stderr_txt.write_text(f"{err}\n", encoding="utf-8")
        process = ProcessResult(returncode=None, timed_out=False, stdout="", stderr=str(err), seconds=0.0)
        start_error = f"could not be started: {err}"
    exe = " ".join(benchmark.command[:3]) if benchmark.command[0] == sys.executable else benchmark.command[0]
    failure = "was interrupted" if interrupted else start_error or process.describe_failure()
    run_errors = [f"{benchmark.name} ({exe}) {failure}"] if failure else []
    expected = [op_id for op_id, _ in rows]
    parsed_rows: dict[int, TimeStats] = {}
    problems: list[str] = []
    problems_by_id: dict[int, list[str]] = {}
    samples: dict[int, list[float]] = {}
    efficiency: dict[int, float | None] = dict(cpu_watch.efficiency)
    launch: dict[int, float] = {}
    try:
        parsed = parse_output(
            files.output_csv, expected, target_rel_ci=settings.target_rel_ci, asked_reps=settings.min_reps
        )
        parsed_rows, problems = dict(parsed.rows), list(parsed.problems)
        problems_by_id = {k: list(v) for k, v in parsed.problems_by_id.items()}
        efficiency.update(parsed.cpu_efficiency)  # the program's own reading of its timed calls comes first
        launch = dict(parsed.launch_ms)
        if parsed.samples_path is not None:
            samples = read_samples(parsed.samples_path, parsed_rows)[0]
    except ProtocolError as err:
        if not (interrupted and not files.output_csv.exists()):
            run_errors.append(f"{benchmark.name} ({exe}): {err}")
    attributed = {p for found in problems_by_id.values() for p in found}
    unexplained = [p for p in problems if p not in attributed]
    failures: dict[int, str] = {}
    for op_id in expected:
        if (op_id in parsed_rows and op_id not in problems_by_id) or (interrupted and op_id not in problems_by_id):
            continue
        reason = "; ".join(problems_by_id.get(op_id, [])) or f"no result row for id {op_id} in {files.output_csv}"
        hint = _stderr_lines_about(process.stderr, op_id)
        failures[op_id] = reason + (f" (stderr: {hint})" if hint else "")
    if unexplained:
        more = f" (and {len(unexplained) - 20} more)" if len(unexplained) > 20 else ""
        run_errors.append("\n".join(unexplained[:20]) + more)
    if run_errors and process.stderr.strip() and not interrupted:
        run_errors[0] += f" (its stderr: {files.stderr_txt})"
    good = {i: st for i, st in parsed_rows.items() if i not in failures and i not in problems_by_id}
    launch = {i: ms for i, ms in launch.items() if i in good}
    return Invocation(process, good, samples, efficiency, failures, run_errors, interrupted, interrupt, launch)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1

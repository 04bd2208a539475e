"""Run an external program as an argument list in its own process group, with a timeout, bounded logs and
no orphans left behind; used for benchmark executables and training scripts alike."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STDERR_KEEP_BYTES = 256 * 1024


#: stdout or stderr beyond this size means a runaway program: it is stopped before it fills the disk
MAX_LOG_BYTES = 1024 * 1024 * 1024


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


#: Signals every child meets with their default action. An ignored signal stays ignored across exec, and a CI
#: job without a terminal (or a shell's background job) starts dlbench with SIGINT ignored; a benchmark or a
#: training script that inherited that would not stop the way it does in a terminal.
DEFAULT_IN_CHILDREN = (signal.SIGINT, signal.SIGTERM)


def _still_ignored(signum: int, frame: object) -> None:
    """Stands in for SIG_IGN while a child is spawned: handlers, unlike SIG_IGN, do not survive exec."""


@contextmanager
def default_signals_in_children() -> Iterator[None]:
    """Processes started inside this block begin with the default action for :data:`DEFAULT_IN_CHILDREN`,
    while this process keeps ignoring what it ignored (no ``preexec_fn``, which is unsafe with threads)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal.signal works in the main thread only; dlbench spawns from there
        return
    replaced = {}
    for signum in DEFAULT_IN_CHILDREN:
        if signal.getsignal(signum) == signal.SIG_IGN:
            replaced[signum] = signal.signal(signum, _still_ignored)
    try:
        yield
    finally:
        for signum, previous in replaced.items():
            signal.signal(signum, previous)


#: Lines libraries print on every call that say nothing about a failure: kineto (torch.profiler) announces
#: each profiler start and stop. They stay in the stderr file and artifact, but not in a message.
NOISE = re.compile(r"^(USDT:.*\bprofiler_(start|stop)\b|STAGE:.*ActivityProfilerController)")


def meaningful_tail(text: str, lines: int = 10) -> str:
    """The last ``lines`` lines of a program's stderr that are not :data:`NOISE`, for an error message."""
    kept = [line for line in text.strip().splitlines() if not NOISE.match(line.strip())]
    return "\n".join(kept[-lines:])


def read_tail(handle: IO[bytes], keep: int = STDERR_KEEP_BYTES) -> str:
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
        with default_signals_in_children():
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
                    flooded = flooded_streams(out, err, max_log_bytes)
                    if flooded:
                        kill_process_group(proc)
                        break
                    if on_poll is not None:
                        on_poll()
            ended = time.perf_counter()  # the program's time, not the wait for what it left behind
            _kill_leftovers(proc)
        except BaseException:
            kill_process_group(proc)
            raise
        finally:
            stderr = read_tail(err)
            if stderr_path is not None:
                stderr_path.write_text(stderr, encoding="utf-8")
        seconds = ended - start
        stdout = read_tail(out)
    return ProcessResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        stdout=stdout,
        stderr=stderr,
        seconds=seconds,
        flooded=flooded,
    )


def flooded_streams(out: IO[bytes], err: IO[bytes], limit: int) -> str:
    for name, handle in (("stdout", out), ("stderr", err)):
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            return f"{size} bytes to {name}, over the {limit}-byte limit,"
    return ""


def _kill_leftovers(proc: subprocess.Popen, settle_s: float = 2.0) -> None:
    """Children the program started and left running die with it: a sweep leaves no orphans. SIGKILL lands
    when the kernel next schedules each of them, so wait (at most ``settle_s``) until no member of the group
    runs: the next measurement starts on a machine they no longer load. A member that is a zombie (its parent
    gone, and nobody reaping it) no longer runs and is not waited for."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.perf_counter() + settle_s
    while group_runs(proc.pid) and time.perf_counter() < deadline:
        time.sleep(0.01)


def group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is alive and not a zombie (read from ``/proc``; where there is no
    ``/proc``, whether the group has any member at all)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


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

"""A persistent child process that runs one command line after another, with the guards of
:func:`dlbench.core.process.run_command`: its own process group, a timeout, bounded logs, Ctrl-C and SIGTERM
stopping it, and a crash failing only the request it was running (the next request starts a new child).

What it saves is the child's start-up: the embedded PyTorch kernels pay ~2 s importing torch once, not once
per benchmark, and a worker started early imports torch while dlbench opens the MLflow store. Both halves
of the protocol are here: :class:`Worker` (the parent) and :func:`serve` (the child's loop). A request is a
JSON line on the child's stdin (argv, cwd, the ``DLBENCH_*`` environment, stdout and stderr paths); the
answer is a JSON line with the exit status on a pipe of its own, so nothing the program prints can be
mistaken for it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from dlbench.core.process import (
    MAX_LOG_BYTES,
    ProcessResult,
    default_signals_in_children,
    flooded_streams,
    kill_process_group,
    read_tail,
)

#: Variables a request carries; the rest of the environment is fixed when the child starts.
REQUEST_PREFIX = "DLBENCH_"
#: Variables that change in a parent without concerning the child (MLflow and Hydra set their own, e.g.
#: MLflow's telemetry sets _MLFLOW_TELEMETRY_SESSION_ID once the store is opened).
NOT_CHILD_STATE = ("DLBENCH_", "MLFLOW_", "_MLFLOW_", "HYDRA_")


def start_environment(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment a child is started with and keeps: what tells two workers apart."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(NOT_CHILD_STATE)))


class Worker:
    """A child running ``command`` + ``--serve FD``; :meth:`run` sends it one argument list at a time."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str]) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.proc: subprocess.Popen | None = None
        self._reply = -1
        self._buffer = b""
        self._requests = 0
        self._folder = Path(tempfile.mkdtemp(prefix="dlbench-worker-"))
        self._log: IO[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the child now (it imports what it needs while the caller does other work)."""
        if self.alive:
            return
        self._discard()
        self._folder.mkdir(parents=True, exist_ok=True)  # again after close()
        read_end, write_end = os.pipe()
        self._log = (self._folder / "worker.log").open("w+b")
        try:
            with default_signals_in_children():
                self.proc = subprocess.Popen(  # noqa: S603 - an argument list, never a shell
                    [*self.command, "--serve", str(write_end)],
                    stdin=subprocess.PIPE,
                    stdout=self._log,
                    stderr=self._log,
                    env=self.env,
                    pass_fds=(write_end,),
                    start_new_session=True,
                )
        finally:
            os.close(write_end)
        self._reply = read_end
        self._buffer = b""

    def _discard(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                kill_process_group(self.proc, grace=0.5)
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        if self._reply >= 0:
            os.close(self._reply)
        if self._log is not None:
            self._log.close()
        self.proc, self._reply, self._log = None, -1, None

    def close(self) -> None:
        """End the child: EOF on its stdin, and the whole group is killed if it does not leave at once."""
        if self.proc is not None and self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=2.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._discard()
        for path in self._folder.glob("*"):
            path.unlink(missing_ok=True)
        try:
            self._folder.rmdir()
        except OSError:
            pass

    def _startup_log(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        return read_tail(self._log)

    def _answer(self, deadline: float, poll_interval_s: float) -> dict | None:
        """The next answer line, or None when ``poll_interval_s`` passed (or the child closed the pipe)."""
        if b"\n" not in self._buffer:
            wait = max(0.0, min(poll_interval_s, deadline - time.perf_counter()))
            ready, _, _ = select.select([self._reply], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self._reply, 65536)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stderr_path: Path | None = None,
        on_poll: Callable[[], None] | None = None,
        poll_interval_s: float = 0.25,
        max_log_bytes: int = MAX_LOG_BYTES,
    ) -> ProcessResult:
        """Run ``argv`` in the child as its ``main`` would run as a program: the result reads like
        :func:`run_command`'s. A timeout, a flood, an interrupt or a crash ends the child."""
        start = time.perf_counter()
        self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self._requests += 1
        out_path = self._folder / f"request{self._requests}.out"
        err_path = self._folder / f"request{self._requests}.err"
        request_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k.startswith(REQUEST_PREFIX)}
        request = {"argv": list(argv), "cwd": str(cwd or Path.cwd()), "env": request_env,
                   "stdout": str(out_path), "stderr": str(err_path)}  # fmt: skip
        returncode: int | None = None
        timed_out, flooded, died = False, "", False
        deadline = start + timeout
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            while True:
                try:
                    answer = self._answer(deadline, poll_interval_s)
                except EOFError:
                    died = True
                    break
                if answer is not None:
                    returncode = int(answer["rc"])
                    break
                if time.perf_counter() >= deadline:
                    timed_out = True
                    self._discard()
                    break
                flooded = _flooded_paths(out_path, err_path, max_log_bytes)
                if flooded:
                    self._discard()
                    break
                if on_poll is not None:
                    on_poll()
        except BrokenPipeError:
            died = True
        except BaseException:
            self._discard()
            raise
        finally:
            stderr = _tail_of(err_path)
            if died:
                returncode = self.proc.wait() if self.proc is not None else None
                if not stderr.strip():  # it died before this request reached it: why is in its own log
                    stderr = self._startup_log()
                self._discard()
            if stderr_path is not None:
                stderr_path.write_text(stderr, encoding="utf-8")
        stdout = _tail_of(out_path)
        for path in (out_path, err_path):
            path.unlink(missing_ok=True)
        return ProcessResult(
            returncode=returncode,
            timed_out=timed_out,
            stdout=stdout,
            stderr=stderr,
            seconds=time.perf_counter() - start,
            flooded=flooded,
        )


def _tail_of(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return read_tail(handle)
    except OSError:
        return ""


def _flooded_paths(out_path: Path, err_path: Path, limit: int) -> str:
    try:
        with out_path.open("rb") as out, err_path.open("rb") as err:
            return flooded_streams(out, err, limit)
    except OSError:
        return ""


def _redirect(fd: int, path: str) -> int:
    """Point ``fd`` at ``path`` (created empty); returns a copy of the old target to restore."""
    saved = os.dup(fd)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(target, fd)
    os.close(target)
    return saved


def _handle(request: dict, main: Callable[[list[str]], int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [_redirect(1, request["stdout"]), _redirect(2, request["stderr"])]
    try:
        os.chdir(request["cwd"])
        for key in [k for k in os.environ if k.startswith(REQUEST_PREFIX)]:
            del os.environ[key]
        os.environ.update(request["env"])
        try:
            return int(main(list(request["argv"])) or 0)
        except SystemExit as done:  # what the program's own exit would have said
            if isinstance(done.code, str):
                print(done.code, file=sys.stderr)
                return 1
            return int(done.code or 0)
        except Exception:
            import traceback

            traceback.print_exc()  # as an uncaught exception in the program would
            return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)


def _exit_with_parent(parent: int) -> None:
    """A worker whose dlbench is gone (killed with SIGKILL) must not go on measuring for nobody."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def serve(main: Callable[[list[str]], int], reply_fd: int) -> None:
    """The child's loop: run ``main`` for each request on stdin, answer on ``reply_fd``, end at EOF."""
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    with os.fdopen(reply_fd, "w", encoding="utf-8") as reply:
        for line in sys.stdin:
            if not line.strip():
                continue
            status = _handle(json.loads(line), main)
            reply.write(json.dumps({"rc": status}) + "\n")
            reply.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # Tearing down an interpreter with torch loaded takes a second, which dlbench would wait for at its
    # exit; every request's output is written and closed by now, so there is nothing left to tear down.
    os._exit(0)

"""Forking instead of starting a new interpreter: what a fork must redo to begin as a new process would, and
when a process may be forked at all.

A fork copies the modules already imported (seconds of imports saved), but also whatever else the process
did: threads that held locks, an OpenMP pool, a CUDA context. dlbench forks only from processes that imported
libraries and ran nothing: the warm-start server, and a command it forked while that command is still as the
server left it (no Python thread, no more native threads than the server had, no CUDA context)."""

from __future__ import annotations

import os
import signal
import sys
import threading

#: Native threads of the warm-start server when it forked this process (library pools idle since import,
#: e.g. OpenBLAS's, which stop and restart around a fork); None in a process the server did not fork.
_forked_with_threads: int | None = None


def native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def mark_forked_from_server(threads: int) -> None:
    global _forked_with_threads
    _forked_with_threads = threads


def still_as_forked() -> bool:
    """Whether this process was forked by the warm-start server and has started nothing since that a further
    fork would copy in a broken state (a thread, an OpenMP pool, a CUDA context)."""
    if _forked_with_threads is None or threading.active_count() != 1:
        return False
    if native_threads() > _forked_with_threads:
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def fresh_standard_streams() -> None:
    """Text streams on descriptors 0-2, buffered as Python buffers them for a new process (line-buffered on a
    terminal); the old objects may hold another process's buffered text or wrap other files."""
    encoding = sys.stdout.encoding if sys.stdout is not None else "utf-8"
    sys.stdin = open(0, encoding=encoding, closefd=False)  # noqa: PTH123, SIM115
    sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, encoding=encoding, closefd=False)  # noqa: PTH123, SIM115
    sys.stderr = open(2, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False)  # noqa: PTH123, SIM115


def fresh_seeds() -> None:
    """A new process draws new seeds; forks of one process would otherwise share numpy's legacy state
    (Python's own ``random`` reseeds itself after a fork)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def default_signals(sigint_ignored: bool = False) -> None:
    """The signal dispositions of a new Python process (SIGINT raising KeyboardInterrupt unless the starter
    ignored it, which a new process inherits)."""
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)


def replace_environment(env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def name_process(name: str) -> None:
    """The name ``top`` and ``ps -o comm`` show (Linux, 15 bytes): a fork would otherwise go by its parent's.
    The command line (``ps -f``) stays the parent's."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass

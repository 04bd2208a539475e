"""No Ctrl-C or SIGTERM is lost on its way to the top of the command.

Python can drop the ``KeyboardInterrupt`` a signal handler raises: inside a weakref callback or ``__del__`` it
is printed as "Exception ignored" and the program goes on; and a library whose cleanup fails while the
interrupt unwinds (a context manager's ``__exit__`` on a half-built object) replaces it by an ordinary
exception, which the library may catch (Hydra's composition catches every ``Exception`` in one place). A
command that lost its Ctrl-C measures on to the end and exits 0.

So the handlers also note the signal. A swallowed interrupt is sent again a moment later; :func:`check`
raises a noted one again at the command's checkpoints (the start of a job, the start of a benchmark); and
:func:`noted` lets a command that returned normally end as interrupted all the same."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from dlbench.core.errors import RunInterrupted

_noted: list[type[KeyboardInterrupt]] = []
_SIGTERM = "received SIGTERM"


def install() -> None:
    """Ctrl-C (unless it is ignored) raises ``KeyboardInterrupt`` and SIGTERM :class:`RunInterrupted`, so runs
    end KILLED and children are stopped; both are noted, and swallowed ones are sent again."""
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_sigint):
        signal.signal(signal.SIGINT, _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigterm)
    if not getattr(sys.unraisablehook, "redelivers_interrupts", False):
        sys.unraisablehook = _redelivering(sys.unraisablehook)


def noted() -> type[KeyboardInterrupt] | None:
    """The kind of the last interrupt this process received, if any."""
    return _noted[-1] if _noted else None


def check() -> None:
    """Raise the interrupt this process received, if any, wherever it went meanwhile."""
    kind = noted()
    if kind is not None:
        raise kind(_SIGTERM if kind is RunInterrupted else "")


def _on_sigint(signum: int, frame: object) -> None:
    _noted.append(KeyboardInterrupt)
    raise KeyboardInterrupt


def _on_sigterm(signum: int, frame: object) -> None:
    _noted.append(RunInterrupted)
    raise RunInterrupted(_SIGTERM)


def _redelivering(previous: Any) -> Any:
    def hook(unraisable: Any) -> None:
        kind = unraisable.exc_type
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            _send_again(signal.SIGTERM if issubclass(kind, RunInterrupted) else signal.SIGINT)
            return
        previous(unraisable)

    hook.redelivers_interrupts = True  # type: ignore[attr-defined]
    return hook


def _send_again(signum: int, delay_s: float = 0.01) -> None:
    """Send ``signum`` to this process from a timer thread, once Python has left the hook (sent from the hook,
    its handler would run at once, inside the hook, and be swallowed again)."""
    while True:
        timer = threading.Timer(delay_s, os.kill, (os.getpid(), signum))
        timer.daemon = True
        try:
            timer.start()
            return
        except KeyboardInterrupt:  # it arrived while the timer started, still inside the hook: once more
            timer.cancel()

"""The exceptions that cross layers: a task that finished with failures, a configuration that cannot be run, and
an interrupt by SIGTERM."""

from __future__ import annotations


class TaskFailed(RuntimeError):
    """A task finished but something in it failed; results that were measured are already logged."""


class ConfigurationError(TaskFailed):
    """The configuration asks for what cannot be done (a setting missing, out of range or not fitting the
    model), found before anything ran; the command exits with status 2 and says which key to change."""


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM, turned into an exception so runs end KILLED and child processes are stopped."""


def interrupt_behind(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM during whose handling ``err`` was raised, if any: a library that cleans up after
    an interrupt may fail in its own way (SQLAlchemy raises ``PendingRollbackError`` for a statement cut short),
    and that failure is the interrupt's, not a bug to report."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None

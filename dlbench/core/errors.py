"""The exceptions that cross layers: a task that finished with failures, and an interrupt by SIGTERM."""


class TaskFailed(RuntimeError):
    """A task finished but something in it failed; results that were measured are already logged."""


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM, turned into an exception so runs end KILLED and child processes are stopped."""

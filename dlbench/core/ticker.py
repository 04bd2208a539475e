"""A watcher's background thread: ``tick`` every ``interval_s`` while a measurement runs, a tick that fails
on a vanished ``/proc`` entry skipped, stopped and joined at the end (used by ``core/contention.py`` and
``core/interference.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    """Calls ``tick`` every ``interval_s`` seconds on a daemon thread between :meth:`start` and :meth:`stop`;
    a tick raising one of ``skipped`` is skipped."""

    def __init__(
        self, tick: Callable[[], None], interval_s: float, name: str, skipped: tuple[type[Exception], ...] = (OSError,)
    ) -> None:
        self.tick, self.interval_s, self.name, self.skipped = tick, interval_s, name, skipped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except self.skipped:
                continue

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stop the thread and wait for it; False when it was never started."""
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        return True

"""A job a worker runs every few seconds on a daemon thread: its heartbeat, its sweep, its
reconciler passes, its read of the pause flag."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("remit.periodic")


class Periodic:
    """Runs `job` every `interval` seconds on a daemon thread named `name`, until stopped. A run
    that raises is logged and the next one goes on; `stop` waits for the run in progress.

    `run_in(delay)` asks for one more run `delay` seconds from now, between the regular ones (a
    deadline known to fall before the next): the runs stay on the one thread, never two at once.
    """

    def __init__(self, name: str, interval: float, job: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self.job = job
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._extra: float | None = None  # monotonic time of the one extra run asked for
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._changed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def run_in(self, delay: float) -> None:
        """Run the job once `delay` seconds from now as well (the soonest such run asked for
        is kept)."""
        at = time.monotonic() + max(0.0, delay)
        with self._lock:
            self._extra = at if self._extra is None else min(self._extra, at)
        self._changed.set()

    def _loop(self) -> None:
        tick = time.monotonic() + self.interval
        while True:
            self._changed.clear()
            with self._lock:
                extra = self._extra
            due = tick if extra is None else min(tick, extra)
            if self._changed.wait(max(0.0, due - time.monotonic())):
                if self._stop.is_set():
                    return
                continue  # an extra run asked for: wait again for the soonest
            if self._stop.is_set():
                return
            now = time.monotonic()
            if now >= tick:
                tick = now + self.interval
            with self._lock:
                if self._extra is not None and self._extra <= now:
                    self._extra = None
            try:
                self.job()
            except Exception:
                log.exception("%s failed; trying again in %.1fs", self.name, self.interval)

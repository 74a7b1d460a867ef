"""A job a worker runs every few seconds on a daemon thread: its heartbeat, its sweep, its
reconciler passes, its read of the pause flag."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("remit.periodic")


class Periodic:
    """Runs `job` every `interval` seconds on a daemon thread named `name`, until stopped. A run
    that raises is logged and the next one goes on; `stop` waits for the run in progress."""

    def __init__(self, name: str, interval: float, job: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self.job = job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.job()
            except Exception:
                log.exception("%s failed; trying again in %.1fs", self.name, self.interval)

"""Where remit gets the time. Injected, so a test can run a long wait in an instant."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` (a retry's backoff)."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """A clock a test moves by hand: `advance(days=30)` and every expiry due by then is due.

    Its `sleep` moves it forward at once rather than waiting. Safe to share between threads.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Move forward `seconds` (and any `timedelta` keywords: days=, hours=, minutes=)."""
        with self._lock:
            self._now += timedelta(seconds=seconds, **delta)
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

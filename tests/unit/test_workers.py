"""Who is dead, and whom a worker may take over: pure decisions over worker rows; and the
watchdog that ends a drain overrunning its bound."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from remit.ops.registry import WorkerRow, state, takeover_candidates
from remit.serve.worker import Watchdog

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
BOUND = timedelta(seconds=30)


def row(executor_id: str, *, age: float, version: str = "v1", **fields: object) -> WorkerRow:
    values: dict[str, object] = {
        "executor_id": executor_id,
        "app": "app",
        "host": "h",
        "pid": 1,
        "version": version,
        "started_at": NOW - timedelta(hours=1),
        "heartbeat_at": NOW - timedelta(seconds=age),
        "stopped_at": None,
        "taken_over_by": None,
        "taken_over_at": None,
    }
    values.update(fields)
    return WorkerRow(**values)  # type: ignore[arg-type]


def test_states() -> None:
    assert state(row("a", age=29.9), now=NOW, dead_after=BOUND) == "live"
    assert state(row("a", age=30.1), now=NOW, dead_after=BOUND) == "dead"
    assert state(row("a", age=99, stopped_at=NOW), now=NOW, dead_after=BOUND) == "stopped"
    assert state(row("a", age=99, taken_over_by="b"), now=NOW, dead_after=BOUND) == "taken over"


def test_only_dead_unclaimed_workers_of_my_version_are_candidates() -> None:
    rows = [
        row("me", age=99),
        row("live", age=1),
        row("dead", age=31),
        row("dead-old-version", age=31, version="v0"),
        row("stopped", age=31, stopped_at=NOW),
        row("claimed", age=31, taken_over_by="x"),
    ]
    assert takeover_candidates(rows, me="me", version="v1", now=NOW, dead_after=BOUND) == ["dead"]


def test_a_watchdog_fires_only_when_not_disarmed_in_time() -> None:
    fired: list[float] = []
    late = Watchdog(0.05, fired.append)
    late.arm()
    on_time = Watchdog(5.0, fired.append)
    on_time.arm()
    on_time.disarm()
    deadline = time.monotonic() + 5
    while not fired:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.1)
    assert fired == [0.05]  # the late one, once; the disarmed one never

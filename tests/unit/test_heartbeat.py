"""A worker's heartbeat: an old heartbeat of another worker counts as death only once this one
has written its own steadily for the whole `REMIT_DEAD_AFTER` (a database outage stops every
worker's heartbeat at once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from remit.core.settings import Settings
from remit.ops.registry import WorkerRow
from remit.serve.worker import Heartbeat

DEAD_AFTER = 30.0
INTERVAL = 5.0


@dataclass
class Ticking:
    """A monotonic clock and a wall clock that move only when told to."""

    at: float = 1000.0
    wall: datetime = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return self.at

    def now(self) -> datetime:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.at += seconds
        self.wall += timedelta(seconds=seconds)


@dataclass
class Registry:
    """The workers table as one other worker, `w2`, left it: its last heartbeat at `last`.
    Records the claims made of it, and grants none (so no DBOS recovery follows)."""

    last: datetime
    claims: list[str] = field(default_factory=list)

    def heartbeat(self, executor_id: str) -> bool:
        return True

    def list(self, *, app: str | None = None) -> list[WorkerRow]:
        return [
            WorkerRow(
                executor_id="w2",
                app="shop",
                host="h",
                pid=2,
                version="v1",
                started_at=self.last,
                heartbeat_at=self.last,
                stopped_at=None,
                taken_over_by=None,
                taken_over_at=None,
            )
        ]

    def claim(self, dead: str, **_: Any) -> bool:
        self.claims.append(dead)
        return False


def heartbeat(clock: Ticking, registry: Registry, *, took: float = 0.1) -> Heartbeat:
    settings = Settings(
        database_url="sqlite:////tmp/unused.sqlite",
        heartbeat_interval=INTERVAL,
        dead_after=DEAD_AFTER,
    )
    worker = SimpleNamespace(
        settings=settings,
        executor_id="w1",
        registry=registry,
        app=SimpleNamespace(name="shop"),
        runtime=SimpleNamespace(version="v1", clock=clock),
        on_taken_over=lambda: None,
    )
    beat = Heartbeat(
        worker,  # type: ignore[arg-type]
        registered=(clock.monotonic(), took),
        monotonic=clock.monotonic,
    )
    beat._last_reached = clock.monotonic()  # as `start` sets it
    return beat


def test_a_steady_worker_claims_one_whose_heartbeat_is_older_than_the_bound() -> None:
    clock = Ticking()
    registry = Registry(last=clock.now())
    beat = heartbeat(clock, registry)
    for _ in range(7):  # 35 s of beats every 5 s: w2 wrote nothing meanwhile
        clock.advance(INTERVAL)
        beat.beat()
    assert registry.claims == ["w2"]


def test_after_its_own_heartbeat_paused_a_worker_claims_no_one_until_steady_again() -> None:
    clock = Ticking()
    registry = Registry(last=clock.now())
    beat = heartbeat(clock, registry)
    clock.advance(60)  # the database was away: neither worker could write
    beat.beat()
    assert not beat.steady()
    assert registry.claims == []
    registry.last = clock.now() - timedelta(seconds=2)  # w2 is back too
    for _ in range(5):
        clock.advance(INTERVAL)
        beat.beat()
    assert registry.claims == []  # 25 s: w2's heartbeat is not 30 s old, nor is w1 steady
    registry.last -= timedelta(hours=1)  # now w2 really stopped, long ago
    clock.advance(INTERVAL)
    beat.beat()
    assert registry.claims == ["w2"]  # 30 s of steady beats since the pause


def test_a_registration_that_waited_for_the_database_is_no_steady_start() -> None:
    clock = Ticking()
    registry = Registry(last=clock.now() - timedelta(minutes=5))
    beat = heartbeat(clock, registry, took=40)
    clock.advance(INTERVAL)
    beat.beat()
    assert registry.claims == []
    for _ in range(4):
        clock.advance(INTERVAL)
        beat.beat()
    assert registry.claims == []  # 25 s since the registration was written
    clock.advance(INTERVAL)
    beat.beat()
    assert registry.claims == ["w2"]


def test_an_overdue_heartbeat_is_not_steady_between_beats() -> None:
    clock = Ticking()
    beat = heartbeat(clock, Registry(last=clock.now()))
    clock.advance(INTERVAL)
    beat.beat()
    assert beat.steady()
    clock.advance(DEAD_AFTER)  # no beat written since: the database may be away right now
    assert not beat.steady()

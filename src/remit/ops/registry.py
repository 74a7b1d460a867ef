"""The worker registry: who is serving, whose heartbeat stopped, and who took over its work.

Each worker has a row keyed by its executor id, with a heartbeat it renews every few seconds. A
worker whose heartbeat is older than the bound (default 30 s) is dead: one live worker of the
same version claims it (a single guarded UPDATE, so of several workers noticing at once exactly
one wins) and hands its unfinished attempts back to their queues. The heartbeat write is fenced
on the row not being claimed: a worker that finds it was declared dead (it stalled past the
bound) stops at once instead of racing whoever took over its work.
"""

from __future__ import annotations

import builtins
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import workers

WorkerState = Literal["live", "dead", "stopped", "taken over"]


@dataclass(frozen=True)
class WorkerRow:
    executor_id: str
    app: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    taken_over_by: str | None
    taken_over_at: datetime | None


def state(row: WorkerRow, *, now: datetime, dead_after: timedelta) -> WorkerState:
    """What a worker is, seen at `now`."""
    if row.stopped_at is not None:
        return "stopped"
    if row.taken_over_by is not None:
        return "taken over"
    return "dead" if now - row.heartbeat_at > dead_after else "live"


def live_versions(
    rows: builtins.list[WorkerRow], *, now: datetime, dead_after: timedelta
) -> set[str]:
    """The versions that live workers run: an attempt of any other version has no one to run
    it, now or after a restart of its worker with the same code."""
    return {row.version for row in rows if state(row, now=now, dead_after=dead_after) == "live"}


def takeover_candidates(
    rows: builtins.list[WorkerRow], *, me: str, version: str, now: datetime, dead_after: timedelta
) -> builtins.list[str]:
    """The dead workers `me` may take over: same version, not already claimed, not itself."""
    return [
        row.executor_id
        for row in rows
        if row.executor_id != me
        and row.version == version
        and state(row, now=now, dead_after=dead_after) == "dead"
    ]


class WorkerRegistry:
    """Reads and writes of the workers table."""

    def __init__(self, db: Database, *, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()

    def register(self, executor_id: str, *, app: str, version: str) -> None:
        """Write (or take back) this worker's row: live, heartbeat now, claimed by no one."""
        now = self.clock.now()
        values = {
            "app": app,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": version,
            "started_at": now,
            "heartbeat_at": now,
            "stopped_at": None,
            "taken_over_by": None,
            "taken_over_at": None,
        }

        def write() -> None:
            with self.db.begin() as conn:
                updated = conn.execute(
                    workers.update().where(workers.c.executor_id == executor_id).values(**values)
                )
                if updated.rowcount == 0:
                    conn.execute(workers.insert().values(executor_id=executor_id, **values))

        self.db.retrying(f"worker {executor_id}: register", write)

    def heartbeat(self, executor_id: str) -> bool:
        """Renew the heartbeat. False when another worker has taken this one over."""

        def write() -> bool:
            with self.db.begin() as conn:
                updated = conn.execute(
                    workers.update()
                    .where(workers.c.executor_id == executor_id, workers.c.taken_over_by.is_(None))
                    .values(heartbeat_at=self.clock.now())
                )
                return updated.rowcount == 1

        return self.db.retrying(f"worker {executor_id}: heartbeat", write)

    def stopped(self, executor_id: str) -> None:
        """The worker stopped on its own: nothing of its needs taking over."""

        def write() -> None:
            with self.db.begin() as conn:
                conn.execute(
                    workers.update()
                    .where(workers.c.executor_id == executor_id, workers.c.taken_over_by.is_(None))
                    .values(stopped_at=self.clock.now())
                )

        self.db.retrying(f"worker {executor_id}: stopped", write)

    def claim(self, dead: str, *, by: str, dead_after: timedelta) -> bool:
        """Claim the dead worker `dead` for `by`. True for exactly one claimer.

        The heartbeat is checked again in the same statement, so a worker that came back
        between being seen dead and being claimed is not claimed.
        """
        now = self.clock.now()

        def write() -> bool:
            with self.db.begin() as conn:
                updated = conn.execute(
                    workers.update()
                    .where(
                        workers.c.executor_id == dead,
                        workers.c.taken_over_by.is_(None),
                        workers.c.stopped_at.is_(None),
                        workers.c.heartbeat_at < now - dead_after,
                    )
                    .values(taken_over_by=by, taken_over_at=now)
                )
                return updated.rowcount == 1

        return self.db.retrying(f"worker {dead}: claim by {by}", write)

    def list(self, *, app: str | None = None) -> builtins.list[WorkerRow]:
        query = sa.select(workers).order_by(workers.c.started_at.desc())
        if app is not None:
            query = query.where(workers.c.app == app)
        with self.db.engine.connect() as conn:
            return [_row(row) for row in conn.execute(query)]


def _row(row: sa.Row[Any]) -> WorkerRow:
    return WorkerRow(**{column.name: row._mapping[column.name] for column in workers.columns})

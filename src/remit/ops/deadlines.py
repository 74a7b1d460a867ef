"""Deadlines: the times at which something is due to happen without anyone asking.

A sleeping run's wake-up, a pending approval's expiry and a schedule's next instant are deadlines;
the next deadline is the earliest of them. A worker that sleeps until then misses nothing, which
is what scaling to zero registers with a wakeup.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.runs import FINISHED
from remit.core.schema import approvals, runs, schedules, timers


@dataclass(frozen=True)
class Deadline:
    """One thing due at `at`: a run's wake-up from a sleep, an approval's expiry, or the next
    instant of a workflow's schedule."""

    at: datetime
    kind: str  # "wake", "expiry" or "schedule"
    # The run it concerns; "" for a schedule, whose run does not exist until it fires.
    run_id: str
    # What is due: `<run_id>:<step>` for a sleep, the approval's id for an expiry, the
    # workflow's name for a schedule.
    target: str


def upcoming_deadlines(db: Database | str, *, limit: int = 20) -> list[Deadline]:
    """The next `limit` deadlines, earliest first, on `db` (a `Database` or a database URL)."""
    if isinstance(db, str):
        opened = Database(db, pool_size=1)
        try:
            return upcoming_deadlines(opened, limit=limit)
        finally:
            opened.dispose()
    wakes = (
        sa.select(timers.c.wake_at, timers.c.run_id, timers.c.step_id)
        .join(runs, runs.c.run_id == timers.c.run_id)
        .where(timers.c.status == "sleeping", runs.c.status.not_in(tuple(FINISHED)))
        .order_by(timers.c.wake_at)
        .limit(limit)
    )
    expiries = (
        sa.select(approvals.c.expires_at, approvals.c.run_id, approvals.c.id)
        .join(runs, runs.c.run_id == approvals.c.run_id)
        .where(
            approvals.c.status == "pending",
            approvals.c.expires_at.is_not(None),
            runs.c.status.not_in(tuple(FINISHED)),
        )
        .order_by(approvals.c.expires_at)
        .limit(limit)
    )
    # Kept by the workers' sweeps; a past `next_at` is due at once (no worker has swept since).
    scheduled = (
        sa.select(schedules.c.next_at, schedules.c.workflow)
        .order_by(schedules.c.next_at, schedules.c.workflow)
        .limit(limit)
    )
    with db.engine.connect() as conn:
        found = [
            Deadline(row.wake_at, "wake", row.run_id, f"{row.run_id}:{row.step_id}")
            for row in conn.execute(wakes)
        ]
        found += [
            Deadline(row.expires_at, "expiry", row.run_id, row.id) for row in conn.execute(expiries)
        ]
        found += [
            Deadline(row.next_at, "schedule", "", row.workflow) for row in conn.execute(scheduled)
        ]
    return sorted(found, key=lambda deadline: (deadline.at, deadline.target))[:limit]


def next_deadline(db: Database | str) -> Deadline | None:
    """The earliest deadline, or None when nothing is due at any time."""
    found = upcoming_deadlines(db, limit=1)
    return found[0] if found else None

"""Deadlines: the times at which something is due to happen without anyone asking.

A sleeping run's wake-up, a pending approval's expiry, the timeout of a run's wait for a
message, a schedule's next instant and a waiting run's workflow timeout are deadlines; the
next deadline is the
earliest of them. A worker that sleeps until then misses nothing, which is what scaling to zero
registers with the wakeup service (`ops/idle.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.runs import FINISHED, app_runs
from remit.core.schema import UTCDateTime, approvals, audit, runs, schedules, timers, waits
from remit.ops.schedules import not_paused


@dataclass(frozen=True)
class Deadline:
    """One thing due at `at`: a run's wake-up from a sleep, an approval's expiry, the timeout
    of a run's wait for a message, or the next instant of a workflow's schedule."""

    at: datetime
    # "wake", "expiry", "message", "schedule" or "timeout"; a stopping worker adds "notification" and
    # "reconcile" (see `ops/idle.py`).
    kind: str
    # The run it concerns; "" for a schedule, whose run does not exist until it fires.
    run_id: str
    # What is due: `<run_id>:<step>` for a sleep, the approval's id for an expiry, the topic
    # for a wait for a message, the workflow's name for a schedule or a timeout.
    target: str

    def describe(self) -> str:
        """What is due, in a few words."""
        if self.kind == "wake":
            return f"run {self.run_id} wakes from its sleep"
        if self.kind == "expiry":
            return f"approval {self.target} of run {self.run_id} expires"
        if self.kind == "message":
            return f"run {self.run_id} stops waiting for a message on `{self.target}`"
        if self.kind == "schedule":
            return f"schedule `{self.target}` fires"
        if self.kind == "notification":
            return f"the notification of approval {self.target} is sent (or tried again)"
        if self.kind == "reconcile":
            return "the reconciler passes again, after a pass that acted"
        return f"run {self.run_id} reaches the timeout of `{self.target}`"


def upcoming_deadlines(
    db: Database | str,
    *,
    limit: int = 20,
    timeouts: Mapping[str, float] | None = None,
    app: str | None = None,
) -> list[Deadline]:
    """The next `limit` deadlines, earliest first, on `db` (a `Database` or a database URL):
    those of the app `app`'s runs and schedules, or of every app on the database (None).

    `timeouts` (each timed workflow's `timeout=`, by name) adds when each unfinished run of
    those workflows reaches its timeout."""
    if isinstance(db, str):
        opened = Database(db, pool_size=1)
        try:
            return upcoming_deadlines(opened, limit=limit, timeouts=timeouts, app=app)
        finally:
            opened.dispose()
    wakes = (
        sa.select(timers.c.wake_at, timers.c.run_id, timers.c.step_id)
        .join(runs, runs.c.run_id == timers.c.run_id)
        .where(
            timers.c.status == "sleeping",
            runs.c.status.not_in(tuple(FINISHED)),
            app_runs(app),
        )
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
            app_runs(app),
        )
        .order_by(approvals.c.expires_at)
        .limit(limit)
    )
    messages_due = (
        sa.select(waits.c.deadline, waits.c.run_id, waits.c.topic)
        .join(runs, runs.c.run_id == waits.c.run_id)
        .where(
            waits.c.status == "waiting",
            waits.c.deadline.is_not(None),
            runs.c.workflow_id == waits.c.workflow_id,
            runs.c.status.not_in(tuple(FINISHED)),
            app_runs(app),
        )
        .order_by(waits.c.deadline)
        .limit(limit)
    )
    # Kept by the workers' sweeps; a past `next_at` is due at once (no worker has swept since).
    # A paused schedule fires nothing: it is no deadline.
    scheduled = (
        sa.select(schedules.c.next_at, schedules.c.workflow)
        .where(sa.true() if app is None else schedules.c.app == app, not_paused())
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
            Deadline(row.deadline, "message", row.run_id, row.topic)
            for row in conn.execute(messages_due)
        ]
        found += [
            Deadline(row.next_at, "schedule", "", row.workflow) for row in conn.execute(scheduled)
        ]
    if timeouts:
        found += _timeouts(db, timeouts, limit=limit, app=app)
    return sorted(found, key=lambda deadline: (deadline.at, deadline.target))[:limit]


def _timeouts(
    db: Database, timeouts: Mapping[str, float], *, limit: int, app: str | None
) -> list[Deadline]:
    """The `limit` earliest moments at which unfinished runs of timed workflows reach their
    timeout, counted from the start or the latest retry (as the reconciler's `overdue` pass
    counts it). A run's timeout counts from no earlier than its start, so each workflow's runs
    are read oldest first, a page at a time, until the next one could not come sooner than the
    `limit` found already."""
    found: list[Deadline] = []
    with db.engine.connect() as conn:
        for name, seconds in timeouts.items():
            bound = timedelta(seconds=seconds)
            after: tuple[datetime, str] | None = None
            while True:
                query = (
                    sa.select(runs.c.run_id, runs.c.created_at)
                    .where(
                        runs.c.workflow == name,
                        runs.c.status.not_in(tuple(FINISHED)),
                        app_runs(app),
                    )
                    .order_by(runs.c.created_at, runs.c.run_id)
                    .limit(_PAGE)
                )
                if after is not None:
                    query = query.where(
                        sa.or_(
                            runs.c.created_at > after[0],
                            sa.and_(runs.c.created_at == after[0], runs.c.run_id > after[1]),
                        )
                    )
                page = list(conn.execute(query))
                if not page:
                    break
                retried = _latest_retries(conn, [row.run_id for row in page])
                for row in page:
                    since = max(row.created_at, retried.get(row.run_id, row.created_at))
                    found.append(Deadline(since + bound, "timeout", row.run_id, name))
                found = sorted(found, key=lambda deadline: (deadline.at, deadline.target))[:limit]
                last = page[-1]
                after = (last.created_at, last.run_id)
                if len(page) < _PAGE or (
                    len(found) >= limit and last.created_at + bound >= found[-1].at
                ):
                    break
    return found


# Runs read at a time while looking for the earliest timeouts.
_PAGE = 200


def _latest_retries(conn: sa.Connection, run_ids: list[str]) -> dict[str, datetime]:
    """When each of `run_ids` was last retried, for those that were."""
    rows = conn.execute(
        sa.select(audit.c.target, sa.func.max(audit.c.at, type_=UTCDateTime).label("at"))
        .where(audit.c.action == "run.retry", audit.c.target.in_(run_ids))
        .group_by(audit.c.target)
    )
    return {row.target: row.at for row in rows}


def next_deadline(
    db: Database | str,
    *,
    timeouts: Mapping[str, float] | None = None,
    app: str | None = None,
) -> Deadline | None:
    """The earliest deadline (of the app `app`, or of any), or None when nothing is due at
    any time."""
    found = upcoming_deadlines(db, limit=1, timeouts=timeouts, app=app)
    return found[0] if found else None

"""Where a run waits on its current attempt, for the transactions that move it on.

A run's attempt may stand at several waits at once (an async workflow can wait at a gate and
for a message together). A move to the next attempt forks it from the first of them: every
wait from there on runs again in the new attempt and moves its row onto it, where one copied
from the record would keep answering "still waiting" from the attempt before.

A parent waiting for its children (`ctx.wait`) is moved on here once the last of them ends.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.fence import FINISHED, advance, lock
from remit.core.outbox import Resume
from remit.core.schema import approvals, children, runs, timers, waits


def first_waiting(conn: sa.Connection, run_id: str, workflow_id: str) -> int | None:
    """The first step at which the run's attempt `workflow_id` waits (a pending gate, a long
    sleep, a message or children), or None. The caller holds the run's lock."""
    steps = [
        sa.select(sa.func.min(approvals.c.step_id)).where(
            approvals.c.run_id == run_id,
            approvals.c.workflow_id == workflow_id,
            approvals.c.status == "pending",
        ),
        sa.select(sa.func.min(timers.c.step_id)).where(
            timers.c.run_id == run_id,
            timers.c.workflow_id == workflow_id,
            timers.c.status == "sleeping",
        ),
        sa.select(sa.func.min(waits.c.step_id)).where(
            waits.c.run_id == run_id,
            waits.c.workflow_id == workflow_id,
            waits.c.status == "waiting",
        ),
    ]
    found = conn.execute(sa.union_all(*steps)).scalars()
    return min((step for step in found if step is not None), default=None)


def children_ready(conn: sa.Connection, parent_run_id: str, *, now: datetime) -> Resume | None:
    """Move the parent on if it waits on its current attempt for children that have all ended,
    inside the caller's transaction, which locks the parent here (and no child: a child's end
    commits before its parent is looked at, so the two rows are never locked in two orders).
    Returns the resume to fork after the commit, or None."""
    parent = lock(conn, parent_run_id)
    if parent is None or parent.finished:
        return None
    waiting = conn.execute(
        sa.select(waits.c.step_id, waits.c.children).where(
            waits.c.run_id == parent_run_id,
            waits.c.workflow_id == parent.workflow_id,
            waits.c.kind == "children",
            waits.c.status == "waiting",
        )
    ).all()
    for wait in sorted(waiting, key=lambda row: row.step_id):
        ids = list(wait.children or [])
        ended = conn.execute(
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.run_id.in_(ids), runs.c.status.in_(tuple(FINISHED)))
        ).scalar_one()
        if ended < len(ids):
            continue
        conn.execute(
            waits.update()
            .where(waits.c.run_id == parent_run_id, waits.c.step_id == wait.step_id)
            .values(status="ready")
        )
        first = first_waiting(conn, parent_run_id, parent.workflow_id)
        resume = advance(
            conn, parent, wait.step_id if first is None else min(first, wait.step_id), now=now
        )
        conn.execute(
            waits.update()
            .where(waits.c.run_id == parent_run_id, waits.c.step_id == wait.step_id)
            .values(resumed_workflow_id=resume.workflow_id)
        )
        return resume
    return None


def parent_of(conn: sa.Connection, run_id: str) -> str | None:
    """The run that started `run_id` as its child, or None."""
    parent: str | None = conn.execute(
        sa.select(children.c.parent_run_id).where(children.c.run_id == run_id)
    ).scalar_one_or_none()
    return parent


def wake_parent(db: Database, run_id: str, *, now: datetime) -> Resume | None:
    """After `run_id` ended (its end committed): move its parent on if it waited for it and
    its other children have ended too. Returns the resume to fork, or None. A worker's sweep
    does the same for a parent this call missed (`execution/waits.py`)."""

    # Most runs are no one's child, and most children end while their parent starts their
    # siblings or waits for others: a read says so without locking the parent (or taking
    # SQLite's write lock). The lock is taken, and all is read again under it, only when the
    # parent may move on.
    parent = db.read(f"run {run_id}: its parent", lambda conn: _may_move_on(conn, run_id))
    if parent is None:
        return None

    def once() -> Resume | None:
        with db.begin() as conn:
            return children_ready(conn, parent, now=now)

    return db.retrying(f"run {run_id}: its parent {parent}", once)


def _may_move_on(conn: sa.Connection, run_id: str) -> str | None:
    """The parent of `run_id`, if it waits on its current attempt for children that have all
    ended (as read without a lock); else None."""
    parent = parent_of(conn, run_id)
    if parent is None:
        return None
    rows = conn.execute(
        sa.select(waits.c.children)
        .join(runs, runs.c.run_id == waits.c.run_id)
        .where(
            waits.c.run_id == parent,
            waits.c.kind == "children",
            waits.c.status == "waiting",
            runs.c.workflow_id == waits.c.workflow_id,
        )
    ).scalars()
    for ids in rows:
        wanted = list(ids or [])
        ended = conn.execute(
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.run_id.in_(wanted), runs.c.status.in_(tuple(FINISHED)))
        ).scalar_one()
        if ended >= len(wanted):
            return parent
    return None

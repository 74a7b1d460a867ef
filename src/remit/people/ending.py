"""Ending a run from outside: `remit cancel`, and the reconciler failing a run past its
`timeout=`. Whatever the run was doing, it ends in one transaction with its pending gates
cancelled, its audit row and, if it concerns a record, the record's activity; its current
attempt in DBOS is cancelled after the commit and stops at its next step, its later status
writes refused by the fence. Its children still running are cancelled with it, but those
started `detached`; and a parent waiting for it is moved on.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

import sqlalchemy as sa

from remit.core.activity import run_ended
from remit.core.audit import audit_row
from remit.core.errors import RunNotFound
from remit.core.fence import FINISHED, LockedRun, cancel, lock
from remit.core.outbox import Resumer
from remit.core.runs import Run, RunStore
from remit.core.schema import approvals, audit, children, ledger, runs
from remit.core.waiting import wake_parent
from remit.people.approvals import approval_of, write_decision

if TYPE_CHECKING:
    from dbos import DBOSClient


def cancel_run(
    runs_store: RunStore,
    client: DBOSClient,
    run_id: str,
    *,
    by: str,
    timed_out: str | None = None,
    only_on: str | None = None,
) -> Run:
    """Cancel a run that has not finished, and its current attempt in DBOS; or, given
    `timed_out` (why), fail it so.

    A finished run is left as it is, and so is one that has moved past attempt `only_on`, when
    given. An attempt in flight stops at its next step; its later status writes are refused
    because the run is no longer running. The run's pending gates are cancelled in the same
    transaction, each with its audit row, and the run's end is written to its record's
    activity, if it concerns one.
    """
    now = runs_store.clock.now()
    status: Literal["cancelled", "failed"] = "cancelled" if timed_out is None else "failed"
    # A run left as it is is read after the transaction: a read on a second connection while
    # this one holds the run's lock (on SQLite, the write lock) could wait for a pooled
    # connection held by the threads that wait for that lock.
    with runs_store.db.begin() as conn:
        run = lock(conn, run_id)
        if run is None:
            raise RunNotFound(f"no run `{run_id}`: `remit runs` lists the runs")
        if only_on is not None and run.workflow_id != only_on:
            ended = False
        elif timed_out is not None and run.status == "running" and _calling(conn, run_id, run):
            ended = False  # its call ends within its timeout, then so does it
        else:
            ended = cancel(conn, run, now=now, status=status, error=timed_out)
        if ended:
            cancel_gates(conn, run_id, by=by, now=now, why=timed_out)
            run_ended(conn, run_id, status, at=now, actor=by, error=timed_out)
            audit_row(
                conn,
                at=now,
                actor=by,
                action="run.cancelled" if timed_out is None else "run.timed_out",
                target=run_id,
                meta={"workflow": run.workflow, "was": run.status},
            )
    if not ended:
        return runs_store.get(run_id)
    client.cancel_workflow(run.workflow_id)
    ended_from_outside(runs_store, client, run_id, by=by)
    return runs_store.get(run_id)


def ended_from_outside(runs_store: RunStore, client: DBOSClient, run_id: str, *, by: str) -> None:
    """After a run was ended from outside (its end committed): cancel its children that still
    run, but those started `detached`, each in its own transaction (and theirs in turn); and
    move its parent on if it waited for it."""
    with runs_store.db.engine.connect() as conn:
        running = list(
            conn.execute(
                sa.select(children.c.run_id)
                .join(runs, runs.c.run_id == children.c.run_id)
                .where(
                    children.c.parent_run_id == run_id,
                    children.c.detached.is_(False),
                    runs.c.status.not_in(tuple(FINISHED)),
                )
                .order_by(children.c.run_id)
            ).scalars()
        )
    for child in running:
        cancel_run(runs_store, client, child, by=by)
    resume = wake_parent(runs_store.db, run_id, now=runs_store.clock.now())
    if resume is not None:
        Resumer(runs_store.db, client, clock=runs_store.clock).fork_all([resume])


def _calling(conn: sa.Connection, run_id: str, run: LockedRun) -> bool:
    """Whether the locked run's current attempt has a call in flight (a call's `started` row
    is written under the run's lock, so none can begin meanwhile)."""
    found = conn.execute(
        sa.select(ledger.c.id)
        .where(
            ledger.c.run_id == run_id,
            ledger.c.attempt == run.attempt,
            ledger.c.status == "started",
        )
        .limit(1)
    ).first()
    return found is not None


def cancel_gates(
    conn: sa.Connection, run_id: str, *, by: str, now: datetime, why: str | None = None
) -> int:
    """Cancel the pending gates of a run being ended from outside (cancelled, or failed past
    its timeout: `why`), in the caller's transaction."""
    pending = [
        approval_of(row, {})
        for row in conn.execute(
            sa.select(approvals)
            .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
            .order_by(approvals.c.id)
            .with_for_update()
        )
    ]
    for row in pending:
        write_decision(
            conn,
            row,
            "cancelled",
            by=by,
            via="cancel",
            decision_key=None,
            batch_id=None,
            reason=f"run {run_id} was cancelled" if why is None else why,
            edited_draft=None,
            resumed_workflow_id=None,
            now=now,
        )
    return len(pending)


# Who cancels a child whose parent was cancelled without it (`cancel_orphans`).
ORPHANS_ACTOR = "remit:cancel"


def cancel_orphans(runs_store: RunStore, client: DBOSClient, *, limit: int = 100) -> list[str]:
    """Cancel the children still running whose parent was cancelled (or failed past its
    timeout) without them: its process stopped between the parent's end and theirs. A worker's
    sweep calls it. Children started `detached` are left running. Returns the runs cancelled."""
    parents = runs.alias("parents")
    with runs_store.db.engine.connect() as conn:
        orphans = list(
            conn.execute(
                sa.select(children.c.run_id)
                .join(runs, runs.c.run_id == children.c.run_id)
                .join(parents, parents.c.run_id == children.c.parent_run_id)
                .where(
                    children.c.detached.is_(False),
                    runs.c.status.not_in(tuple(FINISHED)),
                    parents.c.status.in_(("cancelled", "failed")),
                    parents.c.finished_at.is_not(None),
                    audit_ended(parents.c.run_id),
                )
                .order_by(children.c.run_id)
                .limit(limit)
            ).scalars()
        )
    for orphan in orphans:
        cancel_run(runs_store, client, orphan, by=ORPHANS_ACTOR)
    return orphans


def audit_ended(run_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """SQL: the run was ended from outside (its `run.cancelled` or `run.timed_out` audit row),
    not by its own failure, which leaves its children as they are."""
    return sa.exists().where(
        audit.c.target == run_id, audit.c.action.in_(("run.cancelled", "run.timed_out"))
    )

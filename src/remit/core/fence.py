"""The run fence: which attempt of a run may act, and the one way a run moves to its next.

Attempt N of run R is the DBOS workflow `R:N` (`attempt_workflow_id`). The run's row names its
current attempt (`workflow_id`), and every read or write that depends on which attempt is
current goes through this module:

- `lock` (one run) and `lock_all` (several, in run id order): the rows locked for update till
  the caller's transaction ends, as `LockedRun`s. A transaction that moves a run on, answers
  what it waits on or cancels it takes the run's row first, before any row of its own (an
  approval, a task, a timer, a ledger row), so two of them on one run are ordered by this lock.
- `hold`: the row locked shared, raising `RunMovedOn` unless the run is still on the attempt
  and unfinished; what a gate's or a sleep's step does before it writes its own row.
- `LockedRun.on`: whether a locked run is on an attempt (in some statuses); `is_current` says
  the same in SQL, for a read that picks candidates before it locks each.
- `advance`: move a locked run to its next attempt and put the attempt's fork in the outbox,
  in the caller's transaction; `next_attempt` moves it without a fork (the caller enqueues).
- `status_write`: the statement of an attempt's own status write, which matches no row once the
  run has moved on; `cancel`: end a locked run as cancelled.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from remit.core.errors import RemitError, RunMovedOn
from remit.core.outbox import Resume, put
from remit.core.schema import runs

FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled"})
# The statuses an attempt may move on from: a finished or cancelled run stays as it is.
ACTIVE = ("queued", "running", "waiting", "sleeping", "paused")

# What `lock` reads of the row.
_LOCKED = (
    runs.c.run_id,
    runs.c.status,
    runs.c.attempt,
    runs.c.workflow_id,
    runs.c.queue,
    runs.c.workflow,
    runs.c.input,
)


def attempt_workflow_id(run_id: str, attempt: int) -> str:
    """The DBOS workflow id of attempt `attempt` of run `run_id`."""
    return f"{run_id}:{attempt}"


@dataclass(frozen=True)
class LockedRun:
    """A run's row as `lock` read it. It stays so till the caller's transaction ends, except
    through `advance`, `next_attempt` and `cancel`, after which it is out of date."""

    run_id: str
    status: str
    attempt: int
    workflow_id: str
    queue: str
    workflow: str
    input: dict[str, Any]

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def on(self, workflow_id: str, statuses: Collection[str] = ACTIVE) -> bool:
        """Whether the run is on the attempt `workflow_id` and in one of `statuses` (by
        default: any status but finished)."""
        return self.workflow_id == workflow_id and self.status in statuses


def lock(conn: sa.Connection, run_id: str) -> LockedRun | None:
    """Lock the run's row for update inside the caller's transaction (None: no such run)."""
    row = conn.execute(_LOCK_ONE, {"lock_run": run_id}).one_or_none()
    return None if row is None else LockedRun(**row._mapping)


# `lock`'s statement, built once: an op call's write takes it in its step's transaction.
_LOCK_ONE = sa.select(*_LOCKED).where(runs.c.run_id == sa.bindparam("lock_run")).with_for_update()


def lock_all(conn: sa.Connection, run_ids: Iterable[str]) -> dict[str, LockedRun]:
    """Lock the rows of `run_ids` for update inside the caller's transaction, in run id order
    (the order every transaction that locks several runs takes, so two cannot deadlock). A run
    that does not exist is left out."""
    wanted = sorted(set(run_ids))
    if not wanted:
        return {}
    rows = conn.execute(
        sa.select(*_LOCKED)
        .where(runs.c.run_id.in_(wanted))
        .order_by(runs.c.run_id)
        .with_for_update()
    )
    return {row.run_id: LockedRun(**row._mapping) for row in rows}


def hold(conn: sa.Connection, run_id: str, workflow_id: str) -> None:
    """Lock the run's row shared inside the caller's transaction, and raise `RunMovedOn` unless
    the run is still on the attempt `workflow_id` and has not finished.

    Many steps of one attempt may hold the run at once; a transaction that moves it on (which
    locks it for update) waits for them, and they for it.
    """
    current = conn.execute(
        sa.select(runs.c.workflow_id, runs.c.status)
        .where(runs.c.run_id == run_id)
        .with_for_update(read=True)
    ).one_or_none()
    if current is None or current.workflow_id != workflow_id:
        raise RunMovedOn(f"run {run_id} is no longer on {workflow_id}")
    if current.status in FINISHED:
        raise RunMovedOn(f"run {run_id} is {current.status}")


def is_current(workflow_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """SQL for "the run's current attempt is the one `workflow_id` names" (a column of a table
    joined to the runs). A read that picks runs with it must lock each and check again (`on`)."""
    return runs.c.workflow_id == workflow_id


def next_attempt(
    conn: sa.Connection, run: LockedRun, *, now: datetime, reopen: bool = False
) -> tuple[int, str]:
    """Move the locked run to its next attempt, `queued`, inside the caller's transaction, and
    return the attempt's number and DBOS workflow id.

    From the commit on, every write of an earlier attempt is refused by the fence. The caller
    enqueues or forks the new attempt in the same transaction (`advance` forks it through the
    outbox). A finished run has no next attempt, except that a retry (`reopen`) moves a failed
    or cancelled one on, clearing its end.
    """
    if run.finished and not (reopen and run.status != "done"):
        raise RemitError(f"run `{run.run_id}` is {run.status}: a finished run has no next attempt")
    attempt = run.attempt + 1
    workflow_id = attempt_workflow_id(run.run_id, attempt)
    ended = {"finished_at": None, "error": None, "output": None} if reopen else {}
    moved = conn.execute(
        runs.update()
        .where(runs.c.run_id == run.run_id, runs.c.workflow_id == run.workflow_id)
        .values(attempt=attempt, workflow_id=workflow_id, status="queued", updated_at=now, **ended)
    ).rowcount
    if moved != 1:
        # The lock holds the row: only this transaction moved it since, on a stale LockedRun.
        raise RemitError(
            f"run {run.run_id} is no longer on {run.workflow_id} under its lock: it is moved on "
            "once per lock"
        )
    return attempt, workflow_id


def advance(
    conn: sa.Connection,
    run: LockedRun,
    from_step: int,
    *,
    now: datetime,
    reopen: bool = False,
) -> Resume:
    """Move the locked run to its next attempt and put that attempt in the outbox, to be forked
    from its current attempt at step `from_step`, inside the caller's transaction.

    After the commit the caller forks it (`Resumer.fork_all`); a fork it does not live to make
    is made by a worker's sweep. `reopen`: a retry of a failed or cancelled run.
    """
    _, workflow_id = next_attempt(conn, run, now=now, reopen=reopen)
    resume = Resume(workflow_id, run.run_id, run.workflow_id, from_step, run.queue)
    put(conn, resume, now=now)
    return resume


def cancel(
    conn: sa.Connection,
    run: LockedRun,
    *,
    now: datetime,
    status: Literal["cancelled", "failed"] = "cancelled",
    error: str | None = None,
) -> bool:
    """End the locked run from outside its attempt, inside the caller's transaction:
    `cancelled`, or `failed` with `error` (it went past its timeout). False (and nothing
    written) when it has already finished. Its current attempt's later status writes are
    refused: none starts from a finished status."""
    if run.finished:
        return False
    values: dict[str, Any] = {"status": status, "finished_at": now, "updated_at": now}
    if error is not None:
        values["error"] = error
    conn.execute(
        runs.update()
        .where(
            runs.c.run_id == run.run_id,
            runs.c.workflow_id == run.workflow_id,
            runs.c.status.in_(ACTIVE),
        )
        .values(**values)
    )
    return True


def status_write(
    run_id: str, workflow_id: str, values: dict[str, Any], *, from_statuses: Collection[str]
) -> tuple[sa.Update, dict[str, Any]]:
    """The statement of a status write by the attempt `workflow_id`, and its parameters: it
    changes the run only while the run is on that attempt in one of `from_statuses`, so it is
    safe to repeat and a superseded attempt's write matches no row. It sets the columns
    `values` names."""
    return fenced_update(tuple(from_statuses)), {
        **values,
        "fence_run": run_id,
        "fence_attempt": workflow_id,
    }


@functools.cache
def fenced_update(from_statuses: tuple[str, ...]) -> sa.Update:
    """`status_write`'s statement, built once: building one costs more than running it."""
    return runs.update().where(
        runs.c.run_id == sa.bindparam("fence_run"),
        runs.c.workflow_id == sa.bindparam("fence_attempt"),
        runs.c.status.in_(from_statuses),
    )

"""Retry: a failed or cancelled run carries on, on its next attempt, on the code workers run now.

A retry is a resume that a person asks for. In one transaction it locks the run, moves it to its
next attempt (the outbox row in `remit_resumes` covers a process that dies before the fork),
makes the calls it will make again callable, and writes an audit row; after the commit the
attempt is forked from the failed one. The steps before the point it carries on from are
copied, and checked against the code like every resume (`journal.py`): a step inserted,
removed or renamed before that point fails the run again, with nothing run.

Where it carries on: after the run's last finished step (a failed step, a gate still pending,
a sleep not over or a call waiting at its task runs again), or from the step a person names.
A write whose ledger row is `failed` is called again with its key (it did not happen); a write
that succeeded replays its recorded result, never made twice. Gates the run's cancellation
cancelled are pending again, for a person to decide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from remit.core.activity import RUN_RETRIED, activity_row, record_of_run
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RetryRefused
from remit.core.fence import advance, lock
from remit.core.keys import key_problem
from remit.core.outbox import Resume, Resumer
from remit.core.principals import check_actor
from remit.core.runs import Run, RunStore
from remit.core.schema import approvals, ledger, retries
from remit.execution.journal import after_last_finished
from remit.policy.guard import Guard

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.retries")

RETRYABLE = ("failed", "cancelled")


@dataclass(frozen=True)
class Retried:
    """What a retry did (or, replayed by its key, did the first time)."""

    run_id: str
    attempt: int
    workflow_id: str
    from_step: int
    replayed: bool


class Retries:
    """Retries failed and cancelled runs. Usable from any process: it needs the database and a
    DBOS client, no worker."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        *,
        guard: Guard | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.client = client
        self.guard = guard
        self.clock = clock or SystemClock()
        self.runs = RunStore(db, clock=self.clock)
        self.resumer = Resumer(db, client, clock=self.clock)

    def retry(
        self, run_id: str, *, by: str, from_step: int | None = None, key: str | None = None
    ) -> Retried:
        """Start the next attempt of the failed or cancelled run `run_id`, as `by`.

        Without `from_step` it carries on after its last finished step; with it, from that
        step (the steps before it copied, the rest run again under the ledger's rules). A
        repeated `key` returns the first retry's result and starts nothing. Checked by the
        policies (`retry` on the run's workflow) and audited. Raises `RetryRefused` (or
        `PolicyDenied`, `RunNotFound`) having written nothing.
        """
        check_actor(by, where="by")
        problem = (
            None
            if key is None
            else key_problem(key, what="retry key", longest=200, example="fix-1")
        )
        if problem is not None:
            raise RetryRefused(problem, run_id=run_id)
        if key is not None:
            replayed = self._replayed(key, run_id)
            if replayed is not None:
                return replayed
        run = self.runs.get(run_id)
        if run.status not in RETRYABLE:
            raise RetryRefused(
                f"run {run_id} is {run.status}: only a failed or cancelled run is retried"
                + (" (it has not finished: it carries on by itself)" if not run.finished else ""),
                run_id=run_id,
            )
        if self.guard is not None:
            self.guard.require(
                by, "retry", run.workflow, {"input": run.input, "status": run.status}
            )
        start = self._start(run, from_step)
        try:
            resume = self.db.retrying(
                f"retry {run_id}", lambda: self._retry_once(run, start, by=by, key=key)
            )
        except sa.exc.IntegrityError:
            # The same key committed first, from another process: read its result.
            assert key is not None
            replayed = self._replayed(key, run_id)
            if replayed is None:
                raise
            return replayed
        self.resumer.fork_all([resume])
        log.info("run %s retried by %s from step %d on %s", run_id, by, start, resume.workflow_id)
        return Retried(run_id, run.attempt + 1, resume.workflow_id, start, replayed=False)

    def _start(self, run: Run, from_step: int | None) -> int:
        """The step the retry carries on from, checked against where the run got.

        Its attempt may still be in the outbox (the run was cancelled between a decision and
        its fork): the fork is made first, so the retry carries on from what it copied."""
        if not self._held(run.workflow_id):
            with self.db.engine.connect() as conn:
                pending = self.resumer.pending(conn, [run.workflow_id])
            # Forked with the read's connection given back: a fork takes connections of its own.
            self.resumer.fork_all(pending)
            if not self._held(run.workflow_id):
                raise RetryRefused(
                    f"run {run.run_id}'s attempt {run.workflow_id} was never given to DBOS: "
                    "run `remit reconcile`, then retry it",
                    run_id=run.run_id,
                )
        steps = self.client.list_workflow_steps(run.workflow_id)
        natural = after_last_finished(
            (s["function_id"], s["function_name"], s["output"], s["error"]) for s in steps
        )
        if from_step is None:
            return natural
        if not 1 <= from_step <= natural:
            raise RetryRefused(
                f"run {run.run_id} cannot carry on from step {from_step}: it finished steps "
                f"1 to {natural - 1}, so give a step from 1 to {natural} (`remit show "
                f"{run.run_id}` lists them)",
                run_id=run.run_id,
            )
        return from_step

    def _held(self, workflow_id: str) -> bool:
        return bool(
            self.client.list_workflows(
                workflow_ids=[workflow_id], load_input=False, load_output=False
            )
        )

    def _retry_once(self, run: Run, start: int, *, by: str, key: str | None) -> Resume:
        now = self.clock.now()
        with self.db.begin_bounded(f"retry {run.run_id}") as conn:
            current = lock(conn, run.run_id)
            assert current is not None, "a run is never deleted"
            if not current.on(run.workflow_id, RETRYABLE):
                raise RetryRefused(
                    f"run {run.run_id} moved on while it was being retried (it is "
                    f"{current.status} on {current.workflow_id}): look again with `remit show "
                    f"{run.run_id}`",
                    run_id=run.run_id,
                )
            resume = advance(conn, current, start, now=now, reopen=True)
            # A write that failed did not happen: called again with its key. (One that
            # succeeded replays its result; one whose outcome is unknown keeps its task.)
            again = conn.execute(
                ledger.update()
                .where(
                    ledger.c.run_id == run.run_id,
                    ledger.c.step_id >= start,
                    ledger.c.status == "failed",
                )
                .values(status="not_done")
            ).rowcount
            reopened = conn.execute(
                approvals.update()
                .where(
                    approvals.c.run_id == run.run_id,
                    approvals.c.step_id >= start,
                    approvals.c.status == "cancelled",
                    approvals.c.decided_via == "cancel",
                )
                .values(
                    status="pending",
                    decided_by=None,
                    decided_via=None,
                    decided_at=None,
                    decision_key=None,
                    reason=None,
                    resumed_workflow_id=None,
                )
            ).rowcount
            audit_row(
                conn,
                at=now,
                actor=by,
                action="run.retry",
                target=run.run_id,
                meta={
                    "was": run.status,
                    "from_workflow_id": run.workflow_id,
                    "workflow_id": resume.workflow_id,
                    "from_step": start,
                    "calls_again": again,
                    "gates_reopened": reopened,
                    "key": key,
                },
            )
            _retried_activity(conn, run, start, resume, by=by, at=now)
            if key is not None:
                conn.execute(
                    retries.insert().values(
                        retry_key=key,
                        run_id=run.run_id,
                        workflow_id=resume.workflow_id,
                        from_step=start,
                        retried_by=by,
                        retried_at=now,
                    )
                )
            return resume

    def _replayed(self, key: str, run_id: str) -> Retried | None:
        """The first retry made with `key`, its fork finished if it is still in the outbox."""
        with self.db.engine.connect() as conn:
            first = conn.execute(sa.select(retries).where(retries.c.retry_key == key)).one_or_none()
            if first is None:
                return None
            pending = self.resumer.pending(conn, [first.workflow_id])
        if first.run_id != run_id:
            raise RetryRefused(
                f"retry key {key!r} was already used to retry run {first.run_id}: use a new "
                "key for another retry",
                run_id=run_id,
            )
        self.resumer.fork_all(pending)
        attempt = int(first.workflow_id.rsplit(":", 1)[1])
        return Retried(run_id, attempt, first.workflow_id, first.from_step, replayed=True)


def _retried_activity(
    conn: sa.Connection, run: Run, start: int, resume: Resume, *, by: str, at: datetime
) -> None:
    """The activity row of a retry (`run.retried`), in the retry's transaction, if the run
    concerns a record: its timeline shows the run carrying on after it failed or was cancelled."""
    ref = record_of_run(conn, run.run_id)
    if ref is None:
        return
    attempt = resume.workflow_id.rsplit(":", 1)[1]
    activity_row(
        conn,
        ref,
        at=at,
        kind=RUN_RETRIED,
        actor=by,
        summary=f"{run.workflow} {run.status}, retried from step {start} on attempt {attempt}",
        run_id=run.run_id,
        meta={
            "workflow": run.workflow,
            "was": run.status,
            "from_step": start,
            "workflow_id": resume.workflow_id,
        },
    )

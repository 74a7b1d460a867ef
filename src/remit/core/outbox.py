"""The resume outbox: attempts to fork from the step that suspended their run.

A run suspended at a gate, a task or a long sleep has ended its attempt `R:N`. The transaction
that carries it on moves the run to attempt N+1 and puts a row here (`fence.advance` does both);
after the commit, `R:N+1` is forked from `R:N` at the step that suspended it. DBOS copies every
step before that one, so no finished step runs again, and runs that step again, which now reads
the decision (or finds its sleep over). A fork the process did not live to make is made by any
worker: at start and on its sweep. Forking onto an id DBOS already holds writes nothing, so two
processes completing one outbox row make one fork.

Once an attempt is forked it waits, queued, for a worker to dequeue it. Forking rings the
doorbell of its queue, so that a worker dequeues it at once rather than at its next poll of the
queue: in this process directly (`doorbell`), and on Postgres in every process listening, by a
`NOTIFY remit_outbox` naming the queue, sent in the transaction that takes the row out of the
outbox, so it is delivered once the fork is there to be dequeued (`ops/wake.py` listens). A
ring that is lost costs only the wait for that poll, which stays. A run's start rings its
queue the same way (`announce` in its transaction, then the process's doorbell), so that its
first attempt does not wait for the poll either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import resumes

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.resumes")

# The Postgres channel a fork is announced on; its payload is the queue the fork waits on.
CHANNEL = "remit_outbox"


@dataclass(frozen=True)
class Resume:
    """An attempt to fork from the step that suspended its run: one row of the outbox."""

    workflow_id: str
    run_id: str
    from_workflow_id: str
    from_step: int
    queue: str


def put(conn: sa.Connection, resume: Resume, *, now: datetime) -> None:
    """Put `resume` in the outbox inside the caller's transaction, the one that moved its run
    to the attempt it names (see `fence.advance`)."""
    conn.execute(resumes.insert().values(**resume.__dict__, created_at=now))


def announce(conn: sa.Connection, queue: str) -> None:
    """On Postgres, tell every worker listening that `queue` has an attempt to dequeue: a
    `NOTIFY remit_outbox` inside the caller's transaction, delivered when it commits, so never
    before the attempt is there. The caller rings this process's `doorbell` after the commit
    (on SQLite, the only ring there is)."""
    if conn.dialect.name != "sqlite":
        conn.execute(sa.select(sa.func.pg_notify(CHANNEL, queue)))


class Resumer:
    """Forks the attempts the outbox holds: right after the commit that put them there, or
    later from a worker's sweep."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        *,
        clock: Clock | None = None,
        bell: Doorbell | None = None,
    ) -> None:
        self.db = db
        self.client = client
        self.clock = clock or SystemClock()
        # What a fork rings in this process (default: the process's `doorbell`).
        self.bell = bell or doorbell

    def pending(self, conn: sa.Connection, workflow_ids: list[str]) -> list[Resume]:
        """The outbox rows still unforked among `workflow_ids`."""
        if not workflow_ids:
            return []
        rows = conn.execute(sa.select(resumes).where(resumes.c.workflow_id.in_(workflow_ids)))
        return [_resume(row) for row in rows]

    def fork_all(self, to_fork: Iterable[Resume]) -> None:
        """Fork each, after the commit that wrote them. A failure is logged and left in the
        outbox: what committed stands, and a worker's sweep makes the fork later."""
        for resume in to_fork:
            try:
                self.fork(resume)
            except Exception:
                log.exception(
                    "run %s: resume on %s failed; a worker's sweep makes it from the outbox",
                    resume.run_id,
                    resume.workflow_id,
                )

    def fork(self, resume: Resume) -> bool:
        """Fork the attempt `resume` names and take it out of the outbox. False if it was
        already forked (by another process completing the same outbox row)."""
        from dbos import SetWorkflowID

        made = True
        try:
            with SetWorkflowID(resume.workflow_id):
                self.client.fork_workflow(
                    resume.from_workflow_id, resume.from_step, queue_name=resume.queue
                )
        except sa.exc.IntegrityError:
            # Forking onto an id DBOS already holds writes nothing: the fork was made.
            found = self.client.list_workflows(
                workflow_ids=[resume.workflow_id], load_input=False, load_output=False
            )
            if not found:
                raise
            made = False
        self.bell.ring(resume.queue)
        self.db.retrying(f"run {resume.run_id}: outbox", lambda: self._take_out(resume))
        if made:
            log.info(
                "run %s resumes on %s from step %d of %s",
                resume.run_id,
                resume.workflow_id,
                resume.from_step,
                resume.from_workflow_id,
            )
        return made

    def _take_out(self, resume: Resume) -> None:
        """Delete `resume`'s row, its fork made, and on Postgres announce the fork to the
        workers listening (`NOTIFY`, delivered when this commits: after the fork)."""
        delete = resumes.delete().where(resumes.c.workflow_id == resume.workflow_id)
        if self.db.is_sqlite:
            self.db.execute_one(delete)
            return
        # One statement, one round trip: the DELETE in a WITH runs whatever the SELECT reads.
        self.db.execute_one(
            sa.select(sa.func.pg_notify(CHANNEL, resume.queue)).add_cte(delete.cte("taken"))
        )

    def complete_outbox(self, *, older_than: float = 0.0, limit: int = 100) -> int:
        """Fork every attempt the outbox still holds (at least `older_than` seconds old).

        Run by every worker at start and by its sweep. One row's failure is logged and the
        others go on. Returns the forks made.
        """
        cutoff = self.clock.now() - timedelta(seconds=older_than)
        with self.db.engine.connect() as conn:
            rows = [
                _resume(row)
                for row in conn.execute(
                    sa.select(resumes)
                    .where(resumes.c.created_at <= cutoff)
                    .order_by(resumes.c.created_at)
                    .limit(limit)
                )
            ]
        made = 0
        for resume in rows:
            try:
                if self.fork(resume):
                    log.warning(
                        "outbox: run %s resumed on %s after the process that moved it stopped "
                        "before the fork",
                        resume.run_id,
                        resume.workflow_id,
                    )
                    made += 1
            except Exception:
                log.exception("outbox: run %s could not be resumed; next sweep", resume.run_id)
        return made


class Doorbell:
    """Rings that end a wait for a queue early: the process's queue threads wait here between
    their polls (`ops/wake.py`), and a fork rings its queue's. A ring while no thread waits on
    its queue is kept until one does, so a ring between two waits is not lost; rings of one
    queue before that wait come to one."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._rung: set[str] = set()
        self._served: set[str] = set()

    def ring(self, queue: str) -> None:
        """Wake the threads that wait on `queue` (or the next one to wait on it)."""
        with self._changed:
            self._rung.add(queue)
            self._changed.notify_all()

    def ring_all(self) -> None:
        """Ring every queue a thread has waited on: rings may have been missed."""
        with self._changed:
            self._rung.update(self._served)
            self._changed.notify_all()

    def wake_all(self) -> None:
        """Wake every waiting thread, ringing nothing, to look at its `done` again."""
        with self._changed:
            self._changed.notify_all()

    def wait(self, queue: str, timeout: float | None, done: Callable[[], bool]) -> bool:
        """Wait until `queue` is rung, `done()` is true (checked when woken) or `timeout`
        seconds have passed; True if it was rung. The ring is taken."""
        with self._changed:
            self._served.add(queue)
            self._changed.wait_for(lambda: queue in self._rung or done(), timeout)
            rung = queue in self._rung
            self._rung.discard(queue)
            return rung


# The process's doorbell: every fork made in this process rings it.
doorbell = Doorbell()


def _resume(row: Any) -> Resume:
    return Resume(row.workflow_id, row.run_id, row.from_workflow_id, row.from_step, row.queue)

"""The resume outbox: attempts to fork from the step that suspended their run.

A run suspended at a gate, a task or a long sleep has ended its attempt `R:N`. The transaction
that carries it on moves the run to attempt N+1 and puts a row here (`fence.advance` does both);
after the commit, `R:N+1` is forked from `R:N` at the step that suspended it. DBOS copies every
step before that one, so no finished step runs again, and runs that step again, which now reads
the decision (or finds its sleep over). A fork the process did not live to make is made by any
worker: at start and on its sweep. Forking onto an id DBOS already holds writes nothing, so two
processes completing one outbox row make one fork.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
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


class Resumer:
    """Forks the attempts the outbox holds: right after the commit that put them there, or
    later from a worker's sweep."""

    def __init__(self, db: Database, client: DBOSClient, *, clock: Clock | None = None) -> None:
        self.db = db
        self.client = client
        self.clock = clock or SystemClock()

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
        self.db.retrying(
            f"run {resume.run_id}: outbox",
            lambda: self.db.execute_one(
                resumes.delete().where(resumes.c.workflow_id == resume.workflow_id)
            ),
        )
        if made:
            log.info(
                "run %s resumes on %s from step %d of %s",
                resume.run_id,
                resume.workflow_id,
                resume.from_step,
                resume.from_workflow_id,
            )
        return made

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


def _resume(row: Any) -> Resume:
    return Resume(row.workflow_id, row.run_id, row.from_workflow_id, row.from_step, row.queue)

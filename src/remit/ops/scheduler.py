"""The scheduler: a worker's sweep starts the runs its app's schedules have made due.

What is due is decided in `schedules.py`; this module reads and writes `remit_schedules` and
starts the runs. Each instant fires at most once, whatever runs at once:

- the run an instant starts has an id derived from the app, the workflow and the instant
  (`scheduled_run_id`), and starting it writes the run's row and enqueues its first attempt in
  one transaction, so a second start, by a racing worker or after a restart, is refused by the
  primary key and counts as fired;
- the schedule's row records how far its instants have been dealt with (`swept_through`), and
  moves only forward, after the runs it covers are started: a worker that dies in between leaves
  the row behind, and the next sweep finds those runs started already.

A paused schedule (`remit schedules pause`) is passed over, its row left as it was: once it is
resumed, the instants it missed meanwhile are fired or skipped as its backfill says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.app import App
from remit.core.clock import Clock, SystemClock
from remit.core.errors import InputInvalid
from remit.core.runs import RunStore
from remit.core.schema import runs, schedules
from remit.declare.schedules import ON_TIME, Schedule, scheduled_input, scheduled_run_id
from remit.declare.workflows import Workflow
from remit.ops.schedules import paused_schedules

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.scheduler")

STARTED_BY = "remit:schedule"


@dataclass(frozen=True)
class Fired:
    """One instant fired: the run it has. `started` is False when the run existed already (a
    racing worker, or a sweep cut off before it recorded its progress, started it)."""

    workflow: str
    at: datetime
    run_id: str
    started: bool


class Scheduler:
    """Fires the app's scheduled workflows: `fire_due()` on every sweep of a worker.

    `interval` is the worker's sweep interval: an instant found at most two sweeps (and at least
    `ON_TIME`) late is on time, never skipped as missed.
    """

    def __init__(
        self,
        app: App,
        runs: RunStore,
        client: DBOSClient,
        *,
        clock: Clock | None = None,
        interval: float = 5.0,
    ) -> None:
        self.app = app
        self.runs = runs
        self.db = runs.db
        self.client = client
        self.clock = clock or SystemClock()
        self.on_time = max(ON_TIME, timedelta(seconds=2 * interval))
        self.scheduled = {wf.name: wf for wf in app.workflows.values() if wf.trigger is not None}
        self._swept = False

    def fire_due(self) -> list[Fired]:
        """Start the run of every instant due now, as each schedule's backfill says, and record
        how far each schedule got. Nothing is written while nothing is due.

        A schedule whose runs cannot be started (the database is away) is logged and left
        where it was, for the next sweep; the others go on. Rows of workflows the app no longer
        schedules are deleted; an app that schedules nothing reads nothing after its first sweep.
        """
        if not self.scheduled and self._swept:
            return []
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            rows = {
                row.workflow: row
                for row in conn.execute(
                    sa.select(schedules).where(schedules.c.app == self.app.name)
                )
            }
            paused = paused_schedules(conn, self.app.name) if self.scheduled else set()
        retired = sorted(set(rows) - set(self.scheduled))
        if retired:
            self.db.execute_one(
                schedules.delete().where(
                    schedules.c.app == self.app.name, schedules.c.workflow.in_(retired)
                )
            )
            log.info("schedules no longer declared, dropped: %s", ", ".join(retired))
        self._swept = True
        fired: list[Fired] = []
        # A paused schedule is left as it was: what it misses is missed (see `ops/schedules.py`).
        for name in sorted(set(self.scheduled) - paused):
            try:
                fired += self._sweep(self.scheduled[name], rows.get(name), now)
            except Exception:
                log.exception("schedule of `%s` could not fire; the next sweep tries again", name)
        return fired

    def _sweep(self, wf: Workflow, row: sa.Row[Any] | None, now: datetime) -> list[Fired]:
        trigger = wf.trigger
        assert trigger is not None
        if row is None:
            self._begin(wf.name, trigger, now)
            return []
        declared = (trigger.cron, trigger.tz, trigger.backfill)
        # A changed declaration (a new cron, say) takes over from the instants after the last
        # sweep: its own instants since then are due or missed like any others.
        changed = (row.cron, row.tz, row.backfill) != declared
        if not changed and now < row.next_at:
            return []
        due = trigger.due(row.swept_through, now, on_time=self.on_time)
        if due.skipped:
            log.warning(
                "schedule of `%s`: %s%d instants between %s and %s were missed (no worker swept) "
                "and are skipped, as backfill=%r says",
                wf.name,
                "at least " if due.more else "",
                due.skipped,
                row.swept_through.isoformat(),
                now.isoformat(),
                trigger.backfill,
            )
        # Oldest first; a failure stops here, leaving the row where it was.
        fired = [each for at in due.fire if (each := self._fire(wf, at)) is not None]
        values: dict[str, object] = {
            "cron": trigger.cron,
            "tz": trigger.tz,
            "backfill": trigger.backfill,
            "swept_through": now,
            "next_at": trigger.next_after(now),
            "updated_at": now,
        }
        if fired:
            latest = fired[-1].at
            values["last_fired_at"] = sa.case(
                (
                    sa.or_(schedules.c.last_fired_at.is_(None), schedules.c.last_fired_at < latest),
                    latest,
                ),
                else_=schedules.c.last_fired_at,
            )
        # Only forward: a worker whose sweep began earlier cannot move the row back.
        self.db.retrying(
            f"schedule of `{wf.name}`: progress",
            lambda: self.db.execute_one(
                schedules.update()
                .where(
                    schedules.c.app == self.app.name,
                    schedules.c.workflow == wf.name,
                    schedules.c.swept_through <= now,
                )
                .values(values)
            ),
        )
        return fired

    def _begin(self, name: str, trigger: Schedule, now: datetime) -> None:
        """A schedule seen for the first time starts from now: nothing before it was missed."""
        insert = self.db.insert
        statement = (
            insert(schedules)
            .values(
                app=self.app.name,
                workflow=name,
                cron=trigger.cron,
                tz=trigger.tz,
                backfill=trigger.backfill,
                swept_through=now,
                next_at=trigger.next_after(now),
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["app", "workflow"])
        )
        self.db.retrying(f"schedule of `{name}`: begin", lambda: self.db.execute_one(statement))

    def _fire(self, wf: Workflow, at: datetime) -> Fired | None:
        """Start the run of the instant `at`; None when its input does not parse (a validator
        of the model refused that instant): logged, and the instant skipped, not retried."""
        run_id = scheduled_run_id(self.app.name, wf.name, at)
        if self._exists(run_id):
            return Fired(wf.name, at, run_id, started=False)

        def start() -> bool:
            try:
                self.runs.start(
                    self.client,
                    wf,
                    scheduled_input(wf.input, at),
                    started_by=STARTED_BY,
                    run_id=run_id,
                )
            except sa.exc.IntegrityError:
                return False  # started meanwhile by another worker
            return True

        # Safe to repeat: a start whose commit went through before the connection was lost
        # is refused the second time, and counts as fired.
        try:
            started = self.db.retrying(f"schedule of `{wf.name}`: start {run_id}", start)
        except InputInvalid as error:
            log.error("schedule of `%s` skips %s: %s", wf.name, at.isoformat(), error)
            return None
        if started:
            log.info("schedule of `%s` fired for %s: run %s", wf.name, at.isoformat(), run_id)
        return Fired(wf.name, at, run_id, started=started)

    def _exists(self, run_id: str) -> bool:
        with self.db.engine.connect() as conn:
            found = conn.execute(sa.select(runs.c.run_id).where(runs.c.run_id == run_id))
            return found.first() is not None

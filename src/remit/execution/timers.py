"""Long sleeps: `ctx.sleep` past a threshold suspends the run until its deadline.

A short sleep is DBOS's own durable sleep, which holds the attempt's thread while it waits. A
sleep longer than `REMIT_SUSPEND_AFTER` seconds is a step that writes a timer row (`run_id`,
`step_id`, `wake_at`) and ends the attempt with the run `sleeping`, holding nothing. At
`wake_at` a worker's sweep moves the run to its next attempt, forked from the sleep's step
(`core/outbox.py`): the steps before it are copied, and the step, run again, finds the timer woken
and returns. Whether a sleep is over is decided inside its step, so a replay decides the same.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import Suspended
from remit.core.fence import advance, hold, is_current, lock
from remit.core.outbox import Resume, Resumer
from remit.core.runs import RunInfo
from remit.core.schema import runs, timers
from remit.core.waiting import first_waiting

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.timers")

# Sleeps up to this long (seconds) hold their thread; longer ones suspend the run.
DEFAULT_SUSPEND_AFTER = 60.0


@dataclass(frozen=True)
class Woken:
    """A run a sweep woke: moved to its next attempt past its sleep."""

    run_id: str
    step_id: int
    wake_at: datetime
    resumed_workflow_id: str


class Timers:
    """The sleep side: what an attempt does at a long `ctx.sleep`."""

    def __init__(
        self,
        db: Database,
        *,
        suspend_after: float = DEFAULT_SUSPEND_AFTER,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.suspend_after = suspend_after
        self.clock = clock or SystemClock()

    def open(self, run: RunInfo, step_id: int, seconds: float) -> dict[str, Any]:
        """Create the sleep's timer, or read it back, and say whether the sleep is over: the
        body of the sleep's step. Idempotent. Locks the run before the timer, as the sweep
        does. A timer still sleeping moves to the current attempt, the one a wake resumes."""
        now = self.clock.now()

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold(conn, run.run_id, run.workflow_id)
                insert = self.db.insert
                conn.execute(
                    insert(timers)
                    .values(
                        run_id=run.run_id,
                        step_id=step_id,
                        workflow_id=run.workflow_id,
                        created_at=now,
                        wake_at=now + timedelta(seconds=seconds),
                        status="sleeping",
                    )
                    .on_conflict_do_nothing(index_elements=["run_id", "step_id"])
                )
                key = (timers.c.run_id == run.run_id, timers.c.step_id == step_id)
                row = conn.execute(sa.select(timers).where(*key)).one()
                if row.status == "sleeping" and row.workflow_id != run.workflow_id:
                    conn.execute(timers.update().where(*key).values(workflow_id=run.workflow_id))
                over = row.status == "woken" or now >= row.wake_at
                return {"wake_at": row.wake_at.isoformat(), "over": over}

        return self.db.retrying(f"run {run.run_id}: sleep at step {step_id}", write)

    @staticmethod
    def outcome(row: dict[str, Any]) -> None:
        """Return if the sleep is over; else suspend the run until its deadline."""
        if not row["over"]:
            raise Suspended("sleeping", f"sleeps until {row['wake_at']}")


class Waker:
    """The sweep side: wakes the runs whose sleep is due."""

    def __init__(self, db: Database, client: DBOSClient, *, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()
        self.resumer = Resumer(db, client, clock=self.clock)

    def wake_due(self, *, limit: int = 100) -> list[Woken]:
        """Move every run whose sleep is due to its next attempt, and fork it.

        Only a run still `sleeping` on the attempt that wrote the timer is woken, under its row
        lock, so two workers sweeping at once wake it once. One run's failure is logged and the
        others go on.
        """
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            due = list(
                conn.execute(
                    sa.select(timers.c.run_id, timers.c.step_id)
                    .join(runs, runs.c.run_id == timers.c.run_id)
                    .where(
                        timers.c.status == "sleeping",
                        timers.c.wake_at <= now,
                        runs.c.status == "sleeping",
                        is_current(timers.c.workflow_id),
                    )
                    .order_by(timers.c.wake_at)
                    .limit(limit)
                )
            )
        woken: list[Woken] = []
        for run_id, step_id in due:
            try:
                done = self.db.retrying(
                    f"run {run_id}: wake", functools.partial(self._wake, run_id, step_id, now)
                )
            except Exception:
                log.exception("wake: run %s could not be woken; next sweep", run_id)
                continue
            if done is not None:
                resume, wake_at = done
                self.resumer.fork_all([resume])
                log.info("run %s woke from its sleep due at %s", run_id, wake_at.isoformat())
                woken.append(Woken(run_id, step_id, wake_at, resume.workflow_id))
        return woken

    def _wake(self, run_id: str, step_id: int, now: datetime) -> tuple[Resume, datetime] | None:
        with self.db.begin() as conn:
            run = lock(conn, run_id)
            key = (timers.c.run_id == run_id, timers.c.step_id == step_id)
            timer = conn.execute(sa.select(timers).where(*key).with_for_update()).one_or_none()
            if (
                run is None
                or timer is None
                or timer.status != "sleeping"
                or not run.on(timer.workflow_id, ("sleeping",))
            ):
                return None  # woken by another sweep, cancelled, or moved on meanwhile
            # From the first wait of the attempt: an async run may wait at others too.
            waiting = first_waiting(conn, run_id, run.workflow_id)
            resume = advance(conn, run, step_id if waiting is None else waiting, now=now)
            conn.execute(
                timers.update()
                .where(*key)
                .values(status="woken", woken_at=now, resumed_workflow_id=resume.workflow_id)
            )
            return resume, timer.wake_at

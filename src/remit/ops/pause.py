"""Pausing an app: its queues stop dequeuing and its running work parks, until it is resumed.

The pause flag is one row of `remit_app_state`. Pausing writes the flag, then sets every queue
of the app to a global concurrency of 0 in DBOS's queue table, which every worker re-reads on
each poll: from the next poll on no attempt is dequeued (a run started meanwhile stays
`queued`). Each worker keeps a copy of the flag, refreshed every `REMIT_SWEEP_INTERVAL` seconds
(`PauseWatch`); a running attempt checks it before each step and, while it is set, ends with
the run `paused` (the attempt holds nothing, like a run waiting at a gate). An attempt that
begins while the flag is set parks before its first step.

Resuming clears the flag, gives each queue its declared bounds back, and moves each parked run
to its next attempt, forked after the parked attempt's last finished step (through the resume
outbox, see `core/outbox.py`): no finished step runs again.

Every write is idempotent and the flag is written first, so a pause or resume that dies half
way is finished by the reconciler, whose pass re-derives the queues' bounds from the flag and,
while the app is not paused, resumes the runs still parked (a resume that landed while a worker
booted with the old flag, or a run that parked on a worker's stale copy after the resume).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from remit.app import App, Queue
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.fence import advance, lock
from remit.core.outbox import Resume, Resumer
from remit.core.periodic import Periodic
from remit.core.runs import app_runs, queue_id
from remit.core.schema import app_state, runs

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.pause")


@dataclass(frozen=True)
class Limits:
    """A queue's concurrency bounds in DBOS: across every worker and on one worker."""

    concurrency: int | None
    worker_concurrency: int | None


def limits(queue: Queue, *, paused: bool) -> Limits:
    """The bounds a queue runs with: 0 while the app is paused (DBOS dequeues nothing from a
    queue whose global concurrency is 0), its declared bounds otherwise. While paused the
    per-worker bound is dropped, since DBOS refuses one above the global bound."""
    if paused:
        return Limits(0, None)
    return Limits(queue.concurrency, queue.worker_concurrency)


# Seconds between the polls of a queue that no workflow of the app runs on (its `default`,
# when every workflow names a queue of its own), unless `REMIT_POLL_INTERVAL` is longer. Only
# an attempt queued there before a deploy moved its workflow elsewhere waits for a poll: a
# start or a resume onto the queue rings it (`ops/wake.py`). Every poll is a query, and on
# SQLite it takes the write lock, which the app's runs wait for.
UNUSED_QUEUE_POLL = 1.0


def queue_poll(app: App, queue: Queue, poll_interval: float) -> float:
    """Seconds between the polls of the app's `queue`: `poll_interval`, or `UNUSED_QUEUE_POLL`
    if longer for a queue no workflow of the app runs on."""
    if any(wf.queue == queue.name for wf in app.workflows.values()):
        return poll_interval
    return max(poll_interval, UNUSED_QUEUE_POLL)


def register_queue(
    client: DBOSClient,
    app: App,
    queue: Queue,
    *,
    paused: bool,
    poll_interval: float,
    name: str | None = None,
) -> None:
    """Write the app's queue's row in DBOS's queue table (`queue_id`, or `name`): its bounds
    as the pause flag says, polled as `queue_poll` says."""
    bounds = limits(queue, paused=paused)
    client.register_queue(
        name or queue_id(app.name, queue.name),
        global_concurrency=bounds.concurrency,
        worker_concurrency=bounds.worker_concurrency,
        limiter=None if queue.rate is None else {"limit": queue.rate[0], "period": queue.rate[1]},
        polling_interval_sec=queue_poll(app, queue, poll_interval),
        on_conflict="always_update",
    )


@dataclass(frozen=True)
class Parked:
    """A run parked by a pause, and the attempt it parked in."""

    run_id: str
    workflow_id: str


class AppState:
    """The app's pause flag, and what follows from it: its queues' bounds and its parked runs."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        app: App,
        *,
        poll_interval: float,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.client = client
        self.app = app
        self.poll_interval = poll_interval
        self.clock = clock or SystemClock()
        self.resumer = Resumer(db, client, clock=self.clock)

    def paused(self) -> bool:
        """Whether the app is paused."""
        return paused(self.db, self.app.name)

    def pause(self, *, by: str) -> list[str]:
        """Pause the app: set the flag, then stop every queue. Returns the queues stopped."""
        self._flag(True, by)
        return self.align_queues()

    def resume(self, *, by: str) -> tuple[list[str], list[str]]:
        """Resume the app: clear the flag, restore every queue's bounds, and carry the parked
        runs on. Returns the queues restored and the runs resumed."""
        self._flag(False, by)
        restored = self.align_queues()
        resumed = [p.run_id for p in self.parked() if self.resume_parked(p.run_id, p.workflow_id)]
        return restored, resumed

    def _flag(self, value: bool, by: str) -> None:
        now = self.clock.now()

        def write() -> None:
            with self.db.begin() as conn:
                changed = conn.execute(
                    app_state.update()
                    .where(app_state.c.app == self.app.name)
                    .values(paused=value, changed_at=now, changed_by=by)
                ).rowcount
                if not changed:
                    conn.execute(
                        app_state.insert().values(
                            app=self.app.name, paused=value, changed_at=now, changed_by=by
                        )
                    )
                audit_row(
                    conn,
                    at=now,
                    actor=by,
                    action="app.paused" if value else "app.resumed",
                    target=f"app:{self.app.name}",
                    meta={},
                )

        self.db.retrying(f"app {self.app.name}: pause flag", write)
        log.warning("app %s %s by %s", self.app.name, "paused" if value else "resumed", by)

    def dbos_queues(self) -> dict[str, Queue]:
        """The app's queues by their names in DBOS that DBOS holds for the app: each declared
        queue's own (`<app>:<queue>`) and, while DBOS keeps it, the bare name an earlier remit
        gave it, whose attempts queued before the upgrade are still served from it."""
        held = {q.name for q in self.client.list_queues()}
        found: dict[str, Queue] = {}
        for queue in self.app.queues.values():
            for name in (queue_id(self.app.name, queue.name), queue.name):
                if name in held:
                    found[name] = queue
        return found

    def queues_off(self, want_paused: bool | None = None) -> list[str]:
        """The app's queues (their names in DBOS) whose bounds disagree with the pause flag
        (or with `want_paused`). A queue no worker has registered yet is left to the first
        worker, which reads the flag first."""
        if want_paused is None:
            want_paused = self.paused()
        current = {q.name: q for q in self.client.list_queues()}
        off = []
        for name, queue in self.dbos_queues().items():
            found = current[name]
            want = limits(queue, paused=want_paused)
            if Limits(found.global_concurrency, found.worker_concurrency) != want:
                off.append(name)
        return off

    def align_queues(self) -> list[str]:
        """Give every queue the bounds the pause flag says; returns the queues written.

        The flag is read again after the writes: a pause or resume that landed between this
        read and these writes (a reconciler pass racing `remit pause`) would otherwise be
        undone by them, and stay undone until the next pass. Whoever writes last has read the
        flag after the other's write, so the queues end as the latest flag says.
        """
        written: list[str] = []
        want_paused = self.paused()
        while True:
            off = self.queues_off(want_paused)
            held = self.dbos_queues()
            for name in off:
                register_queue(
                    self.client,
                    self.app,
                    held[name],
                    paused=want_paused,
                    poll_interval=self.poll_interval,
                    name=name,
                )
                log.warning(
                    "queue %s %s",
                    name,
                    "stopped: the app is paused" if want_paused else "restored",
                )
            written += [name for name in off if name not in written]
            now_paused = self.paused()
            if now_paused == want_paused:
                return written
            want_paused = now_paused

    def parked(self) -> list[Parked]:
        """The app's runs parked by a pause, oldest first."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs.c.run_id, runs.c.workflow_id)
                .where(
                    runs.c.status == "paused",
                    runs.c.workflow.in_(list(self.app.workflows)),
                    app_runs(self.app.name),
                )
                .order_by(runs.c.created_at)
            )
            return [Parked(row.run_id, row.workflow_id) for row in rows]

    def resume_parked(self, run_id: str, workflow_id: str) -> str | None:
        """Move a run parked in attempt `workflow_id` to its next attempt, forked after that
        attempt's last finished step. Returns the new attempt's workflow id; None if the run
        had moved on."""
        start = 1 + max(
            (step["function_id"] for step in self.client.list_workflow_steps(workflow_id)),
            default=0,
        )
        with self.db.begin() as conn:
            current = lock(conn, run_id)
            if current is None or not current.on(workflow_id, ("paused",)):
                return None
            resume: Resume = advance(conn, current, start, now=self.clock.now())
        self.resumer.fork_all([resume])
        return resume.workflow_id


def paused(db: Database, app_name: str) -> bool:
    """Whether the app `app_name` is paused (no row: it never was)."""
    with db.engine.connect() as conn:
        return bool(
            conn.execute(sa.select(app_state.c.paused).where(app_state.c.app == app_name)).scalar()
        )


class PauseWatch:
    """A worker's copy of the pause flag, refreshed every `interval` seconds on a daemon thread.

    Attempts read `flag` before each step, which costs nothing; a pause reaches them within one
    interval. A failed read keeps the last value and is logged.
    """

    def __init__(self, read: Callable[[], bool], flag: threading.Event, interval: float) -> None:
        self.read = read
        self.flag = flag
        self.interval = interval
        self._periodic = Periodic("remit-pause", interval, self.refresh)

    def refresh(self) -> None:
        now = self.read()
        if now == self.flag.is_set():
            return
        if now:
            self.flag.set()
            log.info("the app is paused: each running run parks at its next step")
        else:
            self.flag.clear()
            log.info("the app is resumed: its runs carry on")

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

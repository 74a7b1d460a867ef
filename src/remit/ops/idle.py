"""Scale to zero: when a worker is idle, the deadline it registers before it stops, and the row
that records it all (`remit_wakeup`).

A worker is *idle* when nothing it could do is due before its next deadline, give or take the
idle horizon (`REMIT_IDLE_HORIZON`, the time a stopped worker takes to start again, and more):

- no attempt of the app's runs is running or queued on its queues (a queued one does not count
  while the app is paused: nothing would dequeue it);
- no resume waits in the outbox (a decided gate, an answered task or a woken sleep whose next
  attempt is not yet forked);
- no live worker of the app runs another version (a deploy is under way: one of the two
  versions still has runs to hand over or to finish);
- and the next deadline is past the horizon: a sleep's end, an approval's expiry, a schedule's
  next instant, a run's workflow timeout, the next send or retry of a gate's notification, or
  the reconciler's next pass after a pass that acted (or failed a step).

`StopRule.check` finds the worker idle, registers its next deadline with the wakeup service,
marks the row `stopping`, and finds it idle again with the same deadline before it says stop.
A write made elsewhere meanwhile either lands before that second look (which then sees it) or
reads `stopping` or `stopped` when it is done, and registers a wake for now itself
(`Client._woken`): either way no new work waits for the old deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import notifications, resumes, wakeups
from remit.core.text import describe_seconds
from remit.ops.deadlines import Deadline, next_deadline

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.idle")

RUNNING, STOPPING, STOPPED = "running", "stopping", "stopped"


@dataclass(frozen=True)
class WakeupRow:
    """An app's row in `remit_wakeup`: see the table's comment in `schema.py`."""

    app: str
    state: str
    executor_id: str | None
    at: datetime | None
    registered_at: datetime | None
    started_at: datetime | None
    stopped_at: datetime | None
    last_error: str | None
    error_at: datetime | None
    busy: str | None
    checked_at: datetime | None


class WakeupState:
    """Reads and writes of one app's row in `remit_wakeup`."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def get(self) -> WakeupRow | None:
        with self.db.engine.connect() as conn:
            row = conn.execute(sa.select(wakeups).where(wakeups.c.app == self.app)).one_or_none()
        if row is None:
            return None
        return WakeupRow(**{column.name: row._mapping[column.name] for column in wakeups.columns})

    def wants_wake(self) -> bool:
        """True when the app's worker is stopping or stopped: work written now must wake it."""
        with self.db.engine.connect() as conn:
            state = conn.execute(
                sa.select(wakeups.c.state).where(wakeups.c.app == self.app)
            ).scalar_one_or_none()
        return state in (STOPPING, STOPPED)

    def started(self, executor_id: str) -> None:
        self._write(state=RUNNING, executor_id=executor_id, started_at=self.clock.now(), busy=None)

    def stopping(self) -> None:
        self._write(state=STOPPING)

    def kept_running(self, why: str) -> None:
        """A stop called off at its second look: the worker serves on."""
        self._write(state=RUNNING, busy=why, checked_at=self.clock.now())

    def stopped(self) -> None:
        self._write(state=STOPPED, stopped_at=self.clock.now())

    def checked(self, busy: str | None) -> None:
        self._write(busy=busy, checked_at=self.clock.now())

    def registered(self, at: datetime | None) -> None:
        self._write(at=at, registered_at=self.clock.now(), last_error=None, error_at=None)

    def failed(self, error: str) -> None:
        self._write(last_error=error, error_at=self.clock.now())

    def _write(self, **values: Any) -> None:
        with self.db.begin() as conn:
            changed = conn.execute(
                wakeups.update().where(wakeups.c.app == self.app).values(**values)
            ).rowcount
            if not changed:
                conn.execute(wakeups.insert().values({"app": self.app, "state": RUNNING, **values}))


@dataclass(frozen=True)
class Stop:
    """The rule's word to stop: the deadline registered (None: nothing is due at any time)."""

    at: datetime | None


class IdleCheck:
    """Says why a worker is busy (None: it is idle), as the module's docstring defines idle."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        *,
        app: str,
        queues: Collection[str],
        executor_id: str,
        paused: Callable[[], bool],
        other_versions: Callable[[], Collection[str]],
        timeouts: Mapping[str, float],
        channels: Collection[str],
        reconciler_due: Callable[[], datetime | None],
        horizon: float,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.client = client
        self.app = app
        self.queues = list(queues)
        self.executor_id = executor_id
        self.paused = paused
        self.other_versions = other_versions
        self.timeouts = timeouts
        self.channels = list(channels)
        self.reconciler_due = reconciler_due
        self.horizon = horizon
        self.clock = clock or SystemClock()

    def busy(self) -> str | None:
        for reason in (self._attempts, self._outbox, self._versions, self._soon):
            found = reason()
            if found is not None:
                return found
        return None

    def deadline(self) -> Deadline | None:
        """The next deadline, as the worker registers it: those `remit deadlines` lists, each
        run's workflow timeout, the next send or retry of a gate's notification, and the
        reconciler's next pass after one that acted."""
        found = [
            deadline
            for deadline in (
                next_deadline(self.db, timeouts=self.timeouts, app=self.app),
                self._notification(),
                self._reconciliation(),
            )
            if deadline is not None
        ]
        return min(found, key=lambda deadline: (deadline.at, deadline.target), default=None)

    def _attempts(self) -> str | None:
        going = ["PENDING"] if self.paused() else ["PENDING", "ENQUEUED"]
        for found in (
            self.client.list_workflows(
                status=going, queue_name=self.queues, limit=1, load_input=False, load_output=False
            ),
            self.client.list_workflows(
                status="PENDING",
                executor_id=self.executor_id,
                limit=1,
                load_input=False,
                load_output=False,
            ),
        ):
            if found:
                attempt = found[0]
                doing = "queued" if attempt.status == "ENQUEUED" else "running"
                where = f" on queue `{attempt.queue_name}`" if attempt.queue_name else ""
                return f"attempt {attempt.workflow_id} is {doing}{where}"
        return None

    def _outbox(self) -> str | None:
        with self.db.engine.connect() as conn:
            waiting = conn.execute(
                sa.select(resumes.c.workflow_id).order_by(resumes.c.created_at).limit(1)
            ).scalar_one_or_none()
        if waiting is None:
            return None
        return f"attempt {waiting} waits in the resume outbox to be forked"

    def _versions(self) -> str | None:
        others = sorted(self.other_versions())
        if not others:
            return None
        return f"a live worker runs version {', '.join(others)}: a deploy is under way"

    def _soon(self) -> str | None:
        deadline = self.deadline()
        now = self.clock.now()
        if deadline is None or deadline.at > now + timedelta(seconds=self.horizon):
            return None
        left = max(0.0, (deadline.at - now).total_seconds())
        return (
            f"{deadline.describe()} in {describe_seconds(left)}, within the idle horizon of "
            f"{describe_seconds(self.horizon)} (REMIT_IDLE_HORIZON)"
        )

    def _notification(self) -> Deadline | None:
        if not self.channels:
            return None
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(notifications.c.approval_id, notifications.c.next_at)
                .where(
                    notifications.c.sent_at.is_(None),
                    notifications.c.channel.in_(self.channels),
                )
                .order_by(notifications.c.next_at)
                .limit(1)
            ).one_or_none()
        if row is None:
            return None
        return Deadline(row.next_at, "notification", "", row.approval_id)

    def _reconciliation(self) -> Deadline | None:
        due = self.reconciler_due()
        return None if due is None else Deadline(due, "reconcile", "", "reconciler")


class StopRule:
    """Decides when an idle worker stops, registering its next deadline first.

    `register(at)` asks the wakeup service to wake the instance at `at`; it raises when it could
    not. `activity()` counts the writes this process has seen (a request, a wake): one during a
    check calls its stop off. After `n` registrations in a row have failed, the next is tried
    no sooner than `retry_after(n)` seconds later (default 2, 4, 8 … up to 60), so a service
    that is down is not called, nor a ledger row written, on every check.
    """

    def __init__(
        self,
        check: IdleCheck,
        state: WakeupState,
        register: Callable[[datetime], object],
        *,
        activity: Callable[[], int] = lambda: 0,
        retry_after: Callable[[int], float] = lambda failures: min(2.0**failures, 60.0),
    ) -> None:
        self.idle = check
        self.state = state
        self.register = register
        self.activity = activity
        self.retry_after = retry_after
        self._last_problem: str | None = None
        self._failures = 0
        self._next_try = 0.0

    def check(self) -> Stop | None:
        """One check: `Stop` when the worker is to stop now, else None (it serves on)."""
        if time.monotonic() < self._next_try:
            return None
        seen = self.activity()
        busy = self.idle.busy()
        self.state.checked(busy)
        if busy is not None:
            return None
        first = self.idle.deadline()
        at = None if first is None else first.at
        if at is not None:
            try:
                self.register(at)
            except Exception as error:
                message = f"{type(error).__name__}: {error}" if not str(error) else str(error)
                self.state.failed(message)
                self._failures += 1
                self._next_try = time.monotonic() + self.retry_after(self._failures)
                if message != self._last_problem:
                    log.warning(
                        "could not register the wakeup at %s, so the worker keeps running: %s",
                        at.isoformat(),
                        message,
                    )
                self._last_problem = message
                return None
            self.state.registered(at)
        self._last_problem = None
        self._failures = 0
        self.state.stopping()
        again = self.idle.busy()
        later = self.idle.deadline()
        if again is None and self.activity() != seen:
            again = "a request arrived while it registered"
        if again is None and (None if later is None else later.at) != at:
            again = "the next deadline moved while it registered"
        if again is not None:
            self.state.kept_running(again)
            return None
        return Stop(at)

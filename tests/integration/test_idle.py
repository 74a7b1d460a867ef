"""When a worker is idle, on a real worker: it registers its next deadline before it stops, must
be idle twice with the same deadline, and a failed registration keeps it up, recorded."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, Context, schedule, workflow
from remit.core.outbox import Resume, put
from remit.core.schema import notifications
from remit.ops.deadlines import upcoming_deadlines
from remit.ops.idle import StopRule, WakeupState
from remit.testing import Harness, ManualClock
from tests.support import FakeShop, make_app

DAY = 86400.0


class Registrations:
    """A stand-in wakeup service: it records each registration, or refuses with `refusal`."""

    def __init__(self, before: Callable[[], object] = lambda: None) -> None:
        self.at: list[datetime] = []
        self.refusal: str | None = None
        self.before = before

    def __call__(self, at: datetime) -> None:
        self.before()
        if self.refusal is not None:
            raise ConnectionError(self.refusal)
        self.at.append(at)


def rule_of(
    h: Harness, register: Registrations, *, retry_after: float = 0.0
) -> tuple[StopRule, WakeupState]:
    state = WakeupState(h.worker.db, h.app.name, clock=h.worker.runtime.clock)
    rule = StopRule(h.worker.idle_check(), state, register, retry_after=lambda _: retry_after)
    return rule, state


def asleep(h: Harness) -> str:
    """A run asleep for a month, its attempt ended: the worker's one deadline."""
    run = h.start("nap", {"seconds": 30 * DAY})
    h.wait(run.run_id, until=("sleeping",))
    h.wait_attempt_ended(run.run_id, 1)
    return run.run_id


def test_an_idle_worker_registers_its_next_deadline_then_stops(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as h:
        asleep(h)
        register = Registrations()
        rule, state = rule_of(h, register)

        stop = rule.check()

        wake = clock.now() + timedelta(days=30)
        assert stop is not None
        assert stop.at == wake
        assert register.at == [wake]
        row = state.get()
        assert row is not None
        assert (row.state, row.at, row.busy, row.last_error) == ("stopping", wake, None, None)
        assert row.registered_at == clock.now()


def test_a_worker_with_nothing_due_stops_registering_nothing(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        register = Registrations()
        rule, _ = rule_of(h, register)
        stop = rule.check()
        assert stop is not None
        assert stop.at is None
        assert register.at == []


def test_a_running_attempt_keeps_the_worker_up_and_says_so(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        # A sleep shorter than REMIT_SUSPEND_AFTER holds its attempt in DBOS: it is running.
        run = h.start("nap", {"seconds": 20})
        h.wait(run.run_id, until=("running",))
        register = Registrations()
        rule, state = rule_of(h, register)
        deadline = time.monotonic() + 20
        while rule.check() is not None or "is running" not in (state.get().busy or ""):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the running attempt was never seen"
            time.sleep(0.1)
        row = state.get()
        assert row is not None
        assert row.state == "running"
        assert f"attempt {run.run_id}:1 is running" in (row.busy or "")
        assert register.at == []


def test_a_run_started_while_it_registers_keeps_the_worker_up(database_url: str) -> None:
    clock = ManualClock()
    # The run's order waits on the gate: a start rings its queue, so without it the run could
    # be dequeued and done before the rule looks again.
    shop = FakeShop()
    shop.gate = threading.Event()
    with Harness(
        make_app(),
        database_url=database_url,
        clock=clock,
        poll_interval=5.0,
        implementations={"shop": shop},
    ) as h:
        try:
            asleep(h)
            started: list[str] = []
            register = Registrations(
                lambda: started.append(h.start("purchase", {"sku": "sku-1"}).run_id)
            )
            rule, state = rule_of(h, register)

            assert rule.check() is None

            assert len(started) == 1
            assert register.at == [clock.now() + timedelta(days=30)]
            row = state.get()
            assert row is not None
            assert row.state == "running"
            # Queued, or already dequeued (its start rang the queue).
            busy = row.busy or ""
            assert any(
                f"attempt {started[0]}:1 is {what}" in busy for what in ("queued", "running")
            )
        finally:
            shop.gate.set()
        # Its attempt ends here, not after the database is gone.
        assert h.wait(started[0]).status == "done"


def test_a_failed_registration_keeps_the_worker_up_logged_once_per_message(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as h:
        asleep(h)
        register = Registrations()
        register.refusal = "the wakeup service refused: 503"
        rule, state = rule_of(h, register)

        with caplog.at_level(logging.WARNING, logger="remit.idle"):
            assert rule.check() is None
            assert rule.check() is None
            register.refusal = "connection refused"
            assert rule.check() is None
        warned = [r.getMessage() for r in caplog.records if r.name == "remit.idle"]
        assert len(warned) == 2
        assert "503" in warned[0]
        assert "connection refused" in warned[1]
        assert "keeps running" in warned[0]
        row = state.get()
        assert row is not None
        assert (row.state, row.last_error, row.at) == ("running", "connection refused", None)

        register.refusal = None
        stop = rule.check()
        assert stop is not None
        assert register.at == [clock.now() + timedelta(days=30)]
        row = state.get()
        assert row is not None
        assert row.last_error is None


def test_a_resume_waiting_in_the_outbox_keeps_the_worker_up(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url, sweep_interval=3600) as h:
        # A decider that died between its commit and the fork leaves its resume behind.
        with h.worker.db.begin() as conn:
            resume = Resume("r_gone:2", "r_gone", "r_gone:1", 3, "default")
            put(conn, resume, now=datetime.now(UTC))
        rule, state = rule_of(h, Registrations())
        assert rule.check() is None
        row = state.get()
        assert row is not None
        assert "r_gone:2 waits in the resume outbox" in (row.busy or "")


def minutely_app() -> App:
    class Tick(BaseModel):
        scheduled_at: datetime

    @workflow(name="tick", input=Tick, trigger=schedule("* * * * *"))
    def tick(ctx: Context, input: Tick) -> str:
        return input.scheduled_at.isoformat()

    return App(name="minutely", workflows=[tick])


def test_a_schedule_every_minute_never_lets_the_worker_stop(database_url: str) -> None:
    clock = ManualClock(datetime(2026, 12, 1, 12, 0, 10, tzinfo=UTC))
    with Harness(minutely_app(), database_url=database_url, clock=clock) as h:
        rule, state = rule_of(h, Registrations())
        for _ in range(3):
            assert rule.check() is None
            row = state.get()
            assert row is not None
            assert row.busy is not None
            assert "schedule `tick` fires in" in row.busy
            assert "REMIT_IDLE_HORIZON" in row.busy
            clock.advance(seconds=20)


def timed_app() -> App:
    class Ask(BaseModel):
        amount: int = 1

    class Draft(BaseModel):
        amount: int

    from remit import ApprovalType

    @workflow(name="timed", input=Ask, timeout=3 * DAY)
    def timed(ctx: Context, input: Ask) -> str:
        return ctx.approval("ok", type="plain", title="ok?", draft=Draft(amount=1)).status

    return App(name="timed", workflows=[timed], approvals=[ApprovalType("plain", draft=Draft)])


def test_a_workflow_timeout_is_the_deadline_a_waiting_run_registers(database_url: str) -> None:
    clock = ManualClock()
    with Harness(timed_app(), database_url=database_url, clock=clock) as h:
        run = h.start("timed", {})
        h.gate(run.run_id)
        h.wait_attempt_ended(run.run_id, 1)
        register = Registrations()
        rule, _ = rule_of(h, register)
        stop = rule.check()
        created = h.runs.get(run.run_id).created_at
        assert stop is not None
        assert stop.at == created + timedelta(days=3)
        assert register.at == [created + timedelta(days=3)]


def test_after_a_failed_registration_the_next_waits_its_turn(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as h:
        asleep(h)
        tries: list[int] = []
        register = Registrations(lambda: tries.append(1))
        register.refusal = "connection refused"
        rule, _ = rule_of(h, register, retry_after=0.5)
        assert rule.check() is None
        assert rule.check() is None  # too soon: the service is not called again
        assert len(tries) == 1
        time.sleep(0.6)
        register.refusal = None
        assert rule.check() is not None
        assert len(tries) == 2


def two_timeouts_app() -> App:
    class Ask(BaseModel):
        amount: int = 1

    class Draft(BaseModel):
        amount: int

    from remit import ApprovalType

    def waiting(name: str, days: float) -> Any:
        @workflow(name=name, input=Ask, timeout=days * DAY)
        def wait(ctx: Context, input: Ask) -> str:
            return ctx.approval("ok", type="plain", title="ok?", draft=Draft(amount=1)).status

        return wait

    return App(
        name="timeouts",
        workflows=[waiting("slow", 30), waiting("quick", 1)],
        approvals=[ApprovalType("plain", draft=Draft)],
    )


def test_the_nearest_timeout_counts_whichever_run_started_first(database_url: str) -> None:
    clock = ManualClock()
    with Harness(two_timeouts_app(), database_url=database_url, clock=clock) as h:
        slow = h.start("slow", {})
        h.gate(slow.run_id)
        clock.advance(hours=1)
        quick = h.start("quick", {})
        h.gate(quick.run_id)
        h.wait_attempt_ended(quick.run_id, 1)
        check = h.worker.idle_check()
        deadline = check.deadline()
        assert deadline is not None
        assert (deadline.kind, deadline.run_id) == ("timeout", quick.run_id)
        assert deadline.at == h.runs.get(quick.run_id).created_at + timedelta(days=1)
        listed = [
            d.run_id
            for d in upcoming_deadlines(h.worker.db, timeouts={"slow": 30 * DAY, "quick": DAY})
        ]
        assert listed == [quick.run_id, slow.run_id]


def test_a_resume_from_elsewhere_counts_queued_runs_at_once(database_url: str) -> None:
    # The worker's own copy of the pause flag is refreshed only every hour here.
    with Harness(make_app(), database_url=database_url, sweep_interval=3600) as h:
        # The purchase holds in its order step, so it is still queued or running when the
        # check looks, however soon the worker dequeues it after the resume.
        shop = h.fake("shop", FakeShop)
        shop.gate = threading.Event()
        h.client.ops.pause(by="user:ops")
        run = h.start("purchase", {"sku": "sku-1"})
        other = h.client  # another process's client would write the same rows
        rule, state = rule_of(h, Registrations())
        other.ops.resume(by="user:ops")
        try:
            assert rule.check() is None
            row = state.get()
            assert row is not None
            assert f"attempt {run.run_id}:1 is" in (row.busy or "")
        finally:
            shop.gate.set()
        assert h.wait(run.run_id).status == "done"


def test_a_notification_to_retry_is_a_deadline_of_its_own(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 1})
        gate = h.gate(run.run_id)
        h.wait_attempt_ended(run.run_id, 1)
        # Its notification failed and is to be tried again in 80 s, past the idle horizon.
        with h.worker.db.begin() as conn:
            conn.execute(
                notifications.update()
                .where(notifications.c.approval_id == gate.id)
                .values(sent_at=None, next_at=clock.now() + timedelta(seconds=80), attempts=4)
            )
        channels = h.worker.runtime.notifications.channels
        assert channels, "the harness's worker has a notifier"
        register = Registrations()
        rule, _ = rule_of(h, register)
        stop = rule.check()
        assert stop is not None
        assert register.at == [clock.now() + timedelta(seconds=80)]

"""Long sleeps and deadlines on a real worker with an injected clock: a run sleeps for a month,
holding nothing, and carries on at its deadline without running a finished step again."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from remit import next_deadline
from remit.testing import Harness, ManualClock
from tests.support import FakeShop, make_app

DAY = 86400.0


def test_a_month_of_sleep_and_a_week_to_expire_run_in_moments(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        began = time.monotonic()
        run = h.start("nap", {"expires_in": 7 * DAY})
        sleeping = h.wait(run.run_id, until=("sleeping",))
        assert (sleeping.status, sleeping.attempt) == ("sleeping", 1)
        assert h.wait_attempt_ended(run.run_id, 1) == "SUCCESS"  # the attempt holds nothing
        (wake,) = h.deadlines()
        assert (wake.kind, wake.run_id, wake.target) == ("wake", run.run_id, f"{run.run_id}:2")
        assert wake.at == clock.now() + timedelta(days=30)
        assert next_deadline(h.worker.db) == wake
        assert next_deadline(database_url) == wake

        clock.advance(days=29)
        time.sleep(0.1)  # sweeps pass; nothing is due yet
        assert h.runs.get(run.run_id).status == "sleeping"

        clock.advance(days=1)
        gate = h.gate(run.run_id)
        assert gate.expires_at == clock.now() + timedelta(days=7)
        (expiry,) = h.deadlines()
        assert (expiry.kind, expiry.target) == ("expiry", gate.id)

        clock.advance(days=7)
        done = h.wait(run.run_id)
        took = time.monotonic() - began

        assert done.status == "done", done.error
        assert done.output == {"order_id": "ord_1", "approval": "expired"}
        assert done.attempt == 3
        shop = h.fake("shop", FakeShop)
        assert (shop.reads, shop.orders) == (1, 1)  # nothing before a suspension ran twice
        assert [(row.op_id, row.attempt) for row in h.ledger(run.run_id)] == [
            ("shop.items.get", 1),
            ("shop.orders.create", 2),
        ]
        assert h.deadlines() == []
    # Typically 0.3 to 0.6 s here; the bound only shows no real waiting happened (the sleeps
    # are of days), with room for a loaded machine.
    assert took < 30.0, f"a simulated month took {took:.2f}s"


def test_an_async_run_sleeps_and_wakes_the_same_way(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        run = h.start("nap-async", {"seconds": 2 * DAY})
        h.wait(run.run_id, until=("sleeping",))
        clock.advance(days=2)
        done = h.wait(run.run_id)
        assert (done.status, done.output, done.attempt) == ("done", "awake", 2)
        assert h.fake("shop", FakeShop).reads == 1


def test_a_short_sleep_waits_in_its_attempt(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        began = time.monotonic()
        done = h.run("nap", {"seconds": 0.3})
        assert (done.status, done.attempt) == ("done", 1)
        assert time.monotonic() - began >= 0.3
        assert h.deadlines() == []


def test_a_worker_restart_leaves_a_sleeping_run_asleep(database_url: str) -> None:
    clock = ManualClock()
    app = make_app()
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        run = h.start("nap", {})
        h.wait(run.run_id, until=("sleeping",))
        h.wait_attempt_ended(run.run_id, 1)
        shop = h.fake("shop", FakeShop)
    with Harness(
        app,
        database_url=database_url,
        clock=clock,
        sweep_interval=0.02,
        implementations={"shop": shop},
    ) as h:
        time.sleep(0.2)
        still = h.runs.get(run.run_id)
        assert (still.status, still.attempt) == ("sleeping", 1)
        clock.advance(days=30)
        assert h.wait(run.run_id).status == "done"
        assert (shop.reads, shop.orders) == (1, 1)


def test_a_sleep_due_is_woken_once_by_racing_sweeps(database_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from remit.execution.timers import Waker

    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=3600) as h:
        runs = [h.start("nap", {}) for _ in range(3)]
        for run in runs:
            h.wait(run.run_id, until=("sleeping",))
        clock.advance(days=31)
        wakers = [Waker(h.worker.db, h.worker.client, clock=clock) for _ in range(4)]
        with ThreadPoolExecutor(4) as pool:
            woken = [w for found in pool.map(lambda w: w.wake_due(), wakers) for w in found]
        assert sorted(w.run_id for w in woken) == sorted(run.run_id for run in runs)
        for run in runs:
            done = h.wait(run.run_id)
            assert (done.status, done.attempt) == ("done", 2)
        assert h.fake("shop", FakeShop).orders == 3


def test_cancelling_a_sleeping_run_drops_its_deadline(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        run = h.start("nap", {})
        h.wait(run.run_id, until=("sleeping",))
        h.client.runs.cancel(run.run_id)
        assert h.deadlines() == []
        clock.advance(days=31)
        time.sleep(0.2)
        cancelled = h.runs.get(run.run_id)
        assert (cancelled.status, cancelled.attempt) == ("cancelled", 1)


def test_a_negative_sleep_fails_the_run_saying_so(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        failed = h.run("nap", {"seconds": -1})
    assert failed.status == "failed"
    assert "ctx.sleep(-1.0): give a timedelta or seconds, 0 or more" in (failed.error or "")


def test_suspend_after_is_a_setting() -> None:
    from remit.core.settings import Settings

    assert Settings.from_env(".", environ={}).suspend_after == 60.0
    assert Settings.from_env(".", environ={"REMIT_SUSPEND_AFTER": "0"}).suspend_after == 0.0
    with pytest.raises(Exception, match="REMIT_SUSPEND_AFTER='soon' must be a number"):
        Settings.from_env(".", environ={"REMIT_SUSPEND_AFTER": "soon"})

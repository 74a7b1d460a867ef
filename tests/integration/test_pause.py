"""Pausing an app on a real worker: queues stop dequeuing, running work parks `paused` at its
next step, and a resume carries every parked run on without running a finished step again.
The windows a resume can leave (it died after the flag, it raced a worker booting) are closed
by the reconciler."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from remit.core.database import Database
from remit.core.runs import RunStore
from remit.core.schema import app_state
from remit.ops.pause import AppState, paused
from remit.ops.reconciler import Reconciler
from remit.testing import Harness
from tests.support import FakeShop, make_app, send_email


def _until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {timeout}s"
        time.sleep(0.02)


def _reconciler(h: Harness) -> Reconciler:
    return Reconciler(
        h.run_store,
        h.worker.client,
        version=h.worker.runtime.version,
        live_versions=h.worker.live_versions,
        app_state=h.worker.app_state,
    )


def _queue_bounds(h: Harness) -> int | None:
    (queue,) = [q for q in h.worker.client.list_queues() if q.name == "shop:default"]
    return queue.global_concurrency


def test_pause_parks_a_running_run_after_its_step_and_resume_finishes_everything(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url, sweep_interval=0.05) as h:
        shop = h.fake("shop", FakeShop)
        shop.gate = threading.Event()
        first = h.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)  # in its third step, the order

        state = h.worker.app_state
        assert state.pause(by="user:ops") == ["shop:default"]
        assert state.paused()
        assert _queue_bounds(h) == 0
        assert state.pause(by="user:ops") == []  # idempotent: nothing left to stop
        _until("seen paused by the worker", h.worker.runtime.paused.is_set)
        shop.gate.set()

        parked = h.wait(first.run_id, until=("paused",))
        assert (parked.status, parked.attempt) == ("paused", 1)
        assert h.wait_attempt_ended(first.run_id, 1) == "SUCCESS"  # the attempt holds nothing
        # It finished the step it was in, and started none after it.
        assert [s["function_name"] for s in h.steps(first.run_id)] == [
            "shop.items.get",
            "total",
            "shop.orders.create",
        ]
        assert shop.orders == 1
        assert shop.effects_of(send_email) == []

        # A run started while paused is not dequeued; should a worker's poll take it all the
        # same (seen once, on a loaded machine), it parks before its first step: nothing of it
        # runs while the app is paused.
        second = h.start("purchase", {"sku": "sku-2"})
        time.sleep(0.5)
        waiting = h.runs.get(second.run_id)
        assert waiting.status in ("queued", "paused")
        (attempt,) = h.worker.client.list_workflows(workflow_ids=[f"{second.run_id}:1"])
        if waiting.status == "queued":
            assert attempt.status == "ENQUEUED"
        assert h.steps(second.run_id) == []
        assert shop.reads == 1

        restored, resumed = state.resume(by="user:ops")
        parked_too = [second.run_id] if waiting.status == "paused" else []
        assert (restored, sorted(resumed)) == (
            ["shop:default"],
            sorted([first.run_id, *parked_too]),
        )
        assert not state.paused()
        assert _queue_bounds(h) is None
        assert state.resume(by="user:ops") == ([], [])  # idempotent

        done_first, done_second = h.wait(first.run_id), h.wait(second.run_id)
        assert (done_first.status, done_first.attempt) == ("done", 2), done_first.error
        assert (done_second.status, done_second.attempt) == (
            "done",
            2 if parked_too else 1,
        ), done_second.error
        assert (done_first.output["order_id"], done_first.output["total"]) == ("ord_1", 1200)
        assert done_second.output["order_id"] == "ord_2"
        # Every write once, and no finished step ran again.
        assert (shop.reads, shop.orders) == (2, 2)
        assert len(shop.effects_of(send_email)) == 2
        assert sorted(e.idempotency_key for e in shop.effects) == sorted(
            {e.idempotency_key for e in shop.effects}
        )


def test_an_async_run_parks_and_resumes_too(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url, sweep_interval=0.05) as h:
        shop = h.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = h.start("purchase-mail-async", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        h.worker.app_state.pause(by="user:ops")
        _until("seen paused by the worker", h.worker.runtime.paused.is_set)
        shop.gate.set()
        assert h.wait(run.run_id, until=("paused",)).status == "paused"
        assert (shop.orders, shop.effects_of(send_email)) == (1, [])

        h.worker.app_state.resume(by="user:ops")
        done = h.wait(run.run_id)
        assert (done.status, done.attempt) == ("done", 2), done.error
        assert done.output == {"order_id": "ord_1", "message_id": "msg_1"}
        assert (shop.orders, len(shop.effects_of(send_email))) == (1, 1)


def test_a_resume_that_died_after_the_flag_is_finished_by_the_reconciler(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url, sweep_interval=0.05) as h:
        shop = h.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = h.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        h.worker.app_state.pause(by="user:ops")
        _until("seen paused by the worker", h.worker.runtime.paused.is_set)
        shop.gate.set()
        h.wait(run.run_id, until=("paused",))

        # A resume wrote the flag and died before it restored the queues or the runs.
        h.worker.db.execute_one(
            app_state.update().values(
                paused=False, changed_at=datetime.now(UTC), changed_by="user:ops"
            )
        )
        _until("seen resumed by the worker", lambda: not h.worker.runtime.paused.is_set())
        time.sleep(0.3)
        assert h.runs.get(run.run_id).status == "paused"  # nothing moves it but a pass
        assert _queue_bounds(h) == 0

        dry = _reconciler(h).run_pass(dry_run=True)
        assert [(a.kind, a.run_id) for a in dry.actions] == [
            ("queues", "-"),
            ("resume", run.run_id),
        ]
        assert h.runs.get(run.run_id).status == "paused"
        assert _queue_bounds(h) == 0

        report = _reconciler(h).run_pass()
        assert not report.errors
        assert [(a.kind, a.run_id, a.workflow_id) for a in report.actions] == [
            ("queues", "-", "-"),
            ("resume", run.run_id, f"{run.run_id}:2"),
        ]
        done = h.wait(run.run_id)
        assert (done.status, done.attempt) == ("done", 2), done.error
        assert (shop.reads, shop.orders, len(shop.effects_of(send_email))) == (1, 1, 1)
        assert _reconciler(h).run_pass().actions == []  # nothing left to heal


def test_a_resume_landing_while_a_worker_boots_is_healed_by_the_reconciler(
    database_url: str,
) -> None:
    app = make_app()
    db = Database(database_url)
    db.prepare()
    client = db.client(app.name)
    try:
        ops = AppState(db, client, app, poll_interval=0.05)
        ops.pause(by="user:ops")
        run = RunStore(db, app=app.name).start(
            client, app.workflow("purchase"), {"sku": "sku-1"}, started_by="t"
        )

        h = Harness(app, database_url=database_url, sweep_interval=3.0)
        # Passes often, so the window closes within the test; the worker's copy of the flag
        # lags three seconds behind the database (its sweep interval), longer than the first
        # reconciler pass and sweep that `start` runs take on a loaded machine.
        h.worker.settings = replace(h.worker.settings, reconcile_interval=0.2)
        # The worker has read the flag (paused) and registered its queues stopped; the resume
        # lands before it launches. Its copy of the flag is stale: the run, dequeued, parks at
        # once, after the resume has looked for parked runs.
        h.worker.start(before_launch=lambda: ops.resume(by="user:ops"))
        try:
            assert h.worker.runtime.paused.is_set()
            assert not paused(db, app.name)
            done = h.wait(run.run_id, timeout=20)
            assert done.status == "done", done.error
            assert done.attempt >= 2  # it parked, and a reconciler pass carried it on
            shop = h.fake("shop", FakeShop)
            assert (shop.reads, shop.orders, len(shop.effects_of(send_email))) == (1, 1, 1)
            assert _queue_bounds(h) is None
        finally:
            h.worker.stop(timeout=0)
    finally:
        client.destroy()
        db.dispose()


def test_a_queue_an_earlier_remit_named_bare_is_paused_and_resumed_with_the_apps_own(
    database_url: str,
) -> None:
    # An earlier remit named the app's queue `default` in DBOS, not `shop:default`; attempts
    # queued there before the upgrade are still served from it, so a pause stops it too.
    app = make_app()
    db = Database(database_url)
    db.prepare()
    client = db.client(app.name)
    try:
        client.register_queue("default", on_conflict="always_update")
        with Harness(app, database_url=database_url, sweep_interval=0.05) as h:
            state = h.worker.app_state
            assert sorted(state.pause(by="user:ops")) == ["default", "shop:default"]
            bounds = {q.name: q.global_concurrency for q in h.worker.client.list_queues()}
            assert (bounds["default"], bounds["shop:default"]) == (0, 0)
            restored, _ = state.resume(by="user:ops")
            assert sorted(restored) == ["default", "shop:default"]
            assert "default" in h.worker.idle_check().queues  # its attempts count as work
    finally:
        client.destroy()
        db.dispose()

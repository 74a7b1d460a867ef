"""Every status write is fenced on the run's current attempt; cancel stops a run."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remit.core.database import Database
from remit.core.runs import Run, RunStore
from remit.people.approvals import cancel_run
from remit.testing import Harness
from tests.support import FakeShop, create_order, make_app, send_email


@pytest.fixture
def store(database_url: str) -> Iterator[tuple[Database, RunStore]]:
    db = Database(database_url)
    db.prepare()
    yield db, RunStore(db)
    db.dispose()


def queued_run(db: Database, runs: RunStore) -> Run:
    """A run of `purchase` started with no worker to take it."""
    client = db.client("shop")
    try:
        return runs.start(client, make_app().workflow("purchase"), {"sku": "sku-1"}, started_by="t")
    finally:
        client.destroy()


def test_a_superseded_attempt_writes_nothing(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    run = queued_run(db, runs)
    with db.begin() as conn:
        assert runs.bump(conn, run.run_id) == (2, f"{run.run_id}:2")

    assert runs.claim(run.run_id, f"{run.run_id}:1", "v1") is False
    assert runs.conclude(run.run_id, f"{run.run_id}:1", "done", output={"x": 1}) is False
    assert runs.conclude(run.run_id, f"{run.run_id}:1", "failed", error="late") is False
    after = runs.get(run.run_id)
    assert (after.status, after.attempt, after.workflow_id) == ("queued", 2, f"{run.run_id}:2")
    assert (after.output, after.error, after.version) == (None, None, None)

    assert runs.claim(run.run_id, f"{run.run_id}:2", "v1") is True
    assert runs.get(run.run_id).status == "running"


def test_a_superseded_attempt_that_is_dequeued_runs_nothing(
    store: tuple[Database, RunStore], database_url: str
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    with db.begin() as conn:
        runs.bump(conn, run.run_id)

    with Harness(make_app(), database_url=database_url) as harness:
        handle = harness.worker.client.retrieve_workflow(f"{run.run_id}:1")
        assert handle.get_result() is None
        assert harness.steps(run.run_id, 1) == []
        # Attempt 2 was never enqueued: the reconciler's pass at start gives it to DBOS, and
        # it alone calls the shop.
        after = harness.wait(run.run_id)
        assert (after.status, after.attempt) == ("done", 2)
        assert {row.attempt for row in harness.ledger(run.run_id)} == {2}
        effects = harness.fake("shop", FakeShop).effects
        assert [e.op for e in effects] == ["shop.orders.create", "shop.emails.send"]


def test_an_attempt_superseded_mid_run_cannot_conclude(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = harness.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        with harness.worker.db.begin() as conn:
            harness.runs.bump(conn, run.run_id)
        shop.gate.set()
        harness.worker.client.retrieve_workflow(f"{run.run_id}:1").get_result()

        after = harness.runs.get(run.run_id)
        assert (after.status, after.attempt, after.output) == ("queued", 2, None)
        # The call in flight finished; the attempt started no write after the bump.
        assert [r.op_id for r in harness.ledger(run.run_id)][-1] == create_order.id
        assert send_email.id not in [op_id for op_id, _ in shop.calls]


def test_concurrent_bumps_give_distinct_attempts(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    run = queued_run(db, runs)
    results: list[int] = []

    def bump() -> None:
        with db.begin() as conn:
            results.append(runs.bump(conn, run.run_id)[0])

    threads = [threading.Thread(target=bump) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [2, 3, 4, 5, 6, 7]
    assert runs.get(run.run_id).attempt == 7


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["bump", "claim", "done", "failed"]), st.integers(1, 4)),
        max_size=8,
    )
)
def test_only_the_current_attempt_ever_changes_the_run(
    store: tuple[Database, RunStore], steps: list[tuple[str, int]]
) -> None:
    db, runs = store
    run = queued_run(db, runs)
    current, status = 1, "queued"
    for action, attempt in steps:
        before = runs.get(run.run_id)
        if action == "bump":
            if status in ("done", "failed"):
                continue
            with db.begin() as conn:
                runs.bump(conn, run.run_id)
            current, status = current + 1, "queued"
            continue
        wf_id = f"{run.run_id}:{attempt}"
        if action == "claim":
            wrote = runs.claim(run.run_id, wf_id, "v")
        else:
            wrote = runs.conclude(run.run_id, wf_id, action)  # type: ignore[arg-type]
        expected = attempt == current and status in ("queued", "running")
        assert wrote is expected
        after = runs.get(run.run_id)
        if wrote:
            status = "running" if action == "claim" else action
        else:
            assert (after.status, after.workflow_id, after.updated_at) == (
                before.status,
                before.workflow_id,
                before.updated_at,
            )
        assert (after.status, after.attempt) == (status, current)


def test_cancel_a_queued_run(store: tuple[Database, RunStore]) -> None:
    db, runs = store
    client = db.client("shop")
    try:
        run = runs.start(client, make_app().workflow("purchase"), {"sku": "sku-1"}, started_by="t")
        cancelled = cancel_run(runs, client, run.run_id, by="t")
        assert cancelled.status == "cancelled"
        assert cancelled.finished_at is not None
        assert client.retrieve_workflow(run.workflow_id).get_status().status == "CANCELLED"
        # Cancelling again, or a finished run, changes nothing.
        assert cancel_run(runs, client, run.run_id, by="t").updated_at == cancelled.updated_at
    finally:
        client.destroy()


def test_cancel_a_running_run_stops_it_at_its_next_step(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.gate = threading.Event()
        run = harness.start("purchase", {"sku": "sku-1"})
        assert shop.entered.wait(10)
        assert harness.client.cancel(run.run_id).status == "cancelled"
        shop.gate.set()
        status = harness.worker.client.retrieve_workflow(run.workflow_id)
        with pytest.raises(Exception, match="cancel"):
            status.get_result()

        after = harness.runs.get(run.run_id)
        assert after.status == "cancelled"
        assert after.output is None
        called = [op_id for op_id, _ in shop.calls]
        assert create_order.id in called
        assert send_email.id not in called

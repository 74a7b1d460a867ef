"""The reconciler's passes, each tested by constructing the window it closes."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
import sqlalchemy as sa

from remit.core.clock import SystemClock
from remit.core.database import Database
from remit.core.schema import approvals as approvals_table
from remit.core.schema import ledger as ledger_table
from remit.core.schema import runs as runs_table
from remit.declare.workflows import Workflow
from remit.ops.concluding import conclude_ended
from remit.ops.reconciler import Reconciler
from remit.people.tasks import TaskOpener
from remit.testing import Harness, ManualClock
from tests.support import FakeShop, create_order, make_app, send_email


def lose_conclusion(harness: Harness, run_id: str) -> None:
    """The window: the attempt ended in DBOS, and the run's status write never happened."""
    with harness.worker.db.begin() as conn:
        conn.execute(
            runs_table.update()
            .where(runs_table.c.run_id == run_id)
            .values(status="running", output=None, error=None, finished_at=None)
        )


def test_a_lost_conclusion_is_written_from_dbos(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        done = harness.run("purchase", {"sku": "sku-1"})
        failed = harness.run("purchase", {"sku": "sku-404"})
        assert (done.status, failed.status) == ("done", "failed")
        lose_conclusion(harness, done.run_id)
        lose_conclusion(harness, failed.run_id)

        actions = conclude_ended(harness.run_store, harness.worker.client)

        assert sorted((a.run_id, a.status) for a in actions) == sorted(
            [(done.run_id, "done"), (failed.run_id, "failed")]
        )
        assert harness.runs.get(done.run_id).output == done.output
        assert "no item sku-404" in (harness.runs.get(failed.run_id).error or "")
        assert harness.runs.get(failed.run_id).finished_at is not None
        # A second pass finds nothing to do.
        assert conclude_ended(harness.run_store, harness.worker.client) == []


def unserved(harness: Harness) -> Workflow:
    """`purchase` on a queue no worker serves: its attempt stays enqueued."""
    return replace(harness.app.workflow("purchase"), queue="unserved")


def test_an_attempt_cancelled_in_dbos_alone_cancels_its_run(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run_store.start(
            harness.worker.client, unserved(harness), {"sku": "sku-2"}, started_by="t"
        )
        harness.worker.client.cancel_workflow(run.workflow_id)
        assert harness.runs.get(run.run_id).status == "queued"

        actions = conclude_ended(harness.run_store, harness.worker.client)

        assert [(a.run_id, a.status) for a in actions] == [(run.run_id, "cancelled")]
        assert harness.runs.get(run.run_id).status == "cancelled"
        assert harness.fake("shop", FakeShop).calls == []


def test_runs_whose_attempt_is_still_going_are_left_alone(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run_store.start(
            harness.worker.client, unserved(harness), {"sku": "sku-1"}, started_by="t"
        )
        assert conclude_ended(harness.run_store, harness.worker.client) == []
        assert harness.runs.get(run.run_id).status == "queued"


def test_the_worker_runs_a_pass_when_it_starts(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        lose_conclusion(harness, run.run_id)
        assert harness.runs.get(run.run_id).status == "running"
    with Harness(make_app(), database_url=database_url) as harness:
        assert harness.runs.get(run.run_id).status == "done"
        assert harness.runs.get(run.run_id).output == run.output


def reconciler(harness: Harness) -> Reconciler:
    return Reconciler(
        harness.run_store,
        harness.worker.client,
        version=harness.app.version,
        live_versions=harness.worker.live_versions,
        tasks=TaskOpener(harness.worker.db, harness.app.name),
    )


def test_a_dry_run_reports_and_changes_nothing(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        lose_conclusion(harness, run.run_id)

        planned = reconciler(harness).run_pass(dry_run=True)
        assert [(a.kind, a.run_id, a.status) for a in planned.actions] == [
            ("conclude", run.run_id, "done")
        ]
        assert harness.runs.get(run.run_id).status == "running"

        done = reconciler(harness).run_pass()
        assert [(a.kind, a.run_id) for a in done.actions] == [("conclude", run.run_id)]
        assert harness.runs.get(run.run_id).status == "done"
        assert reconciler(harness).run_pass().actions == []


@pytest.mark.parametrize("idempotent", [False, True], ids=["non-idempotent", "idempotent"])
def test_a_write_cut_off_in_a_finished_run_asks_a_person_only_if_it_cannot_be_repeated(
    database_url: str, idempotent: bool
) -> None:
    """A non-idempotent write is marked uncertain with one task; an idempotent one is marked
    abandoned, for whatever reaches it again to call under its key, and asks no one."""
    op_id = create_order.id if idempotent else send_email.id
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        cut = next(row for row in harness.ledger(run.run_id) if row.op_id == op_id)
        # The window: the vendor was called, the worker died before recording the outcome,
        # and the run ended without coming back to the call.
        with harness.worker.db.begin() as conn:
            conn.execute(
                ledger_table.update()
                .where(ledger_table.c.idempotency_key == cut.idempotency_key)
                .values(status="started", finished_at=None, output=None)
            )

        report = reconciler(harness).run_pass()

        marked = harness.ledger_store.get(cut.idempotency_key)
        assert marked is not None
        if idempotent:
            assert [(a.kind, a.run_id) for a in report.actions] == [("abandoned", run.run_id)]
            assert marked.status == "abandoned"
            assert harness.tasks.list() == []
        else:
            assert [(a.kind, a.run_id) for a in report.actions] == [("uncertain", run.run_id)]
            assert marked.status == "uncertain"
            assert "was never recorded" in (marked.error or "")
            (task,) = harness.tasks.list()
            assert (task.idempotency_key, task.status) == (cut.idempotency_key, "open")
            assert task.id in report.actions[0].reason
        assert reconciler(harness).run_pass().actions == []
        assert len(harness.tasks.list()) == (0 if idempotent else 1)


def test_a_resume_lost_with_its_outbox_row_is_enqueued(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.start("refund", {"sku": "sku-1"})
        gate = harness.gate(run.run_id)
        # The window: the decision moved the run to attempt 2 and neither the fork nor its
        # outbox row survived.
        with harness.worker.db.begin() as conn:
            conn.execute(
                approvals_table.update()
                .where(approvals_table.c.id == gate.id)
                .values(status="approved", decided_by="user:test", decided_via="test")
            )
            harness.run_store.bump(conn, run.run_id)

        report = reconciler(harness).run_pass()

        assert [(a.kind, a.workflow_id) for a in report.actions] == [("enqueue", f"{run.run_id}:2")]
        done = harness.wait(run.run_id)
        assert (done.status, done.attempt) == ("done", 2)
        assert harness.fake("shop", FakeShop).reads == 1


def test_a_pass_leaves_gates_past_due_to_the_sweep(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=3600) as h:
        run = h.start("refund", {"sku": "sku-1", "expires_in": 60})
        gate = h.gate(run.run_id)
        clock.advance(minutes=2)

        # Expiry is the sweep's, in one place: a pass reports nothing for the gate past due.
        assert [a.kind for a in reconciler(h).run_pass().actions] == []
        assert h.approvals.get(gate.id).status == "pending"
        (expired,) = h.client.services.approvals.expire_due()
        assert expired.approval_id == gate.id
        assert h.wait(run.run_id).output == {"status": "expired", "by": "remit:expiry"}


def _queued_row(run_id: str, queue: str, now: datetime) -> sa.Insert:
    """A purchase's row, queued, as a start writes it before it enqueues the first attempt."""
    return runs_table.insert().values(
        run_id=run_id,
        workflow="purchase",
        queue=queue,
        input={"sku": "sku-1", "quantity": 1, "email": "a@example.com"},
        status="queued",
        attempt=1,
        workflow_id=f"{run_id}:1",
        started_by="user:test",
        created_at=now,
        updated_at=now,
    )


def test_a_first_attempt_dbos_never_received_is_enqueued(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        # The window: the run's row stands, and DBOS holds no attempt for it.
        now = harness.worker.runtime.clock.now()
        with harness.worker.db.begin() as conn:
            conn.execute(_queued_row("run_lost1", "shop:default", now))
        assert harness.attempt_status("run_lost1", 1) is None

        report = reconciler(harness).run_pass()
        again = reconciler(harness).run_pass()

        assert [(a.kind, a.workflow_id) for a in report.actions] == [("enqueue", "run_lost1:1")]
        assert report.errors == []
        assert [a.kind for a in again.actions] == []  # DBOS holds it now: nothing to do
        done = harness.wait("run_lost1")
        assert (done.status, done.attempt) == ("done", 1), done.error
        assert harness.fake("shop", FakeShop).orders == 1


def test_a_run_written_on_the_queue_of_an_older_version_is_moved_onto_the_apps_own(
    database_url: str,
) -> None:
    # Before queues were named by app, a run's row named the queue `default`; a worker of the
    # app moves it onto `shop:default` as it starts, so the reconciler's enqueue is served.
    db = Database(database_url)
    db.prepare()
    now = SystemClock().now()
    with db.begin() as conn:
        conn.execute(_queued_row("run_old1", "default", now))
    db.dispose()
    with Harness(make_app(), database_url=database_url) as harness:
        assert harness.runs.get("run_old1").queue == "shop:default"
        reconciler(harness).run_pass()  # the worker's own first pass may have been first
        assert harness.wait("run_old1").status == "done"
        attempt = harness.worker.client.retrieve_workflow("run_old1:1").get_status()
        assert attempt.queue_name == "shop:default"

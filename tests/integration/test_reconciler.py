"""The reconciler concludes runs whose attempt ended in DBOS while their row was never marked."""

from __future__ import annotations

from dataclasses import replace

from remit.reconciler import conclude_ended
from remit.store.schema import runs as runs_table
from remit.testing import Harness
from remit.workflows import Workflow
from tests.support import FakeShop, make_app


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

        actions = conclude_ended(harness.runs, harness.worker.client)

        assert sorted((a.run_id, a.status) for a in actions) == sorted(
            [(done.run_id, "done"), (failed.run_id, "failed")]
        )
        assert harness.runs.get(done.run_id).output == done.output
        assert "no item sku-404" in (harness.runs.get(failed.run_id).error or "")
        assert harness.runs.get(failed.run_id).finished_at is not None
        # A second pass finds nothing to do.
        assert conclude_ended(harness.runs, harness.worker.client) == []


def unserved(harness: Harness) -> Workflow:
    """`purchase` on a queue no worker serves: its attempt stays enqueued."""
    return replace(harness.app.workflow("purchase"), queue="unserved")


def test_an_attempt_cancelled_in_dbos_alone_cancels_its_run(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.runs.start(
            harness.worker.client, unserved(harness), {"sku": "sku-2"}, started_by="t"
        )
        harness.worker.client.cancel_workflow(run.workflow_id)
        assert harness.runs.get(run.run_id).status == "queued"

        actions = conclude_ended(harness.runs, harness.worker.client)

        assert [(a.run_id, a.status) for a in actions] == [(run.run_id, "cancelled")]
        assert harness.runs.get(run.run_id).status == "cancelled"
        assert harness.fake("shop", FakeShop).calls == []


def test_runs_whose_attempt_is_still_going_are_left_alone(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.runs.start(
            harness.worker.client, unserved(harness), {"sku": "sku-1"}, started_by="t"
        )
        assert conclude_ended(harness.runs, harness.worker.client) == []
        assert harness.runs.get(run.run_id).status == "queued"


def test_the_worker_runs_a_pass_when_it_starts(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        lose_conclusion(harness, run.run_id)
        assert harness.runs.get(run.run_id).status == "running"
    with Harness(make_app(), database_url=database_url) as harness:
        assert harness.runs.get(run.run_id).status == "done"
        assert harness.runs.get(run.run_id).output == run.output

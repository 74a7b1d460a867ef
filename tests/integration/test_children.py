"""Child runs (`ctx.start`, `ctx.wait`): a parent starts ordinary runs, waits for them holding
nothing, and carries on once the last one ends, each child started once."""

from __future__ import annotations

from remit.core.audit import audit_row
from remit.core.fence import cancel, lock
from remit.testing import Harness
from tests.waits_app import FakeShop, make_waits_app


def test_a_parent_waits_for_its_children_and_gets_their_outputs(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("credit-note", {"lines": 3})
        done = h.wait(run.run_id)
        assert done.status == "done", done.error
        assert done.output["total"] == 0 + 2 + 4
        kids = h.client.runs.children(run.run_id)
        assert [(k.key, k.workflow, k.status) for k in kids] == [
            ("line-0", "refund-line", "done"),
            ("line-1", "refund-line", "done"),
            ("line-2", "refund-line", "done"),
        ]
        assert sorted(done.output["children"]) == sorted(k.run_id for k in kids)
        listed = h.client.runs.list(parent=run.run_id)
        assert {r.run_id for r in listed} == {k.run_id for k in kids}
        assert all(r.started_by == "user:test" for r in listed)
        parent = h.client.runs.parent(kids[0].run_id)
        assert parent is not None
        assert parent.parent_run_id == run.run_id
        assert h.fake("shop", FakeShop).reads == 1
        assert h.client.state(run.run_id) == {"progress": {"started": 3, "done": 3}}


def test_a_failed_child_fails_the_wait_naming_it(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("credit-note", {"lines": 2, "fail_line": 1})
        done = h.wait(run.run_id)
        assert done.status == "failed"
        assert "ChildFailed" in (done.error or "")
        assert "line 1 cannot be refunded" in (done.error or "")


def test_cancelling_a_parent_cancels_its_running_children(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("credit-note", {"lines": 2, "hold": True})
        h.wait(run.run_id, until=("waiting",))
        kids = h.client.runs.children(run.run_id)
        for kid in kids:
            h.wait(kid.run_id, until=("waiting",))
        h.client.runs.cancel(run.run_id)
        for kid in kids:
            assert h.wait(kid.run_id).status == "cancelled"


def test_a_detached_child_outlives_its_cancelled_parent(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("credit-note", {"lines": 1, "hold": True, "detached": True})
        h.wait(run.run_id, until=("waiting",))
        (kid,) = h.client.runs.children(run.run_id)
        h.wait(kid.run_id, until=("waiting",))
        h.client.runs.cancel(run.run_id)
        assert h.run_store.get(kid.run_id).status == "waiting"
        h.client.send(kid.run_id, "go", True)
        assert h.wait(kid.run_id).status == "done"


def test_an_async_parent_starts_and_waits_the_same_way(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        done = h.run("credit-note-async", {"lines": 4})
        assert (done.status, done.output) == ("done", 0 + 2 + 4 + 6), done.error


def test_a_retried_parent_reads_its_children_again_and_starts_none_twice(
    database_url: str,
) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        run = h.start("price-note", {"skus": ["sku-1", "sku-9"]})
        failed = h.wait(run.run_id)
        assert failed.status == "failed"
        assert "ChildFailed" in (failed.error or "")
        assert "no item sku-9" in (failed.error or "")
        kids = {k.key: k for k in h.client.runs.children(run.run_id)}
        assert [k.status for k in kids.values()] == ["done", "failed"]

        # Retried before its child: it reads the children's ends again, and fails again.
        h.client.runs.retry(run.run_id)
        assert h.wait(run.run_id).status == "failed"

        h.fake("shop", FakeShop).prices["sku-9"] = 300
        h.client.runs.retry(kids["sku-9"].run_id)
        assert h.wait(kids["sku-9"].run_id).status == "done"
        h.client.runs.retry(run.run_id)
        done = h.wait(run.run_id)
        assert (done.status, done.output) == ("done", 1200 + 300), done.error
        assert len(h.client.runs.children(run.run_id)) == 2  # none started twice
        assert h.run_store.get(kids["sku-1"].run_id).attempt == 1


def test_a_sweep_cancels_the_children_a_cancel_left_running(database_url: str) -> None:
    """The process that cancelled the parent stopped before its children: a sweep finishes."""
    with Harness(make_waits_app(), database_url=database_url, sweep_interval=0.05) as h:
        run = h.start("credit-note", {"lines": 2, "hold": True})
        h.wait(run.run_id, until=("waiting",))
        kids = h.client.runs.children(run.run_id)
        for kid in kids:
            h.wait(kid.run_id, until=("waiting",))
        db = h.worker.db
        with db.begin() as conn:
            parent = lock(conn, run.run_id)
            assert parent is not None
            cancel(conn, parent, now=h.worker.runtime.clock.now())
            audit_row(
                conn,
                at=h.worker.runtime.clock.now(),
                actor="user:test",
                action="run.cancelled",
                target=run.run_id,
                meta={},
            )
        for kid in kids:
            assert h.wait(kid.run_id).status == "cancelled"


def test_a_sweep_moves_on_a_parent_whose_child_ended_behind_its_back(database_url: str) -> None:
    """A child's end written where nothing looked for its parent (the reconciler, a process
    that stopped): the worker's sweep moves the parent on."""
    with Harness(make_waits_app(), database_url=database_url, sweep_interval=0.05) as h:
        run = h.start("credit-note", {"lines": 1, "hold": True})
        h.wait(run.run_id, until=("waiting",))
        (kid,) = h.client.runs.children(run.run_id)
        h.wait(kid.run_id, until=("waiting",))
        with h.worker.db.begin() as conn:
            child = lock(conn, kid.run_id)
            assert child is not None
            cancel(conn, child, now=h.worker.runtime.clock.now())
        failed = h.wait(run.run_id)
        assert failed.status == "failed"
        assert f"child run {kid.run_id} of `refund-line` cancelled" in (failed.error or "")
        assert failed.attempt == 2

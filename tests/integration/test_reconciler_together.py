"""The reconciler's `conclude` pass writes the runs it concludes together (one fenced statement
for many, on Postgres) and what it writes is what concluding each on its own writes: the same
outcome, a run that concerns a record with its activity row, a run that moved on meanwhile left
as it is, and each run on its own again when the statement for them all fails."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from remit.core.runs import Run
from remit.core.schema import activity as activity_table
from remit.core.schema import runs as runs_table
from remit.ops import concluding as concluding_module
from remit.ops.concluding import conclude_ended
from remit.testing import Harness
from tests.support import make_app

RECORD = ("order", "o-1")


def lose_conclusion(harness: Harness, run_id: str) -> None:
    """The window: the attempt ended in DBOS, and the run's status write never happened."""
    with harness.worker.db.begin() as conn:
        conn.execute(
            runs_table.update()
            .where(runs_table.c.run_id == run_id)
            .values(status="running", output=None, error=None, finished_at=None)
        )


def _row(harness: Harness, run_id: str) -> dict[str, Any]:
    with harness.worker.db.engine.connect() as conn:
        row = conn.execute(sa.select(runs_table).where(runs_table.c.run_id == run_id)).one()
    return dict(row._mapping)


def _ended_kinds(harness: Harness) -> list[tuple[str, str | None]]:
    with harness.worker.db.engine.connect() as conn:
        return [
            (row.kind, row.run_id)
            for row in conn.execute(
                sa.select(activity_table.c.kind, activity_table.c.run_id)
                .where(activity_table.c.kind != "run.started")
                .order_by(activity_table.c.id)
            )
        ]


def _finished(harness: Harness) -> tuple[list[Run], Run, Run]:
    """Two runs done, one failed, one done that concerns a record, and one waiting at its
    gate, each with its attempt ended in DBOS; returns them all, the one with a record, and
    the waiting one."""
    done = [harness.run("purchase", {"sku": "sku-1"}) for _ in range(2)]
    failed = harness.run("purchase", {"sku": "sku-404"})
    recorded = harness.wait(harness.start("purchase", {"sku": "sku-1"}, record=RECORD).run_id)
    harness.wait_attempt_ended(recorded.run_id, recorded.attempt)
    waiting = harness.wait(harness.start("refund", {"sku": "sku-1"}).run_id, until=("waiting",))
    harness.wait_attempt_ended(waiting.run_id, waiting.attempt)
    assert _ended_kinds(harness).count(("run.done", recorded.run_id)) == 1
    assert [r.status for r in (*done, failed, recorded, waiting)] == [
        "done",
        "done",
        "failed",
        "done",
        "waiting",
    ]
    return [*done, failed, recorded, waiting], recorded, waiting


def _conclude_all(harness: Harness, finished: list[Run]) -> tuple[list[Any], dict[str, Any]]:
    """Open the window on every run of `finished` (and forget their ends' activity), conclude
    them, and return what the pass reported and wrote: its actions, each run's row and the
    activity rows of their ends."""
    for run in finished:
        lose_conclusion(harness, run.run_id)
    with harness.worker.db.begin() as conn:
        conn.execute(activity_table.delete().where(activity_table.c.kind != "run.started"))
    actions = conclude_ended(harness.run_store, harness.worker.client)
    rows = {run.run_id: _row(harness, run.run_id) for run in finished}
    return sorted((a.run_id, a.status, a.kind, a.reason) for a in actions), {
        "rows": {
            run_id: (
                {k: v for k, v in row.items() if k not in ("updated_at", "finished_at")},
                row["finished_at"] is None,
            )
            for run_id, row in rows.items()
        },
        "ended": _ended_kinds(harness),
    }


def test_runs_concluded_together_are_written_as_each_on_its_own_would_be(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        finished, recorded, waiting = _finished(harness)
        with monkeypatch.context() as each_on_its_own:
            each_on_its_own.setattr(concluding_module, "conclude_together", lambda *_: {})
            alone, wrote_alone = _conclude_all(harness, finished)
        # Two a statement: the four runs that concern no record take two.
        monkeypatch.setattr(concluding_module, "_TOGETHER", 2)

        together, wrote_together = _conclude_all(harness, finished)

        assert together == alone
        assert [(run_id, status) for run_id, status, _, _ in together] == sorted(
            (run.run_id, run.status) for run in finished
        )
        assert wrote_together == wrote_alone
        assert [wrote_together["rows"][run.run_id][1] for run in finished] == [
            run.run_id == waiting.run_id for run in finished
        ]
        # The run that concerns a record ends on it again, once; the others have no record.
        assert wrote_together["ended"] == [("run.done", recorded.run_id)]
        # Nothing left to conclude.
        assert conclude_ended(harness.run_store, harness.worker.client) == []


def test_a_run_that_moved_on_meanwhile_is_left_as_it_is(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        lost, concluded, moved = (harness.run("purchase", {"sku": "sku-1"}) for _ in range(3))
        for run in (lost, concluded, moved):
            lose_conclusion(harness, run.run_id)
        in_flight = harness.run_store.in_flight()
        assert {run_id for run_id, _ in in_flight} == {lost.run_id, concluded.run_id, moved.run_id}

        def read_then_moved_on() -> list[tuple[str, str]]:
            # Between the pass's read and its write: one run's own worker writes its end, and
            # another moves to its next attempt.
            with harness.worker.db.begin() as conn:
                conn.execute(
                    runs_table.update()
                    .where(runs_table.c.run_id == concluded.run_id)
                    .values(status="done", output={"by": "its worker"})
                )
                conn.execute(
                    runs_table.update()
                    .where(runs_table.c.run_id == moved.run_id)
                    .values(status="queued", attempt=2, workflow_id=f"{moved.run_id}:2")
                )
            return in_flight

        monkeypatch.setattr(harness.run_store, "in_flight", read_then_moved_on)

        actions = conclude_ended(harness.run_store, harness.worker.client)

        assert [(a.run_id, a.status) for a in actions] == [(lost.run_id, "done")]
        assert harness.runs.get(lost.run_id).output == lost.output
        assert harness.runs.get(concluded.run_id).output == {"by": "its worker"}
        after = harness.runs.get(moved.run_id)
        assert (after.status, after.attempt, after.output) == ("queued", 2, None)


def test_runs_are_concluded_each_on_its_own_when_the_statement_for_them_all_fails(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(*_: object) -> dict[str, bool]:
        raise RuntimeError("the statement for them all failed")

    monkeypatch.setattr(concluding_module, "_write_together", fails)
    with Harness(make_app(), database_url=database_url) as harness:
        done = harness.run("purchase", {"sku": "sku-1"})
        failed = harness.run("purchase", {"sku": "sku-404"})
        for run in (done, failed):
            lose_conclusion(harness, run.run_id)

        actions = conclude_ended(harness.run_store, harness.worker.client)

        assert sorted((a.run_id, a.status) for a in actions) == sorted(
            [(done.run_id, "done"), (failed.run_id, "failed")]
        )
        assert harness.runs.get(done.run_id).output == done.output
        assert "no item sku-404" in (harness.runs.get(failed.run_id).error or "")

"""An attempt whose worker keeps dying under it at one point is recovered `REMIT_MAX_RECOVERIES`
times, then its run fails naming the step it kept dying in; it is not recovered for ever. One
that gets further each time is recovered as often as it takes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.core.schema import recoveries
from tests.processes import Workers

pytestmark = pytest.mark.crash


@pytest.fixture
def crash(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(database_url, tmp_path, REMIT_RECONCILE_INTERVAL="1")
    yield workers
    workers.close()


def test_an_attempt_killed_six_times_fails_naming_the_step_it_died_in(crash: Workers) -> None:
    crash.hold_at("between")
    run_id = crash.remit(
        "start", "payout", "--input", '{"account": "acc-7", "amount": 900}', "--as", "user:ops"
    )
    # The first run of the attempt and five recoveries (the default REMIT_MAX_RECOVERIES) each
    # die inside the step `between`.
    for _ in range(6):
        proc = crash.start()
        crash.wait_reached("between", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        (crash.hold_dir / "reached-between").unlink()
        assert crash.runs.get(run_id).status == "running"

    last = crash.start()
    run = crash.wait_finished(run_id, timeout=60)

    assert run.status == "failed"
    assert run.error is not None
    assert (
        f"attempt {run_id}:1 was given up after its last 6 runs stopped at the same point "
        "(REMIT_MAX_RECOVERIES is 5: recoveries in a row that get no further)"
    ) in run.error
    assert "stopped before the attempt got past step 3, the one after `bank.transfers.create`" in (
        run.error
    )
    assert "Where each run of it stopped, oldest first: step 3, 3, 3, 3, 3, 3." in run.error
    # The seventh worker did not run the step again, and stays up.
    assert not (crash.hold_dir / "reached-between").exists()
    assert last.poll() is None
    # The first transfer was made once, and nothing after the step that kept dying.
    assert [e["op"] for e in crash.effects()] == ["bank.transfers.create"]


def test_an_attempt_killed_further_on_each_time_carries_on(crash: Workers) -> None:
    """Four kills at four points, with one recovery allowed that gets no further: each
    recovery got further than the run before it, so none counts against the limit."""
    run_id = crash.remit("start", "payout", "--input", '{"account": "acc-8", "amount": 900}')
    points = ["reading-balance", "bank.transfers.create", "between", "bank.transfers.create"]
    for point in points:
        crash.hold_at(point)
        proc = crash.start(REMIT_MAX_RECOVERIES="1")
        crash.kill_when_reached(proc, point)
        (crash.hold_dir / f"reached-{point}").unlink()

    crash.start(REMIT_MAX_RECOVERIES="1")
    run = crash.wait_finished(run_id, timeout=60)

    assert run.status == "done", run.error
    assert run.attempt == 1
    with crash.db.engine.connect() as conn:
        stops = conn.execute(
            sa.select(recoveries.c.stops).where(recoveries.c.workflow_id == f"{run_id}:1")
        ).scalar()
    assert stops == [1, 2, 3, 4]  # where each run of the attempt stopped
    keys = [e["idempotency_key"] for e in crash.effects()]
    assert keys == [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]  # each write once

"""An attempt whose worker keeps dying under it is recovered `REMIT_MAX_RECOVERIES` times, then
its run fails naming the step it kept dying in; it is not recovered for ever."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    assert f"attempt {run_id}:1 was recovered too many times (REMIT_MAX_RECOVERIES)" in (
        run.error or ""
    )
    assert "stopped before the attempt got past step 3, the one after `bank.transfers.create`" in (
        run.error or ""
    )
    # The seventh worker did not run the step again, and stays up.
    assert not (crash.hold_dir / "reached-between").exists()
    assert last.poll() is None
    # The first transfer was made once, and nothing after the step that kept dying.
    assert [e["op"] for e in crash.effects()] == ["bank.transfers.create"]

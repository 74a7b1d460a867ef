"""`remit show` shows a call in flight: which op, in which attempt, and for how long."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Workers


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(database_url, tmp_path)
    yield started
    started.close()


def test_remit_show_names_the_read_in_flight(workers: Workers) -> None:
    # The fake's read is held until `remit show` has looked (at most 120 s).
    (workers.hold_dir / "slow-reading-balance").write_text("120")
    run_id = workers.remit(
        "start", "payout", "--input", '{"account": "acc-7", "amount": 900}', "--as", "user:ops"
    )
    worker = workers.start()
    workers.wait_reached("reading-balance", worker)
    # A read's row shows it in flight once it has run for a second (README, "Ledger").
    workers._wait(
        lambda: [r.status for r in workers.ledger.list(run_id=run_id)] == ["started"],
        "the read's `started` row",
        worker,
    )

    shown = workers.remit("show", run_id)
    workers.release_slow("reading-balance")

    assert "in flight" in shown
    assert f"`bank.accounts.read` (attempt 1, key {run_id}:1) has been called for" in shown
    assert "no op calls" not in shown
    assert workers.wait_finished(run_id).status == "done"

"""SIGKILL a worker process between two ops and inside write ops, then restart it.

The run completes (or, for a non-idempotent write cut mid-call, fails as uncertain); each
idempotent write is applied once; the cut non-idempotent write is never repeated.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Workers

pytestmark = pytest.mark.crash


@pytest.fixture
def crash(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(database_url, tmp_path)
    yield workers
    workers.close()


def _start(crash: Workers) -> str:
    run_id = crash.remit(
        "start", "payout", "--input", '{"account": "acc-7", "amount": 900}', "--as", "user:ops"
    )
    assert run_id.startswith("run_")
    return run_id


def test_killed_between_two_ops_the_run_completes_with_each_write_once(crash: Workers) -> None:
    crash.hold_at("between")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start(), "between")
    assert crash.runs.get(run_id).status == "running"

    crash.start()
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    transfers = [e for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert sorted(e["idempotency_key"] for e in transfers) == [f"{run_id}:2", f"{run_id}:4"]
    assert [e["op"] for e in crash.effects()].count("bank.letters.post") == 1
    assert [r.status for r in crash.ledger.list(run_id=run_id)] == ["ok"] * 4


def test_killed_inside_an_idempotent_write_it_is_called_again_with_the_same_key(
    crash: Workers,
) -> None:
    crash.hold_at("bank.transfers.create")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start(), "bank.transfers.create")
    cut = [r for r in crash.ledger.list(run_id=run_id) if r.op_id == "bank.transfers.create"]
    assert [(r.status, r.idempotency_key) for r in cut] == [("started", f"{run_id}:2")]

    crash.start()
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    assert run.output is not None
    assert run.output["transfers"] == [f"tr_{run_id}:2", f"tr_{run_id}:4"]
    keys = [e["idempotency_key"] for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert sorted(keys) == [f"{run_id}:2", f"{run_id}:4"]
    assert [r.status for r in crash.ledger.list(run_id=run_id)] == ["ok"] * 4


def test_killed_inside_a_non_idempotent_write_it_becomes_uncertain_and_is_not_repeated(
    crash: Workers,
) -> None:
    crash.hold_at("bank.letters.post")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start(), "bank.letters.post")

    crash.start()
    run = crash.wait_finished(run_id)

    assert run.status == "failed"
    assert "OpUncertain" in (run.error or "")
    assert "outcome is unknown" in (run.error or "")
    letters = [e for e in crash.effects() if e["op"] == "bank.letters.post"]
    assert [e["idempotency_key"] for e in letters] == [f"{run_id}:5"]
    rows = crash.ledger.list(run_id=run_id)
    assert [(r.op_id, r.status) for r in rows] == [
        ("bank.accounts.read", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.letters.post", "uncertain"),
    ]
    transfers = [e for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert len(transfers) == 2

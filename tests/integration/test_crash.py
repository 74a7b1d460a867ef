"""SIGKILL a worker process between two ops and inside write ops, then restart it.

The run completes (or, for a non-idempotent write cut mid-call, waits at one task until a
person says whether it happened); each idempotent write is applied once; the cut non-idempotent
write is never repeated by remit on its own.
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


def test_killed_inside_a_non_idempotent_write_it_waits_at_one_task_and_is_not_repeated(
    crash: Workers,
) -> None:
    crash.hold_at("bank.letters.post")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start(), "bank.letters.post")

    restarted = crash.start()
    tasks = crash.tasks()
    crash.wait_waiting(run_id)

    (task,) = tasks.list(run_id=run_id)
    assert (task.op_id, task.idempotency_key, task.status) == (
        "bank.letters.post",
        f"{run_id}:5",
        "open",
    )
    rows = crash.ledger.list(run_id=run_id)
    assert [(r.op_id, r.status) for r in rows] == [
        ("bank.accounts.read", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.letters.post", "uncertain"),
    ]
    assert "outcome is unknown" in (rows[-1].error or "")
    # Another worker starting (its reconciler pass, its recovery) opens no second task.
    restarted.kill()
    restarted.wait(10)
    crash.wait_serving(crash.start())
    assert [t.id for t in tasks.list(run_id=run_id)] == [task.id]

    # The vendor's record says the letter went out: a person answers so, with its output.
    letters = [e for e in crash.effects() if e["op"] == "bank.letters.post"]
    assert [e["idempotency_key"] for e in letters] == [f"{run_id}:5"]
    tasks.resolve(task.id, done=True, output=letters[0]["output"], by="user:ops")
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    assert run.output is not None
    assert run.output["letter"] == letters[0]["output"]["letter_id"]
    assert [e for e in crash.effects() if e["op"] == "bank.letters.post"] == letters
    assert [r.status for r in crash.ledger.list(run_id=run_id)] == ["ok"] * 4
    transfers = [e for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert len(transfers) == 2

"""The outbox of resumes: a decider that dies between its commit and the fork leaves the run's
next attempt in `remit_resumes`, and a worker forks it, at start-up or on its periodic sweep.
A decision needs no worker, and a worker restart replays no waiting run.

The decider that dies is this module run as a script (`python -m`), so that it is a process of
its own that can end with `os._exit` in the window.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit.core.database import Database
from remit.core.ledger import LedgerStore
from remit.core.outbox import Resume, Resumer
from remit.core.runs import RunStore
from remit.core.schema import audit, decisions, resumes
from remit.people.approvals import Approval, Approvals
from remit.testing import Harness
from tests.support import FakeShop, create_order, get_item, make_app

ROOT = Path(__file__).resolve().parents[2]
DECIDER = "tests.integration.test_approval_outbox"  # this module, run as the decider
# The decider's exit status when it ended in the window, after the commit and before the fork.
DIED_BEFORE_FORK = 17


class DiesBeforeFork(Resumer):
    """A resumer in a process that ends after the decision committed, before the fork."""

    def fork(self, resume: Resume) -> bool:
        os._exit(DIED_BEFORE_FORK)


def _decide_then_die(url: str, approval_id: str, decision_key: str) -> None:
    app = make_app()
    db = Database(url, pool_size=2)
    client = db.client(app.name)
    approvals = Approvals(db, client, app.approval_types)
    approvals.resumer = DiesBeforeFork(db, client)
    approvals.decide(
        [approval_id],
        "approved",
        by="user:ops",
        via="cli",
        decision_key=decision_key,
        edits={approval_id: {"quantity": 3}},
    )
    sys.exit("decide() returned without forking: the decider was meant to die in the window")


def decide_in_a_process_that_dies(url: str, approval_id: str, decision_key: str) -> None:
    """Decide `approval_id` (approved, quantity edited to 3) in a subprocess killed in the window."""
    done = subprocess.run(
        [sys.executable, "-m", DECIDER, url, approval_id, decision_key],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == DIED_BEFORE_FORK, done.stderr.decode()


class Outside:
    """The database as a process without a worker sees it: a DBOS client and remit's stores."""

    def __init__(self, url: str) -> None:
        self.app = make_app()
        self.db = Database(url, pool_size=2)
        self.db.prepare()
        self.client = self.db.client(self.app.name)
        self.approvals = Approvals(self.db, self.client, self.app.approval_types)
        self.runs = RunStore(self.db)
        self.ledger = LedgerStore(self.db)

    def outbox(self) -> list[tuple[str, str]]:
        """(workflow id, run id) of every resume in the outbox."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(sa.select(resumes.c.workflow_id, resumes.c.run_id))
            return sorted((row.workflow_id, row.run_id) for row in rows)

    def attempts(self, run_id: str) -> dict[str, str]:
        """The DBOS workflows of a run's attempts, by id, with their status."""
        found = self.client.list_workflows(
            workflow_id_prefix=f"{run_id}:", load_input=False, load_output=False
        )
        return {status.workflow_id: status.status for status in found}

    def decision_keys(self) -> list[str]:
        with self.db.engine.connect() as conn:
            return sorted(conn.execute(sa.select(decisions.c.decision_key)).scalars())

    def audit_count(self) -> int:
        with self.db.engine.connect() as conn:
            decisions = sa.select(sa.func.count()).where(audit.c.action.like("approval.%"))
            return int(conn.execute(decisions).scalar_one())

    def close(self) -> None:
        self.client.destroy()
        self.db.dispose()


@pytest.fixture
def outside(database_url: str) -> Iterator[Outside]:
    seen = Outside(database_url)
    yield seen
    seen.close()


def waiting_run(url: str, shop: FakeShop) -> tuple[str, Approval]:
    """A refund run that waits at its gate; the worker that ran it has stopped."""
    with Harness(make_app(), database_url=url, implementations={"shop": shop}) as h:
        run_id = h.start("refund", {"sku": "sku-1", "quantity": 2}).run_id
        gate = h.gate(run_id)
        # The run says `waiting` just before DBOS records the attempt's end: let it, so the
        # stopping worker leaves nothing for recovery.
        h.wait_attempt_ended(run_id, 1)
    return run_id, gate


def assert_left_in_the_outbox(outside: Outside, run_id: str, gate: Approval, key: str) -> None:
    """The decision committed and the process died before the fork."""
    decided = outside.approvals.get(gate.id)
    assert (decided.status, decided.decided_by, decided.decision_key) == (
        "approved",
        "user:ops",
        key,
    )
    assert decided.edited_draft_json == {"sku": "sku-1", "quantity": 3, "note": ""}
    assert decided.resumed_workflow_id == f"{run_id}:2"
    assert [(row["action"], row["actor"]) for row in outside.approvals.audit(gate.id)] == [
        ("approval.approved", "user:ops")
    ]
    assert outside.decision_keys() == [key]
    run = outside.runs.get(run_id)
    assert (run.attempt, run.workflow_id, run.status) == (2, f"{run_id}:2", "queued")
    assert outside.attempts(run_id) == {f"{run_id}:1": "SUCCESS"}
    assert outside.outbox() == [(f"{run_id}:2", run_id)]


def assert_resumed_once(outside: Outside, shop: FakeShop, run_id: str) -> None:
    """The run finished on attempt 2, forked past the gate: nothing before it ran again."""
    run = outside.runs.get(run_id)
    assert run.status == "done", run.error
    assert run.output == {"status": "approved", "order_id": "ord_1", "quantity": 3}
    assert (run.attempt, run.workflow_id) == (2, f"{run_id}:2")
    assert outside.attempts(run_id) == {f"{run_id}:1": "SUCCESS", f"{run_id}:2": "SUCCESS"}
    assert outside.outbox() == []
    first = outside.client.list_workflow_steps(f"{run_id}:1")
    second = outside.client.list_workflow_steps(f"{run_id}:2")
    assert [s["function_name"] for s in first] == ["shop.items.get", "approval:refund"]
    assert [s["function_name"] for s in second] == [
        "shop.items.get",
        "approval:refund",
        "shop.orders.create",
    ]
    # The read is attempt 1's step, copied by the fork: the fake saw it once.
    assert second[0]["output"] == first[0]["output"]
    assert [op for op, _ in shop.calls] == [get_item.id, create_order.id]
    assert [e.input for e in shop.effects_of(create_order)] == [{"sku": "sku-1", "quantity": 3}]
    rows = outside.ledger.list(run_id=run_id)
    assert [(r.op_id, r.attempt, r.status) for r in rows] == [
        (get_item.id, 1, "ok"),
        (create_order.id, 2, "ok"),
    ]


def test_a_decider_killed_before_the_fork_is_completed_by_a_worker_at_start(
    database_url: str, outside: Outside, caplog: pytest.LogCaptureFixture
) -> None:
    shop = FakeShop()
    run_id, gate = waiting_run(database_url, shop)

    decide_in_a_process_that_dies(database_url, gate.id, "outbox-start")

    assert_left_in_the_outbox(outside, run_id, gate, "outbox-start")
    harness = Harness(
        make_app(),
        database_url=database_url,
        implementations={"shop": shop},
        sweep_interval=3600,
    )
    with caplog.at_level(logging.WARNING, logger="remit.approvals"), harness as h:
        # The sweep at start-up ran before the worker took work, and no periodic one since.
        assert outside.outbox() == []
        assert f"{run_id}:2" in outside.attempts(run_id)
        h.wait(run_id)
    assert_resumed_once(outside, shop, run_id)
    assert f"outbox: run {run_id} resumed on {run_id}:2" in caplog.text


def test_a_decider_killed_before_the_fork_is_completed_by_a_running_workers_sweep(
    database_url: str, outside: Outside, caplog: pytest.LogCaptureFixture
) -> None:
    shop = FakeShop()
    harness = Harness(
        make_app(), database_url=database_url, implementations={"shop": shop}, sweep_interval=0.5
    )
    with caplog.at_level(logging.WARNING, logger="remit.approvals"), harness as h:
        run_id = h.start("refund", {"sku": "sku-1", "quantity": 2}).run_id
        gate = h.gate(run_id)
        h.wait_attempt_ended(run_id, 1)

        decide_in_a_process_that_dies(database_url, gate.id, "outbox-sweep")

        # The sweep leaves a resume this young to its decider (`Sweeper.OUTBOX_GRACE`, 2 s),
        # then completes it at its next pass (every 0.5 s here). The log line below says it was
        # the sweep that did; the wait's bound leaves room for a loaded machine.
        assert_left_in_the_outbox(outside, run_id, gate, "outbox-sweep")
        h.wait(run_id, timeout=30)
    assert_resumed_once(outside, shop, run_id)
    assert f"outbox: run {run_id} resumed on {run_id}:2" in caplog.text


def test_the_decider_repeating_its_key_after_dying_completes_the_fork_itself(
    database_url: str, outside: Outside
) -> None:
    shop = FakeShop()
    run_id, gate = waiting_run(database_url, shop)
    decide_in_a_process_that_dies(database_url, gate.id, "outbox-retry")

    # The same request again (a key names one request: the edits are part of it).
    again = outside.approvals.decide(
        [gate.id],
        "approved",
        by="user:ops",
        via="cli",
        decision_key="outbox-retry",
        edits={gate.id: {"quantity": 3}},
    )

    assert again.replayed
    assert [(d.approval_id, d.status, d.resumed_workflow_id) for d in again.decided] == [
        (gate.id, "approved", f"{run_id}:2")
    ]
    assert outside.outbox() == []
    assert outside.attempts(run_id) == {f"{run_id}:1": "SUCCESS", f"{run_id}:2": "ENQUEUED"}
    assert outside.audit_count() == 1
    with Harness(make_app(), database_url=database_url, implementations={"shop": shop}) as h:
        h.wait(run_id)
    assert_resumed_once(outside, shop, run_id)


def test_a_decision_made_while_no_worker_runs_is_consumed_once_a_worker_starts(
    database_url: str, outside: Outside
) -> None:
    shop = FakeShop()
    run_id, gate = waiting_run(database_url, shop)

    result = outside.approvals.decide(
        [gate.id],
        "approved",
        by="user:ops",
        via="cli",
        decision_key="no-worker",
        edits={gate.id: {"quantity": 3}},
    )

    assert not result.replayed
    assert [(d.approval_id, d.status, d.resumed_workflow_id) for d in result.decided] == [
        (gate.id, "approved", f"{run_id}:2")
    ]
    # The next attempt is in DBOS, on the run's queue, with no worker to take it yet.
    assert outside.attempts(run_id) == {f"{run_id}:1": "SUCCESS", f"{run_id}:2": "ENQUEUED"}
    assert outside.outbox() == []
    run = outside.runs.get(run_id)
    assert (run.status, run.attempt) == ("queued", 2)

    with Harness(make_app(), database_url=database_url, implementations={"shop": shop}) as h:
        h.wait(run_id)
    assert_resumed_once(outside, shop, run_id)


def test_a_worker_restart_replays_no_waiting_run(database_url: str, outside: Outside) -> None:
    shop = FakeShop()
    run_id, gate = waiting_run(database_url, shop)
    before: dict[str, Any] = {
        "attempts": outside.attempts(run_id),
        "steps": outside.client.list_workflow_steps(f"{run_id}:1"),
        "ledger": outside.ledger.list(run_id=run_id),
        "approval": outside.approvals.get(gate.id),
    }
    assert before["attempts"] == {f"{run_id}:1": "SUCCESS"}

    with Harness(
        make_app(), database_url=database_url, implementations={"shop": shop}, sweep_interval=0.2
    ) as h:
        # Start-up (recovery, the reconciler's pass, the sweep) and a few sweeps and polls.
        time.sleep(1.5)
        run = h.runs.get(run_id)

    assert (run.status, run.attempt, run.workflow_id) == ("waiting", 1, f"{run_id}:1")
    assert outside.attempts(run_id) == before["attempts"]
    assert outside.client.list_workflow_steps(f"{run_id}:1") == before["steps"]
    assert outside.ledger.list(run_id=run_id) == before["ledger"]
    assert outside.approvals.get(gate.id) == before["approval"]
    assert [op for op, _ in shop.calls] == [get_item.id]
    assert shop.effects == []
    assert outside.outbox() == []


if __name__ == "__main__":
    _decide_then_die(*sys.argv[1:])

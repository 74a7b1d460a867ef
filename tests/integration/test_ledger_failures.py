"""The database failing around an op call: the call is neither lost nor made twice."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.ledger import CallRecord, LedgerStore
from remit.core.schema import ledger
from remit.testing import Harness
from tests.support import FakeShop, make_app, send_email


def lost(what: str) -> sa.exc.OperationalError:
    """The error a transaction whose connection was lost raises, as DBOS retries it."""
    return sa.exc.OperationalError(
        what, {}, Exception("database is locked (simulated)"), connection_invalidated=True
    )


class LostCommitAnswer(LedgerStore):
    """A ledger whose first `started` row of `shop.emails.send`, written in its step's check
    transaction, commits and then loses the answer. Here the check's transaction fails as a
    lost connection does (DBOS tries it again), and the row that commit wrote is in place, as
    of the same moment, when the transaction runs again."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.lost: list[str] = []

    def begin_in(self, conn: sa.Connection, record: CallRecord, *args: Any, **kw: Any) -> Any:
        if record.op_id != send_email.id:
            return super().begin_in(conn, record, *args, **kw)
        if not self.lost:
            self.lost.append(record.idempotency_key)
            raise lost("COMMIT")
        committed = {**record.__dict__, "status": "started", "tries": 0}
        conn.execute(ledger.insert().values(**committed, started_at=kw["started_at"]))
        return super().begin_in(conn, record, *args, **kw)


def test_a_started_row_whose_commit_answer_was_lost_is_not_uncertain(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        runtime = harness.worker.runtime
        ledger = runtime.caller.ledger = LostCommitAnswer(runtime.caller.ledger.db)
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "done", run.error
        # `shop.emails.send` (not idempotent) is the run's 4th step: its key ends in `:4`. Its
        # check ran again, found the row it had written, and the email went once.
        assert ledger.lost == [f"{run.run_id}:4"]
        email = harness.ledger(run.run_id)[-1]
        assert (email.op_id, email.status, email.tries) == (send_email.id, "ok", 1)
        assert len(harness.fake("shop", FakeShop).effects_of(send_email)) == 1


class FlakyCheckpoint(LedgerStore):
    """A ledger whose first write of a read's whole row, in its step's checkpoint transaction,
    fails as a lost connection does: the transaction rolls back, DBOS's checkpoint with it."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.failed: list[str] = []

    def settle_read_in(self, conn: sa.Connection, record: CallRecord, *args: Any, **kw: Any) -> Any:
        if not self.failed:
            self.failed.append(record.idempotency_key)
            raise sa.exc.OperationalError(
                "COMMIT",
                {},
                Exception("database is locked (simulated)"),
                connection_invalidated=True,
            )
        return super().settle_read_in(conn, record, *args, **kw)


def test_an_outcome_the_ledger_failed_to_record_is_recorded_without_calling_again(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        runtime = harness.worker.runtime
        ledger = runtime.caller.ledger = FlakyCheckpoint(runtime.caller.ledger.db)
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "done", run.error
        # The first outcome's transaction failed; DBOS wrote the step's checkpoint again, and
        # the outcome with it.
        assert ledger.failed == [f"{run.run_id}:1"]
        shop = harness.fake("shop", FakeShop)
        calls = [op_id for op_id, _ in shop.calls]
        assert calls.count("shop.items.get") == 1
        assert len(shop.effects_of(send_email)) == 1
        assert [r.status for r in harness.ledger(run.run_id)] == ["ok", "ok", "ok"]


def test_an_op_calls_ledger_rows_are_written_in_dbos_step_transactions(database_url: str) -> None:
    # The ledger's writes ride the transactions DBOS checks and records each step in, on DBOS's
    # own connections: none is sent on remit's, and each row agrees with its step.
    with Harness(make_app(), database_url=database_url) as harness:
        own: list[str] = []

        def sent(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            if "remit_ledger" in statement:
                own.append(statement.split()[0])

        engine = harness.worker.db.engine
        sa.event.listen(engine, "before_cursor_execute", sent)
        try:
            run = harness.run("purchase", {"sku": "sku-1"})
        finally:
            sa.event.remove(engine, "before_cursor_execute", sent)
        assert run.status == "done", run.error
        assert own == []
        rows = harness.ledger(run.run_id)
        steps = {s["function_id"]: s["function_name"] for s in harness.steps(run.run_id)}
        assert [(r.step_id, r.op_id, r.status) for r in rows] == [
            (step, steps[step], "ok") for step in (1, 3, 4)
        ]

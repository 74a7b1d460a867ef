"""The database failing around an op call: the call is neither lost nor made twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.ledger import LedgerStore
from remit.testing import Harness
from tests.support import FakeShop, make_app, send_email

T = TypeVar("T")


class FlakyDatabase(Database):
    """A database whose ledger writes fail as planned: `after_commit` writes commit and then
    report a lost connection (the answer never arrives); `before_commit` writes fail outright,
    once each."""

    def __init__(self, url: str, *, after_commit: str = "", before_commit: str = "") -> None:
        super().__init__(url)
        self.after_commit = after_commit
        self.before_commit = before_commit
        self.failed: list[str] = []

    def retrying(self, what: str, fn: Callable[[], T]) -> T:
        lost = sa.exc.OperationalError("COMMIT", {}, Exception("database is locked (simulated)"))
        if self.after_commit and self.after_commit in what and not self.failed:
            self.failed.append(what)
            answered = []

            def commit_then_lose() -> T:
                result = fn()
                if not answered:
                    answered.append(True)
                    raise lost
                return result

            return super().retrying(what, commit_then_lose)
        if self.before_commit and self.before_commit in what and not self.failed:
            self.failed.append(what)
            raise lost
        return super().retrying(what, fn)


def flaky_ledger(harness: Harness, url: str, **plan: str) -> FlakyDatabase:
    db = FlakyDatabase(url, **plan)
    harness.worker.runtime.caller.ledger = LedgerStore(db)
    return db


def test_a_started_row_whose_commit_answer_was_lost_is_not_uncertain(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        # `shop.emails.send` is the run's 4th step: its key ends in `:4`.
        db = flaky_ledger(harness, database_url, after_commit=":4: started")
        try:
            run = harness.run("purchase", {"sku": "sku-1"})
        finally:
            db.dispose()
        assert run.status == "done", run.error
        assert db.failed == [f"ledger {run.run_id}:4: started"]
        email = harness.ledger(run.run_id)[-1]
        assert (email.op_id, email.status, email.tries) == (send_email.id, "ok", 1)
        assert len(harness.fake("shop", FakeShop).effects_of(send_email)) == 1


def test_an_outcome_the_ledger_failed_to_record_is_recorded_without_calling_again(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        db = flaky_ledger(harness, database_url, before_commit=": ok")
        try:
            run = harness.run("purchase", {"sku": "sku-1"})
        finally:
            db.dispose()
        assert run.status == "done", run.error
        # The first outcome write failed; DBOS retried the step, which recorded it.
        assert db.failed == [f"ledger {run.run_id}:1: ok"]
        shop = harness.fake("shop", FakeShop)
        calls = [op_id for op_id, _ in shop.calls]
        assert calls.count("shop.items.get") == 1
        assert len(shop.effects_of(send_email)) == 1
        assert [r.status for r in harness.ledger(run.run_id)] == ["ok", "ok", "ok"]

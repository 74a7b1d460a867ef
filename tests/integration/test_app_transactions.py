"""`ctx.transaction`: a step's writes to the app's own tables, once.

The writes and the step's record commit together; a step that runs again (a retry from
before it, a worker that died before DBOS recorded it) answers from the record without
running the function again; a function that raises rolls back; statements on remit's or
DBOS's tables are refused. The SIGKILL half is `test_app_transactions_crash.py`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import App, AsyncContext, Context, workflow
from remit.core.database import Database
from remit.testing import Harness

calls: list[str] = []
# Runs whose `after` step fails once (a later step that breaks, to be retried).
FAIL_ONCE: set[str] = set()


class Booking(BaseModel):
    invoice: str
    amount: int
    fail_after: bool = False
    statement: str = ""
    commit_inside: bool = False


def _book(ctx: Context | AsyncContext, input: Booking) -> Any:
    def insert(conn: sa.Connection) -> dict[str, Any]:
        calls.append(ctx.run_id)
        conn.execute(
            sa.text("INSERT INTO bookings (run_id, invoice, amount) VALUES (:r, :i, :a)"),
            {"r": ctx.run_id, "i": input.invoice, "a": input.amount},
        )
        if input.statement:
            conn.execute(sa.text(input.statement))
        if input.commit_inside:
            conn.commit()
        if input.amount < 0:
            raise ValueError(f"a booking of {input.amount} is refused")
        total = conn.execute(sa.text("SELECT sum(amount) FROM bookings")).scalar_one()
        return {"invoice": input.invoice, "total": int(total)}

    return insert


def _after(ctx: Context | AsyncContext, input: Booking) -> Any:
    def after() -> str:
        if input.fail_after and ctx.run_id not in FAIL_ONCE:
            FAIL_ONCE.add(ctx.run_id)
            raise RuntimeError("the ledger export is down")
        return "exported"

    return after


@workflow(name="book", input=Booking)
def book(ctx: Context, input: Booking) -> dict[str, Any]:
    booked: dict[str, Any] = ctx.transaction("book", _book(ctx, input))
    ctx.step("export", _after(ctx, input))
    return booked


# Set by a test: the code deployed now has a step before the transaction it did not have.
CHANGED: set[str] = set()


@workflow(name="book-changing", input=Booking)
def book_changing(ctx: Context, input: Booking) -> dict[str, Any]:
    if "step-before" in CHANGED:
        ctx.step("new-step", lambda: "added by a deploy")
    booked: dict[str, Any] = ctx.transaction("book", _book(ctx, input))
    ctx.step("export", _after(ctx, input))
    return booked


@workflow(name="book-async", input=Booking)
async def book_async(ctx: AsyncContext, input: Booking) -> dict[str, Any]:
    booked: dict[str, Any] = await ctx.transaction("book", _book(ctx, input))
    await ctx.step("export", _after(ctx, input))
    return booked


class Total(BaseModel):
    invoice: str
    total: int


@workflow(name="book-typed", input=Booking)
def book_typed(ctx: Context, input: Booking) -> dict[str, Any]:
    booked = ctx.transaction("book", _book(ctx, input), output=Total)
    assert isinstance(booked, Total)
    return {"typed": booked.total}


def books_app() -> App:
    return App(name="books", workflows=[book, book_async, book_typed, book_changing])


@pytest.fixture
def h(database_url: str) -> Iterator[Harness]:
    calls.clear()
    CHANGED.clear()
    db = Database(database_url)
    with db.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE bookings (run_id VARCHAR(100), invoice VARCHAR(50), amount INT)")
        )
    db.dispose()
    with Harness(books_app(), database_url=database_url) as harness:
        yield harness


def rows(h: Harness) -> list[tuple[str, str, int]]:
    with h.client.db.engine.connect() as conn:
        found = conn.execute(sa.text("SELECT run_id, invoice, amount FROM bookings")).all()
    return sorted((r.run_id, r.invoice, r.amount) for r in found)


@pytest.mark.parametrize("workflow_name", ["book", "book-async"])
def test_the_writes_commit_once_with_the_step_and_its_value_comes_back(
    h: Harness, workflow_name: str
) -> None:
    run = h.start(workflow_name, {"invoice": "INV-1", "amount": 40})
    done = h.wait(run.run_id)
    assert done.status == "done", done.error
    assert done.output == {"invoice": "INV-1", "total": 40}
    assert rows(h) == [(run.run_id, "INV-1", 40)]
    assert calls == [run.run_id]
    with h.client.db.engine.connect() as conn:
        recorded = conn.execute(sa.text("SELECT position, name FROM remit_app_writes")).all()
    assert [(r.position, r.name) for r in recorded] == [(1, "book")]


def test_output_parses_the_value_back_into_its_type(h: Harness) -> None:
    run = h.start("book-typed", {"invoice": "INV-2", "amount": 7})
    assert h.wait(run.run_id).output == {"typed": 7}


@pytest.mark.parametrize("workflow_name", ["book", "book-async"])
def test_a_retry_from_before_the_transaction_answers_from_its_record_writing_nothing_again(
    h: Harness, workflow_name: str
) -> None:
    run = h.start(workflow_name, {"invoice": "INV-3", "amount": 25, "fail_after": True})
    failed = h.wait(run.run_id)
    assert failed.status == "failed"
    assert "the ledger export is down" in (failed.error or "")
    steps = h.client.runs.steps(run.run_id)
    position = next(s.function_id for s in steps if s.name.endswith("book"))

    # The retry runs the transaction's step again (not copied): the record answers it.
    h.client.runs.retry(run.run_id, from_step=position, by="user:test")
    done = h.wait(run.run_id)

    assert done.status == "done", done.error
    assert done.output == {"invoice": "INV-3", "total": 25}
    assert rows(h) == [(run.run_id, "INV-3", 25)]
    assert calls == [run.run_id]
    again = [s for s in h.client.runs.steps(run.run_id) if s.attempt == 2]
    assert any(s.name.endswith("book") and not s.copied for s in again)


def test_new_code_that_moves_a_transaction_whose_step_was_not_recorded_is_refused(
    h: Harness,
) -> None:
    """Killed between the transaction's commit and DBOS's record of its step, a run carried on
    by code with a step inserted before it would run the transaction at a new position: its
    record, at the old one, stops the run as a changed op call's ledger row does."""
    run = h.start("book-changing", {"invoice": "INV-7", "amount": 3, "fail_after": True})
    assert h.wait(run.run_id).status == "failed"
    workflow_id = h.runs.get(run.run_id).workflow_id
    outputs = "operation_outputs" if h.client.db.is_sqlite else "dbos.operation_outputs"
    with h.client.db.begin() as conn:
        position = conn.execute(
            sa.text("SELECT position FROM remit_app_writes WHERE run_id = :r"), {"r": run.run_id}
        ).scalar_one()
        # What a kill in that window leaves: the writes and their record, no DBOS step.
        conn.execute(
            sa.text(f"DELETE FROM {outputs} WHERE workflow_uuid = :w AND function_id >= :p"),
            {"w": workflow_id, "p": position},
        )
    CHANGED.add("step-before")

    h.client.runs.retry(run.run_id, by="user:test")
    stopped = h.wait(run.run_id)

    assert stopped.status == "failed"
    assert "ran `book` (a step), and the code now runs `new-step`" in (stopped.error or "")
    assert rows(h) == [(run.run_id, "INV-7", 3)]
    assert calls == [run.run_id]


def test_a_function_that_raises_rolls_back_and_a_retry_writes_once(h: Harness) -> None:
    run = h.start("book", {"invoice": "INV-4", "amount": -5})
    failed = h.wait(run.run_id)
    assert failed.status == "failed"
    assert "step `book` failed: ValueError: a booking of -5 is refused" in (failed.error or "")
    assert rows(h) == []  # the insert before the raise rolled back
    with h.client.db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM remit_app_writes")).scalar() == 0
    assert calls == [run.run_id]


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("UPDATE remit_runs SET status = 'done'", "remit_runs"),
        ('DELETE FROM "remit_ledger"', "remit_ledger"),
        ("UPDATE dbos.workflow_status SET status = 'SUCCESS'", "dbos"),
    ],
)
def test_statements_on_remits_or_dboss_tables_are_refused_and_nothing_commits(
    h: Harness, statement: str, named: str
) -> None:
    run = h.start("book", {"invoice": "INV-5", "amount": 5, "statement": statement})
    failed = h.wait(run.run_id)
    assert failed.status == "failed"
    said = failed.error or ""
    assert f"step `book` failed: TransactionRefused: ctx.transaction `book` names `{named}`" in (
        said
    ), said
    assert "remit's or DBOS's own tables" in said
    assert rows(h) == []


@pytest.mark.parametrize("how", ["commit_inside", "statement"])
def test_a_function_that_would_commit_itself_is_stopped_before_it_does(
    h: Harness, how: str
) -> None:
    given: dict[str, Any] = {"invoice": "INV-8", "amount": 8}
    given.update({"commit_inside": True} if how == "commit_inside" else {"statement": "COMMIT"})
    run = h.start("book", given)
    failed = h.wait(run.run_id)
    assert failed.status == "failed"
    assert "would end its transaction itself" in (failed.error or ""), failed.error
    assert rows(h) == []  # the insert before it never committed


def test_a_name_that_is_no_key_is_refused_before_any_step(database_url: str) -> None:
    @workflow(name="badly-named", input=Booking)
    def badly_named(ctx: Context, input: Booking) -> None:
        ctx.transaction("two words", lambda conn: None)

    with Harness(App(name="named", workflows=[badly_named]), database_url=database_url) as h:
        run = h.start("badly-named", {"invoice": "INV-6", "amount": 1})
        failed = h.wait(run.run_id)
        assert failed.status == "failed"
        assert "transaction name" in (failed.error or "")
        assert h.client.runs.steps(run.run_id) == []

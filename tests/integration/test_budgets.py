"""Budgets on a real database: reserve, settle and release; LLM calls in runs billed to them; a
run that waits for more budget; the reconciler's releases and drift."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import (
    App,
    ApprovalType,
    AsyncContext,
    Budget,
    BudgetExceeded,
    Context,
    FakeLLM,
    FakeReply,
    Price,
    chat_complete,
    implements,
    llm,
    workflow,
)
from remit.budgets.model import Reservation, period_key
from remit.budgets.store import Budgets
from remit.connectors.base import CallContext
from remit.connectors.llm import ChatReply, ChatRequest
from remit.core.clock import SystemClock
from remit.core.database import Database
from remit.core.schema import audit, budget_periods, reservations
from remit.ops.reconciler import Reconciler
from remit.testing import Harness, ManualClock

# A dime per output token, the prompt free: a call with max_tokens=n reserves n dimes.
DIME = Price(input="0", output="100000")
PERIOD = "2026-11"
NOW = ManualClock().now().replace(year=2026, month=11, day=20, hour=12)


def budgets(db: Database, *declared: Budget, clock: ManualClock | None = None) -> Budgets:
    return Budgets(db, "desk", declared or (Budget(10),), clock=clock or ManualClock(NOW))


def reserve(store: Budgets, key: str, amount: str, workflow: str | None = None) -> Reservation:
    made = store.reserve(
        op_id="llm.chat.complete",
        key=key,
        run_id=f"run_{key}",
        workflow_id=f"run_{key}:1",
        workflow=workflow,
        max_cost=Decimal(amount),
    )
    assert made is not None
    return made


def counters(store: Budgets, scope: str = "app") -> tuple[Decimal, Decimal]:
    [state] = [s for s in store.periods() if s.scope == scope]
    return state.spent_usd, state.reserved_usd


def test_reserve_settle_and_release_add_up(db: Database) -> None:
    store = budgets(db)
    a, b, c = (reserve(store, key, "1.50") for key in "abc")
    assert counters(store) == (Decimal(0), Decimal("4.50"))

    assert store.settle(a, Decimal("0.40"), record=None)
    assert store.release(b, record=None)
    assert counters(store) == (Decimal("0.40"), Decimal("1.50"))

    # Settling twice, or releasing what settled, changes nothing.
    store.settle(a, Decimal("0.40"), record=None)
    store.release(a, record=None)
    assert counters(store) == (Decimal("0.40"), Decimal("1.50"))
    # A call that settles after its reservation was released still counts what it cost.
    store.release(c, record=None)
    store.settle(c, Decimal("1.00"), record=None)
    assert counters(store) == (Decimal("1.40"), Decimal(0))
    assert [store.reservation(k).status for k in "abc"] == ["settled", "released", "settled"]  # type: ignore[union-attr]
    assert store.reservation("a").cost_usd == Decimal("0.40")  # type: ignore[union-attr]


def test_a_call_counts_against_the_app_and_its_workflow(db: Database) -> None:
    store = budgets(db, Budget(10), Budget(1, "day", workflow="chase"))
    mine = reserve(store, "a", "0.75", workflow="chase")
    assert set(mine.periods) == {("app", PERIOD), ("workflow:chase", "2026-11-20")}
    reserve(store, "b", "0.75", workflow="other")  # the app's budget only
    with pytest.raises(BudgetExceeded) as refused:
        reserve(store, "c", "0.50", workflow="chase")
    assert (refused.value.scope, refused.value.period) == ("workflow:chase", "2026-11-20")
    assert "workflow `chase`'s daily budget for 2026-11-20 is $1.00" in str(refused.value)
    assert counters(store) == (Decimal(0), Decimal("1.50"))


def test_a_refusal_names_the_period_limit_and_spend_and_writes_nothing(db: Database) -> None:
    store = budgets(db)
    store.settle(reserve(store, "a", "9.90"), Decimal("9.90"), record=None)
    reserve(store, "b", "0.05")

    with pytest.raises(BudgetExceeded) as refused:
        reserve(store, "c", "0.10")

    error = refused.value
    assert (error.scope, error.period, error.limit, error.spent, error.reserved) == (
        "app",
        PERIOD,
        Decimal(10),
        Decimal("9.90"),
        Decimal("0.05"),
    )
    assert error.requested == Decimal("0.10")
    assert "monthly budget for 2026-11 is $10.00, with $9.90 spent and $0.05 reserved" in str(error)
    assert store.reservation("c") is None
    assert counters(store) == (Decimal("9.90"), Decimal("0.05"))
    reserve(store, "d", "0.05")  # exactly up to the limit is allowed


def test_a_call_whose_step_runs_again_takes_its_reservation_over(db: Database) -> None:
    store = budgets(db)
    first = reserve(store, "a", "2")
    again = reserve(store, "a", "2")
    assert again.id == first.id
    assert counters(store) == (Decimal(0), Decimal(2))
    store.settle(again, Decimal(1), record=None)
    assert reserve(store, "a", "2").status == "settled"  # the caller replays the ledger row
    assert counters(store) == (Decimal(1), Decimal(0))


def test_a_raised_limit_stays_for_its_period_and_is_audited(db: Database) -> None:
    clock = ManualClock(NOW)
    store = budgets(db, Budget(1), clock=clock)
    reserve(store, "a", "1")
    with pytest.raises(BudgetExceeded):
        reserve(store, "b", "1")
    raised = store.raise_limit("app", None, "2.50", by="user:carol")
    assert (raised.period, raised.limit_usd, raised.limit_set_by) == (
        PERIOD,
        Decimal("2.5"),
        "user:carol",
    )
    reserve(store, "b", "1")
    # A later declaration does not undo a limit set by hand; the next period starts afresh.
    assert budgets(db, Budget(5), clock=clock).periods()[0].limit_usd == Decimal("2.5")
    clock.advance(days=15)
    assert budgets(db, Budget(5), clock=clock).periods()[0].limit_usd == Decimal(5)
    with db.engine.connect() as conn:
        [row] = conn.execute(sa.select(audit).where(audit.c.action == "budget.set_limit"))
    assert (row.actor, row.target, row.meta) == (
        "user:carol",
        f"budget:desk:app:{PERIOD}",
        {"from": "1.000000", "to": "2.500000"},
    )
    with pytest.raises(Exception, match="declares no budget for scope `workflow:x`"):
        store.raise_limit("workflow:x", None, 1, by="user:carol")
    with pytest.raises(Exception, match="has no weekly budget"):
        store.raise_limit("app", "2026-W47", 1, by="user:carol")


class Ask(BaseModel):
    question: str
    max_tokens: int = 3


class MoreBudget(BaseModel):
    scope: str
    period: str
    limit: Decimal


@workflow(name="ask", input=Ask, uses=[chat_complete])
def ask(ctx: Context, input: Ask) -> dict[str, Any]:
    reply = ctx.llm(input.question, model="dime", max_tokens=input.max_tokens)
    return {"content": reply.content, "cost": str(reply.cost_usd)}


@workflow(name="ask-or-wait", input=Ask, uses=[chat_complete])
def ask_or_wait(ctx: Context, input: Ask) -> dict[str, Any]:
    try:
        reply = ctx.llm(input.question, model="dime", max_tokens=input.max_tokens)
    except BudgetExceeded as refused:
        decision = ctx.approval(
            "more-budget",
            type="more-budget",
            title=str(refused),
            draft=MoreBudget(scope=refused.scope, period=refused.period, limit=refused.limit + 1),
        )
        if not decision.approved:
            return {"outcome": "no budget"}
        ctx.raise_budget(
            scope=decision.draft.scope,
            period=decision.draft.period,
            limit=decision.draft.limit,
            by=decision.decided_by or "",
        )
        reply = ctx.llm(input.question, model="dime", max_tokens=input.max_tokens)
    return {"outcome": reply.content, "cost": str(reply.cost_usd)}


def desk(limit: str = "1") -> App:
    return App(
        name="desk",
        workflows=[ask, ask_or_wait],
        connectors=[llm],
        approvals=[ApprovalType("more-budget", draft=MoreBudget)],
        budgets=[Budget(limit)],
        llm_prices={"dime": DIME},
    )


def test_an_llm_call_records_its_cost_in_the_ledger_and_the_counters(database_url: str) -> None:
    fake = FakeLLM([FakeReply("Pay, please.", output_tokens=2)])
    with Harness(desk(), database_url=database_url, implementations={"llm": fake}) as harness:
        run = harness.run("ask", {"question": "Draft a reminder"})

        assert run.status == "done", run.error
        assert run.output == {"content": "Pay, please.", "cost": "0.200000"}
        [row] = harness.ledger(run.run_id)
        assert (row.op_id, row.status, row.cost) == ("llm.chat.complete", "ok", Decimal("0.2"))
        assert row.output["cost_usd"] == "0.200000"
        [period] = harness.client.services.budgets.periods()
        assert (period.spent_usd, period.reserved_usd) == (Decimal("0.2"), Decimal(0))
        reserved = harness.client.services.budgets.reservation(row.idempotency_key)
        assert reserved is not None
        assert (reserved.status, reserved.reserved_usd, reserved.cost_usd) == (
            "settled",
            Decimal("0.3"),  # max_tokens=3 dimes
            Decimal("0.2"),
        )
        assert [d.drift_usd for d in harness.client.services.budgets.drift()] == [0]
        assert len(fake.requests) == 1


def test_a_call_past_the_budget_is_refused_before_it_is_made(database_url: str) -> None:
    fake = FakeLLM()
    with Harness(desk("0.50"), database_url=database_url, implementations={"llm": fake}) as h:
        assert h.run("ask", {"question": "a"}).status == "done"  # reserves 0.30, settles 0.10
        refused = h.run("ask", {"question": "b", "max_tokens": 5})

        assert refused.status == "failed"
        assert "BudgetExceeded" in (refused.error or "")
        assert "monthly budget for" in (refused.error or "")
        assert "$0.10 spent" in (refused.error or "")
        assert len(fake.requests) == 1
        [row] = h.ledger(refused.run_id)
        assert (row.status, row.tries, row.cost) == ("failed", 0, None)
        assert row.error_info is not None
        assert row.error_info["kind"] == "budget"
        [period] = h.client.services.budgets.periods()
        assert (period.spent_usd, period.reserved_usd) == (Decimal("0.1"), Decimal(0))


def test_an_unpriced_model_is_refused_before_the_call(database_url: str) -> None:
    @workflow(name="ask-unpriced", input=Ask, uses=[chat_complete])
    def ask_unpriced(ctx: Context, input: Ask) -> str:
        return ctx.llm(input.question, model="gpt-9").content

    app = App(name="desk", workflows=[ask_unpriced], connectors=[llm], budgets=[Budget(1)])
    fake = FakeLLM()
    with Harness(app, database_url=database_url, implementations={"llm": fake}) as harness:
        run = harness.run("ask-unpriced", {"question": "a"})
        assert run.status == "failed"
        assert "no price for the model `gpt-9`" in (run.error or "")
        assert fake.requests == []
        assert harness.client.services.budgets.reservation(f"{run.run_id}:1") is None


def test_a_refused_run_waits_for_more_budget_and_carries_on(database_url: str) -> None:
    fake = FakeLLM()
    with Harness(desk("0.30"), database_url=database_url, implementations={"llm": fake}) as h:
        assert h.run("ask", {"question": "a", "max_tokens": 2}).status == "done"  # spends 0.10
        started = h.start("ask-or-wait", {"question": "b"})  # may cost 0.30: refused
        gate = h.gate(started.run_id)
        assert gate.draft_json == {
            "scope": "app",
            "period": h.client.services.budgets.periods()[0].period,
            "limit": "1.300000",
        }
        assert "$0.10 spent" in gate.title

        h.decide(gate.id, "approved", by="user:carol")
        run = h.wait(h.wait_moved(started.run_id, 1).run_id)

        assert run.status == "done", run.error
        assert run.output == {"outcome": "b", "cost": "0.100000"}
        [period] = h.client.services.budgets.periods()
        assert (period.limit_usd, period.limit_set_by) == (Decimal("1.3"), "user:carol")
        assert (period.spent_usd, period.reserved_usd) == (Decimal("0.2"), Decimal(0))
        statuses = [
            (row.status, row.error_info and row.error_info["kind"]) for row in h.ledger(run.run_id)
        ]
        assert statuses == [("failed", "budget"), ("ok", None)]
        assert len(fake.requests) == 2


def reconciler(harness: Harness, clock: ManualClock | None = None) -> Reconciler:
    runs = (
        harness.run_store
        if clock is None
        else type(harness.run_store)(harness.worker.db, clock=clock)
    )
    return Reconciler(
        runs,
        harness.worker.client,
        version=harness.worker.runtime.version,
        live_versions=lambda: {harness.worker.runtime.version},
        budgets=Budgets(harness.worker.db, "desk", harness.app.budgets, clock=clock),
    )


class HeldLLM(FakeLLM):
    """A fake LLM whose calls wait for the test to let them answer."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    @implements(chat_complete)
    def complete(self, input: ChatRequest, call: CallContext) -> ChatReply:
        self.entered.set()
        assert self.go.wait(30)
        return super().complete(input, call)


def test_an_llm_call_cut_off_by_its_attempts_end_is_abandoned(database_url: str) -> None:
    fake = HeldLLM()
    with Harness(desk("5"), database_url=database_url, implementations={"llm": fake}) as h:
        run = h.start("ask", {"question": "a"})
        assert fake.entered.wait(10)
        # In flight, the call shows in the ledger.
        [row] = h.ledger(run.run_id)
        assert (row.op_id, row.status, row.effect) == ("llm.chat.complete", "started", "read")

        h.client.runs.cancel(run.run_id)
        report = reconciler(h).run_pass()

        abandoned = [a for a in report.actions if a.kind == "abandoned"]
        assert [(a.run_id, a.workflow_id) for a in abandoned] == [(run.run_id, f"{run.run_id}:1")]
        assert "llm.chat.complete started in" in abandoned[0].reason
        [row] = h.ledger(run.run_id)
        assert (row.status, row.finished_at is not None) == ("abandoned", True)
        # Once: a second pass finds nothing more to abandon.
        again = reconciler(h).run_pass()
        assert [a for a in again.actions if a.kind == "abandoned"] == []
        # Its reservation went back to the budget.
        reserved = h.client.services.budgets.reservation(row.idempotency_key)
        assert reserved is not None
        assert reserved.status == "released"
        fake.go.set()


def test_the_reconciler_releases_orphans_and_reports_drift_without_correcting_it(
    database_url: str,
) -> None:
    with Harness(desk("5"), database_url=database_url) as harness:
        done = harness.run("ask", {"question": "a"})
        store = harness.client.services.budgets
        # The window: a call of the finished run reserved, and its process died before settling.
        orphan = store.reserve(
            op_id="llm.chat.complete",
            key=f"{done.run_id}:key:lost",
            run_id=done.run_id,
            workflow_id=done.workflow_id,
            workflow="ask",
            max_cost=Decimal("0.7"),
        )
        # And a direct call's, whose process died an hour and more ago, and one still young.
        for key in ("call_old:0", "call_young:0"):
            store.reserve(
                op_id="llm.chat.complete",
                key=key,
                run_id=key[:-2],
                workflow_id=key[:-2],
                workflow=None,
                max_cost=Decimal("0.2"),
            )
        with harness.worker.db.begin() as conn:
            conn.execute(
                reservations.update()
                .where(reservations.c.idempotency_key == "call_old:0")
                .values(created_at=harness.worker.runtime.clock.now() - timedelta(hours=2))
            )
        assert store.periods()[0].reserved_usd == Decimal("1.1")

        dry = reconciler(harness).run_pass(dry_run=True)
        assert sorted(a.kind for a in dry.actions) == ["release", "release"]
        assert store.periods()[0].reserved_usd == Decimal("1.1")

        report = reconciler(harness).run_pass()
        released = {a.run_id: a.reason for a in report.actions if a.kind == "release"}
        assert set(released) == {done.run_id, "call_old"}
        assert "its run is done" in released[done.run_id]
        assert "a direct call reserved it 2.0 h ago" in released["call_old"]
        assert store.reservation(orphan.idempotency_key).status == "released"  # type: ignore[union-attr]
        assert store.periods()[0].reserved_usd == Decimal("0.2")  # the young one's
        assert report.drift == []
        assert reconciler(harness).run_pass().actions == []

        # Someone writes the counter by hand: the pass reports it, and leaves it.
        with harness.worker.db.begin() as conn:
            conn.execute(budget_periods.update().values(spent_usd=Decimal("1.5")))
        report = reconciler(harness).run_pass()
        [drift] = report.drift
        assert (drift.scope, drift.spent_usd, drift.ledger_usd) == (
            "app",
            Decimal("1.5"),
            Decimal("0.1"),
        )
        assert drift.drift_usd == Decimal("1.4")
        assert store.periods()[0].spent_usd == Decimal("1.5")


@workflow(name="ask-async", input=Ask, uses=[chat_complete])
async def ask_async(ctx: AsyncContext, input: Ask) -> dict[str, Any]:
    reply = await ctx.llm(
        [{"role": "user", "content": input.question}],
        system="Answer in one word.",
        model="dime",
        max_tokens=input.max_tokens,
    )
    limit = await ctx.raise_budget(scope="app", period=this_month(), limit="9", by=ctx.actor)
    return {"content": reply.content, "cost": str(reply.cost_usd), "limit": str(limit)}


def this_month() -> str:
    return period_key("month", SystemClock().now())


def test_an_async_workflow_asks_and_raises_its_budget(database_url: str) -> None:
    app = App(
        name="desk",
        workflows=[ask_async],
        connectors=[llm],
        budgets=[Budget(1)],
        llm_prices={"dime": DIME},
    )
    fake = FakeLLM(["Yes."])
    with Harness(app, database_url=database_url, implementations={"llm": fake}) as harness:
        run = harness.run("ask-async", {"question": "Paid?"})
        assert run.status == "done", run.error
        assert run.output == {"content": "Yes.", "cost": "0.100000", "limit": "9.000000"}
        assert [m.role for m in fake.requests[0].messages] == ["system", "user"]
        [period] = harness.client.services.budgets.periods()
        assert (period.limit_usd, period.limit_set_by, period.spent_usd) == (
            Decimal(9),
            "user:test",
            Decimal("0.1"),
        )


def test_a_direct_call_is_billed_to_the_apps_budget_only(database_url: str) -> None:
    app = App(
        name="desk",
        workflows=[ask],
        connectors=[llm],
        budgets=[Budget(1), Budget("0.01", workflow="ask")],
        llm_prices={"dime": DIME},
    )
    with Harness(app, database_url=database_url) as harness:
        called = harness.call(
            "llm.chat.complete",
            {"model": "dime", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            key="hello",
        )
        assert called.status == "ok", called.error
        assert called.output["cost_usd"] == "0.100000"
        assert harness.client.services.budgets.reservation("direct:hello").periods == (
            ("app", this_month()),
        )  # type: ignore[union-attr]
        again = harness.call(
            "llm.chat.complete",
            {"model": "dime", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            key="hello",
        )
        assert again.replayed
        assert [(p.scope, p.spent_usd) for p in harness.client.services.budgets.periods()] == [
            ("app", Decimal("0.1")),
            ("workflow:ask", Decimal(0)),
        ]

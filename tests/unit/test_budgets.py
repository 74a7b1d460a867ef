"""Budget arithmetic, period keys, cost math and the app's checks: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from remit import (
    App,
    AppError,
    Budget,
    ChatReply,
    Context,
    FakeLLM,
    FakeReply,
    Price,
    chat_complete,
    llm,
    workflow,
)
from remit.budgets.model import (
    DIRECT_LEASE,
    PeriodState,
    Reservation,
    money,
    orphaned,
    period_bounds,
    period_key,
    refusal,
    usd,
)
from remit.connectors.base import CallContext
from remit.connectors.llm import DEFAULT_PRICES, ChatCost, ChatRequest, prompt_bound
from remit.core.errors import OpError

AT = datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kind", "key"),
    [("month", "2026-11"), ("week", "2026-W48"), ("day", "2026-11-29")],
)
def test_period_keys_and_their_bounds(kind: str, key: str) -> None:
    assert period_key(kind, AT) == key  # type: ignore[arg-type]
    found, start, end = period_bounds(key)
    assert found == kind
    assert start <= AT < end


def test_a_period_key_is_read_in_utc() -> None:
    helsinki = AT.astimezone(timezone(timedelta(hours=2)))
    assert helsinki.day == 30
    assert period_key("day", helsinki) == "2026-11-29"
    assert period_key("month", datetime(2026, 12, 31, 23, 0, tzinfo=UTC)) == "2026-12"
    assert period_bounds("2026-12")[2] == datetime(2027, 1, 1, tzinfo=UTC)
    # ISO weeks: 2027-01-01 is a Friday of 2026's week 53.
    assert period_key("week", datetime(2027, 1, 1, tzinfo=UTC)) == "2026-W53"


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)))
def test_every_instant_falls_in_the_period_its_key_names(naive: datetime) -> None:
    at = naive.replace(tzinfo=UTC)
    for kind in ("month", "week", "day"):
        _, start, end = period_bounds(period_key(kind, at))  # type: ignore[arg-type]
        assert start <= at < end


@pytest.mark.parametrize("key", ["2026", "2026-13", "2026-W60", "2026-11-31", "nov", "2026-1"])
def test_a_key_of_no_period_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="is none of"):
        period_bounds(key)


def test_money_rounds_up_to_the_micro_dollar_and_reads_plainly() -> None:
    assert money(Decimal("0.0000001")) == Decimal("0.000001")
    assert money("1.5") == Decimal("1.500000")
    assert usd(Decimal("12.5")) == "$12.50"
    assert usd(Decimal("1234")) == "$1,234.00"
    assert usd(Decimal("0.000123")) == "$0.000123"
    assert usd(Decimal("-1")) == "-$1.00"


def test_a_budget_checks_what_it_is_given() -> None:
    assert Budget(50).limit_usd == Decimal("50")
    assert Budget("2.5", "day", workflow="chase").scope == "workflow:chase"
    assert Budget(Decimal("1")).scope == "app"
    with pytest.raises(AppError, match="must be 0 or more"):
        Budget(-1)
    with pytest.raises(AppError, match="give the limit in USD as a number"):
        Budget("fifty")
    with pytest.raises(AppError, match="use 'month', 'week' or 'day'"):
        Budget(5, "year")  # type: ignore[arg-type]
    with pytest.raises(AppError, match="lowercase letters"):
        Budget(5, workflow="Chase Invoice")


def test_a_price_checks_what_it_is_given() -> None:
    assert Price("0.15", "0.60") == Price(Decimal("0.15"), Decimal("0.6"))
    with pytest.raises(AppError, match="0 or more"):
        Price(-1, 1)
    with pytest.raises(AppError, match="as a number"):
        Price("cheap", 1)


def state(limit: str, spent: str, reserved: str, scope: str = "app") -> PeriodState:
    return PeriodState(scope, "2026-11", money(limit), money(spent), money(reserved))


def test_a_reservation_is_refused_only_past_the_limit() -> None:
    assert not state("10", "9.80", "0.10").refuses(money("0.10"))  # exactly the limit
    assert state("10", "9.80", "0.10").refuses(money("0.100001"))
    assert state("0", "0", "0").refuses(money("0.000001"))


def test_a_refusal_names_the_period_the_limit_and_the_spend() -> None:
    refused = refusal("llm.chat.complete", state("10", "9.95", "0.03"), money("0.10"))
    assert (refused.scope, refused.period, refused.op) == ("app", "2026-11", "llm.chat.complete")
    assert (refused.limit, refused.spent, refused.reserved, refused.requested) == (
        Decimal("10"),
        Decimal("9.95"),
        Decimal("0.03"),
        Decimal("0.10"),
    )
    message = str(refused)
    for part in (
        "the app's monthly budget for 2026-11 is $10.00",
        "$9.95 spent",
        "$0.03 reserved",
        "may cost up to $0.10",
        "remit budgets set-limit --scope app --period 2026-11",
    ):
        assert part in message
    mine = refusal("llm.chat.complete", state("1", "1", "0", scope="workflow:chase"), money(1))
    assert "workflow `chase`'s monthly budget" in str(mine)


def reservation(created: datetime, workflow_id: str = "run_1:1") -> Reservation:
    return Reservation(
        id="res_1",
        idempotency_key="run_1:3",
        run_id="run_1",
        workflow_id=workflow_id,
        op_id="llm.chat.complete",
        periods=(("app", "2026-11"),),
        reserved_usd=money("0.1"),
        status="reserved",
        cost_usd=None,
        created_at=created,
    )


def test_a_reservation_is_orphaned_once_its_attempt_can_no_longer_settle_it() -> None:
    made = reservation(AT)
    now = AT + timedelta(minutes=1)
    going = {"run": ("run_1:1", "running"), "now": now}
    assert orphaned(made, attempt_status="PENDING", **going) is None  # type: ignore[arg-type]
    assert orphaned(made, attempt_status=None, **going) is None  # type: ignore[arg-type]
    ended = orphaned(made, attempt_status="ERROR", **going)  # type: ignore[arg-type]
    assert ended == "its attempt ended ERROR"
    assert orphaned(made, run=("run_1:2", "running"), attempt_status=None, now=now) == (
        "its run moved on to run_1:2"
    )
    assert orphaned(made, run=("run_1:1", "waiting"), attempt_status=None, now=now) == (
        "its run is waiting"
    )


def test_a_direct_calls_reservation_is_orphaned_after_its_lease() -> None:
    made = reservation(AT, workflow_id="call_1")
    assert orphaned(made, run=None, attempt_status=None, now=AT + DIRECT_LEASE) is None
    late = orphaned(made, run=None, attempt_status=None, now=AT + DIRECT_LEASE * 2)
    assert late == "a direct call reserved it 2.0 h ago"


def request(content: str, max_tokens: int = 100, model: str = "gpt-4o-mini") -> ChatRequest:
    return ChatRequest(
        model=model, messages=[{"role": "user", "content": content}], max_tokens=max_tokens
    )


def test_a_calls_most_is_its_prompt_bound_and_max_tokens_at_the_models_price() -> None:
    cost = ChatCost()
    prices = {"m": Price("2", "10")}
    asked = request("héllo", max_tokens=100, model="m")
    assert prompt_bound(asked) == len("héllo".encode()) + 8 + 8  # 6 bytes, framing
    assert cost.max_cost(asked, prices) == (Decimal(22 * 2) + Decimal(100 * 10)) / 1_000_000
    answered = ChatReply(content="x", model="m-2026-01-01", input_tokens=3, output_tokens=7)
    assert cost.actual_cost(asked, answered, prices) == Decimal(3 * 2 + 7 * 10) / 1_000_000


def test_an_unknown_model_cannot_be_priced_and_says_how_to_add_it() -> None:
    with pytest.raises(OpError) as refused:
        ChatCost().max_cost(request("hi", model="gpt-9"), DEFAULT_PRICES)
    message = str(refused.value)
    assert "no price for the model `gpt-9`" in message
    assert 'App(llm_prices={"gpt-9": Price(input="…", output="…")})' in message


# No text remit keeps holds a NUL character: a fake echoing one is refused (test_limits.py).
@given(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=400),
    st.integers(min_value=1, max_value=4000),
)
def test_the_fakes_reply_never_costs_more_than_its_reservation(text: str, max_tokens: int) -> None:
    asked = request(text or "?", max_tokens=max_tokens)
    reply = answer(FakeLLM(), asked)
    cost = ChatCost()
    assert cost.actual_cost(asked, reply, DEFAULT_PRICES) <= cost.max_cost(asked, DEFAULT_PRICES)


def answer(fake: FakeLLM, asked: ChatRequest) -> ChatReply:
    call = CallContext(
        op=chat_complete, idempotency_key="k", run_id="r", attempt=1, actor="t", environ={}
    )
    reply = fake.invoke(chat_complete, asked, call)
    assert isinstance(reply, ChatReply)
    return reply


def test_the_fake_follows_its_script_then_echoes() -> None:
    boom = OpError("down", op="llm.chat.complete")
    fake = FakeLLM(["first", FakeReply("second", input_tokens=5, output_tokens=2), boom])
    replies = [answer(fake, request("q")) for _ in range(2)]
    assert [r.content for r in replies] == ["first", "second"]
    assert (replies[1].input_tokens, replies[1].output_tokens) == (5, 2)
    with pytest.raises(OpError, match="down"):
        answer(fake, request("q"))
    assert answer(fake, request("say this back")).content == "say this back"
    assert len(fake.requests) == 4


def test_the_fake_stops_at_max_tokens() -> None:
    reply = answer(FakeLLM(), request("x" * 100, max_tokens=5))
    assert (reply.content, reply.output_tokens, reply.finish_reason) == ("x" * 20, 5, "length")


class Ask(BaseModel):
    question: str


@workflow(name="ask", input=Ask, uses=[chat_complete])
def ask(ctx: Context, input: Ask) -> str:
    return ctx.llm(input.question, model="gpt-4o-mini").content


@workflow(name="ask-unlisted", input=Ask)
def ask_unlisted(ctx: Context, input: Ask) -> str:
    return ctx.llm(input.question, model="gpt-4o-mini").content


def test_the_app_takes_budgets_and_prices() -> None:
    app = App(
        name="desk",
        workflows=[ask],
        connectors=[llm],
        budgets=[Budget(50), Budget(5, "day"), Budget(2, workflow="ask")],
        llm_prices={"mine": Price("1", "2"), "gpt-4o": ("3", "12")},
    )
    assert [b.scope for b in app.budgets] == ["app", "app", "workflow:ask"]
    assert app.llm_prices["mine"] == Price(1, 2)
    assert app.llm_prices["gpt-4o"] == Price(3, 12)  # changed
    assert app.llm_prices["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]  # kept


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budgets": [Budget(1, workflow="nope")]}, "budget for the workflow `nope`"),
        ({"budgets": [Budget(1), Budget(2)]}, "two month budgets for `app`"),
        ({"budgets": [50]}, "declare each with remit.Budget"),
        ({"llm_prices": {"m": 0.5}}, "llm_prices['m'] is 0.5: give Price(input=\"0.50\""),
    ],
)
def test_the_app_refuses_budgets_and_prices_it_cannot_use(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(AppError) as refused:
        App(name="desk", workflows=[ask], connectors=[llm], **kwargs)  # type: ignore[arg-type]
    assert message in str(refused.value)


def test_ctx_llm_counts_as_calling_the_chat_op_when_the_app_loads() -> None:
    with pytest.raises(AppError, match=r"calls `llm.chat.complete`, which its `uses` does not"):
        App(name="desk", workflows=[ask_unlisted], connectors=[llm])

"""An app whose runs wait for the world: messages, children and published state (the tests of
`ctx.wait_for`, `ctx.start`, `ctx.wait` and `ctx.publish`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from remit import App, AsyncContext, Context, workflow
from tests.support import FakeShop, create_order, get_item, shop


class Paid(BaseModel):
    amount: Decimal
    reference: str


class Awaiting(BaseModel):
    invoice_id: str = "inv_1"
    timeout: float | None = None
    topic: str = "paid"


@workflow(name="await-payment", input=Awaiting, uses=[get_item, create_order])
def await_payment(ctx: Context, input: Awaiting) -> dict[str, Any]:
    """Reads an item, waits for the payment, then orders: the read must not run again."""
    ctx.call(get_item, sku="sku-1")
    paid = ctx.wait_for(input.topic, model=Paid, timeout=input.timeout)
    if paid is None:
        return {"paid": None}
    order = ctx.call(create_order, sku="sku-1", quantity=1)
    return {"paid": str(paid.amount), "reference": paid.reference, "order": order.order_id}


@workflow(name="await-payment-async", input=Awaiting, uses=[get_item])
async def await_payment_async(ctx: AsyncContext, input: Awaiting) -> dict[str, Any]:
    await ctx.call(get_item, sku="sku-1")
    paid = await ctx.wait_for(input.topic, model=Paid, timeout=input.timeout)
    return {"paid": None if paid is None else str(paid.amount)}


class Collect(BaseModel):
    count: int = 3
    topic: str = "item"


@workflow(name="collect", input=Collect)
def collect(ctx: Context, input: Collect) -> list[Any]:
    """Takes `count` messages on one topic, in order, as sent."""
    return [ctx.wait_for(input.topic) for _ in range(input.count)]


class Line(BaseModel):
    n: int
    fail: bool = False
    hold: bool = False


class Refunded(BaseModel):
    n: int
    doubled: int


@workflow(name="refund-line", input=Line)
def refund_line(ctx: Context, input: Line) -> Refunded:
    if input.hold:
        ctx.wait_for("go")
    if input.fail:
        raise ValueError(f"line {input.n} cannot be refunded")
    return Refunded(n=input.n, doubled=ctx.step("double", lambda: input.n * 2))


class CreditNote(BaseModel):
    lines: int = 3
    fail_line: int | None = None
    hold: bool = False
    detached: bool = False


@workflow(name="credit-note", input=CreditNote, uses=[get_item])
def credit_note(ctx: Context, input: CreditNote) -> dict[str, Any]:
    """Starts one refund child per line, publishes its progress, and waits for them all."""
    ctx.call(get_item, sku="sku-1")
    handles = [
        ctx.start(
            refund_line,
            Line(n=n, fail=n == input.fail_line, hold=input.hold),
            key=f"line-{n}",
            detached=input.detached,
        )
        for n in range(input.lines)
    ]
    ctx.publish("progress", {"started": len(handles)})
    refunds: list[Refunded] = ctx.wait_all(handles)
    ctx.publish("progress", {"started": len(handles), "done": len(refunds)})
    return {"total": sum(r.doubled for r in refunds), "children": [h.run_id for h in handles]}


@workflow(name="credit-note-async", input=CreditNote)
async def credit_note_async(ctx: AsyncContext, input: CreditNote) -> int:
    handles = [await ctx.start("refund-line", {"n": n}) for n in range(input.lines)]
    refunds: list[Refunded] = await ctx.wait_all(handles)
    return sum(r.doubled for r in refunds)


class Quote(BaseModel):
    amount: int = 100


@workflow(name="quote", input=Quote)
def quote(ctx: Context, input: Quote) -> str:
    """Publishes a quote, then waits for its acceptance."""
    ctx.publish("quote", {"amount": input.amount, "status": "open"})
    answer = ctx.wait_for("answer")
    ctx.publish("quote", {"amount": input.amount, "status": answer})
    return str(answer)


class Sku(BaseModel):
    sku: str


@workflow(name="price-line", input=Sku, uses=[get_item])
def price_line(ctx: Context, input: Sku) -> int:
    """A child that fails while the shop has no such item."""
    return ctx.call(get_item, sku=input.sku).price


class Skus(BaseModel):
    skus: list[str]


@workflow(name="price-note", input=Skus)
def price_note(ctx: Context, input: Skus) -> int:
    handles = [ctx.start(price_line, Sku(sku=sku), key=sku) for sku in input.skus]
    prices: list[int] = ctx.wait_all(handles)
    return sum(prices)


def make_waits_app() -> App:
    return App(
        name="ledger",
        workflows=[
            await_payment,
            await_payment_async,
            collect,
            refund_line,
            credit_note,
            credit_note_async,
            quote,
            price_line,
            price_note,
        ],
        connectors=[shop],
    )


__all__ = ["FakeShop", "make_waits_app"]

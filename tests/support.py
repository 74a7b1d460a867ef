"""A small app for the integration tests: a shop connector whose fake can be scripted."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from remit import (
    App,
    ApprovalType,
    AsyncContext,
    Budget,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    Notifier,
    RetryPolicy,
    implements,
    op,
    workflow,
)

FAST = RetryPolicy(max_tries=4, initial=0.01, factor=2.0, cap=0.05)


class ItemRef(BaseModel):
    sku: str


class Item(BaseModel):
    sku: str
    price: int


class OrderIn(BaseModel):
    sku: str
    quantity: int


class Order(BaseModel):
    order_id: str
    sku: str
    quantity: int


class EmailIn(BaseModel):
    to: str
    text: str


class Sent(BaseModel):
    message_id: str


get_item = op("shop.items.get", effect="read", input=ItemRef, output=Item, retry=FAST)
create_order = op(
    "shop.orders.create", effect="write", idempotent=True, input=OrderIn, output=Order, retry=FAST
)
send_email = op("shop.emails.send", effect="write", input=EmailIn, output=Sent, retry=FAST)


class ShopDriver(Driver):
    """Stands for the live service: it needs a token, and never gets far in tests."""

    credentials = ("SHOP_TOKEN",)

    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        raise DriverError("the live shop is not reachable from tests", retryable=False)

    @implements(create_order)
    def create(self, input: OrderIn, call: CallContext) -> Order:
        raise DriverError("the live shop is not reachable from tests", retryable=False)

    @implements(send_email)
    def send(self, input: EmailIn, call: CallContext) -> Sent:
        raise DriverError("the live shop is not reachable from tests", retryable=False)


class FakeShop(Fake):
    """The shop in memory. `failures[op_id]` lists errors to raise before succeeding; `gate`
    (when set up) holds `shop.orders.create` until the test releases it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prices = {"sku-1": 1200, "sku-2": 450}
        self.failures: dict[str, list[Exception]] = defaultdict(list)
        self.entered = threading.Event()
        self.gate: threading.Event | None = None
        self.orders = 0
        self.reads = 0

    def _maybe_fail(self, op_id: str) -> None:
        if self.failures[op_id]:
            raise self.failures[op_id].pop(0)

    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        self.reads += 1
        self._maybe_fail(get_item.id)
        if input.sku not in self.prices:
            raise DriverError(
                f"no item {input.sku}", retryable=False, status=404, vendor_code="not_found"
            )
        return Item(sku=input.sku, price=self.prices[input.sku])

    @implements(create_order)
    def create(self, input: OrderIn, call: CallContext) -> Order:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self._maybe_fail(create_order.id)
        self.orders += 1
        return Order(order_id=f"ord_{self.orders}", sku=input.sku, quantity=input.quantity)

    @implements(send_email)
    def send(self, input: EmailIn, call: CallContext) -> Sent:
        self._maybe_fail(send_email.id)
        return Sent(message_id=f"msg_{len(self.effects_of(send_email)) + 1}")


shop = Connector("shop", ops=[get_item, create_order, send_email], driver=ShopDriver, fake=FakeShop)


class Purchase(BaseModel):
    sku: str
    quantity: int = 1
    email: str = "buyer@example.com"


class Receipt(BaseModel):
    order_id: str
    total: int
    message_id: str


@workflow(name="purchase", input=Purchase, uses=[get_item, create_order, send_email])
def purchase(ctx: Context, input: Purchase) -> Receipt:
    item = ctx.call(get_item, sku=input.sku)
    total = ctx.step("total", lambda: item.price * input.quantity, output=int)
    order = ctx.shop.orders.create(sku=input.sku, quantity=input.quantity)
    sent = ctx.call(send_email, EmailIn(to=input.email, text=f"order {order.order_id}: {total}"))
    return Receipt(order_id=order.order_id, total=total, message_id=sent.message_id)


@workflow(name="purchase-async", input=Purchase, uses=[get_item, create_order])
async def purchase_async(ctx: AsyncContext, input: Purchase) -> dict[str, Any]:
    item = await ctx.call(get_item, sku=input.sku)

    async def total() -> int:
        return item.price * input.quantity

    amount = await ctx.step("total", total)
    order = await ctx.shop.orders.create(sku=input.sku, quantity=input.quantity)
    return {"order_id": order.order_id, "total": amount}


def order_anyway(ctx: Context, sku: str) -> None:
    ctx.call(create_order, sku=sku, quantity=1)


@workflow(name="sneaky", input=Purchase, uses=[get_item])
def sneaky(ctx: Context, input: Purchase) -> None:
    # The load-time check reads only the workflow's own code; the helper's call is caught
    # when the run makes it.
    order_anyway(ctx, input.sku)


@workflow(name="broken-step", input=Purchase)
def broken_step(ctx: Context, input: Purchase) -> None:
    def explode() -> int:
        raise ValueError(f"no price for {input.sku}")

    ctx.step("price", explode)


class Keyed(BaseModel):
    first: str
    second: str
    sku: str = "sku-1"


@workflow(name="keyed", input=Keyed, uses=[get_item, create_order])
def keyed(ctx: Context, input: Keyed) -> list[str]:
    ctx.call(get_item, sku=input.sku)
    a = ctx.call(create_order, sku=input.sku, quantity=1, key=input.first)
    b = ctx.call(create_order, sku=input.sku, quantity=2, key=input.second)
    return [a.order_id, b.order_id]


class Refund(BaseModel):
    sku: str
    quantity: int = 1
    assignee: str | None = None
    expires_in: float | None = None


class RefundDraft(BaseModel):
    sku: str
    quantity: int
    note: str = ""


@workflow(name="refund", input=Refund, uses=[get_item, create_order])
def refund(ctx: Context, input: Refund) -> dict[str, Any]:
    item = ctx.call(get_item, sku=input.sku)
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.quantity} x {input.sku} at {item.price}",
        draft=RefundDraft(sku=input.sku, quantity=input.quantity),
        assignee=input.assignee,
        expires_in=input.expires_in,
    )
    if not decision.approved:
        return {"status": decision.status, "by": decision.decided_by}
    order = ctx.call(create_order, sku=decision.draft.sku, quantity=decision.draft.quantity)
    return {"status": "approved", "order_id": order.order_id, "quantity": order.quantity}


@workflow(name="refund-async", input=Refund, uses=[get_item, create_order])
async def refund_async(ctx: AsyncContext, input: Refund) -> dict[str, Any]:
    item = await ctx.call(get_item, sku=input.sku)
    decision = await ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.sku} at {item.price}",
        draft=RefundDraft(sku=input.sku, quantity=input.quantity),
    )
    if not decision.approved:
        return {"status": decision.status}
    order = await ctx.call(create_order, sku=decision.draft.sku, quantity=decision.draft.quantity)
    return {"status": "approved", "order_id": order.order_id}


@workflow(name="two-gates", input=Refund, uses=[get_item])
async def two_gates(ctx: AsyncContext, input: Refund) -> list[str]:
    """Waits at two gates at once."""
    await ctx.call(get_item, sku=input.sku)
    draft = RefundDraft(sku=input.sku, quantity=input.quantity)
    first, second = await asyncio.gather(
        ctx.approval("first", type="refund", title="first", draft=draft),
        ctx.approval("second", type="refund", title="second", draft=draft),
    )
    return [first.status, second.status]


@workflow(name="same-key", input=Refund)
def same_key(ctx: Context, input: Refund) -> list[str]:
    """Asks twice under one key: the second gate must not reuse the first's decision."""
    draft = RefundDraft(sku=input.sku, quantity=input.quantity)
    return [ctx.approval("ok", type="refund", title=t, draft=draft).status for t in "ab"]


class Nap(BaseModel):
    sku: str = "sku-1"
    seconds: float = 30 * 86400
    expires_in: float | None = None


@workflow(name="nap", input=Nap, uses=[get_item, create_order])
def nap(ctx: Context, input: Nap) -> dict[str, Any]:
    """Reads, sleeps, then orders; with `expires_in`, asks for a refund approval after."""
    ctx.call(get_item, sku=input.sku)
    ctx.sleep(input.seconds)
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    status = None
    if input.expires_in is not None:
        draft = RefundDraft(sku=input.sku, quantity=1)
        status = ctx.approval(
            "after", type="refund", title="after", draft=draft, expires_in=input.expires_in
        ).status
    return {"order_id": order.order_id, "approval": status}


@workflow(name="nap-async", input=Nap, uses=[get_item])
async def nap_async(ctx: AsyncContext, input: Nap) -> str:
    await ctx.call(get_item, sku=input.sku)
    await ctx.sleep(timedelta(seconds=input.seconds))
    return "awake"


@workflow(name="client-inside", input=Purchase)
def client_inside(ctx: Context, input: Purchase) -> str:
    """Uses a client inside a workflow, which remit refuses."""
    from remit import Client

    with Client.connect(".", by="user:x") as client:
        return client.runs.start("purchase", {"sku": input.sku}).run_id


REFUND = ApprovalType("refund", draft=RefundDraft)


def make_app(notifiers: list[Notifier] | None = None) -> App:
    return App(
        name="shop",
        workflows=[
            purchase,
            purchase_async,
            sneaky,
            broken_step,
            keyed,
            refund,
            refund_async,
            two_gates,
            same_key,
            nap,
            nap_async,
            purchase_mail_async,
            client_inside,
        ],
        connectors=[shop],
        approvals=[REFUND],
        notifiers=notifiers,
    )


@workflow(name="purchase-mail-async", input=Purchase, uses=[create_order, send_email])
async def purchase_mail_async(ctx: AsyncContext, input: Purchase) -> dict[str, str]:
    """Orders, then mails: a step after the order, for a pause to park the run before."""
    order = await ctx.call(create_order, sku=input.sku, quantity=input.quantity)
    sent = await ctx.call(send_email, to=input.email, text=f"order {order.order_id}")
    return {"order_id": order.order_id, "message_id": sent.message_id}


def governed_shop(folder: Path, policies: str, *, budgets: list[Budget] | None = None) -> App:
    """The shop app under `policies` (Cedar), written to `folder/policies/shop.cedar`."""
    base = make_app()
    app = App(
        name="shop",
        workflows=list(base.workflows.values()),
        connectors=[shop],
        approvals=[REFUND],
        budgets=budgets or [],
    )
    (folder / "policies").mkdir()
    (folder / "policies" / "shop.cedar").write_text(policies)
    app.use_policies(folder / "policies")
    return app

"""The benchmark's app, on a fake connector: `bump`, a 3-op workflow (a read, a keyed write, a
read), and `payout`, which waits at an approval gate between a read and a write."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from remit import (
    App,
    ApprovalType,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    Queue,
    implements,
    op,
    workflow,
)


class ItemRef(BaseModel):
    item: str


class Item(BaseModel):
    item: str
    count: int


class Put(BaseModel):
    item: str
    count: int


get_item = op("store.items.get", effect="read", input=ItemRef, output=Item)
put_item = op("store.items.put", effect="write", idempotent=True, input=Put, output=Item)


class StoreDriver(Driver):
    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        raise DriverError("the benchmark runs on the fake", retryable=False)

    @implements(put_item)
    def put(self, input: Put, call: CallContext) -> Item:
        raise DriverError("the benchmark runs on the fake", retryable=False)


class FakeStore(Fake):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.items: dict[str, int] = {}

    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        return Item(item=input.item, count=self.items.get(input.item, 0))

    @implements(put_item)
    def put(self, input: Put, call: CallContext) -> Item:
        self.items[input.item] = input.count
        return Item(item=input.item, count=input.count)


store = Connector("store", ops=[get_item, put_item], driver=StoreDriver, fake=FakeStore)


class Bump(BaseModel):
    item: str


@workflow(name="bump", input=Bump, uses=[get_item, put_item], queue="work")
def bump(ctx: Context, input: Bump) -> int:
    before = ctx.call(get_item, item=input.item)
    ctx.call(put_item, item=input.item, count=before.count + 1)
    return ctx.call(get_item, item=input.item).count


class Payout(BaseModel):
    item: str


class PayoutDraft(BaseModel):
    item: str
    count: int


PAYOUT = ApprovalType("payout", draft=PayoutDraft, description="a count to write")


@workflow(name="payout", input=Payout, uses=[get_item, put_item], queue="work")
def payout(ctx: Context, input: Payout) -> float:
    before = ctx.call(get_item, item=input.item)
    decision = ctx.approval(
        "payout",
        type="payout",
        title=f"Set {input.item} to {before.count + 1}",
        draft=PayoutDraft(item=input.item, count=before.count + 1),
    )
    # The first step after the gate: its checkpoint is where bench/approvals.py stops the clock.
    passed: float = ctx.step("passed", time.time)
    if decision.approved:
        ctx.call(put_item, item=decision.draft.item, count=decision.draft.count)
    return passed


app = App(
    name="bench-app",
    workflows=[bump, payout],
    connectors=[store],
    approvals=[PAYOUT],
    queues=[Queue("work", worker_concurrency=16)],
)

"""The parts of an op call that decide without a database: what a re-entered call may do
(`reentry.py`, shared by a run's calls and direct calls), the tries of a call (`tries.py`)
and the pricing of its bill (`billing.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from remit import CallContext, DriverError, MissingCredential, implements, op
from remit.connectors.base import Implementation
from remit.core.backoff import RetryPolicy
from remit.core.clock import ManualClock
from remit.core.ledger import LedgerRow
from remit.core.outcome import CallFailure, CredentialFailure, DriverFailure, Failed, Ok
from remit.declare.costs import Price
from remit.declare.ops import Op
from remit.execution.billing import Bill
from remit.execution.reentry import CallAgain, Conflict, Hold, Replay, reenter
from remit.execution.tries import Answered, GaveUp, Unknown, make_tries
from tests.unit.test_outcome import ledger_row


class Order(BaseModel):
    sku: str


class Placed(BaseModel):
    order_id: str
    cost_usd: str = ""


RETRY = RetryPolicy(max_tries=3, initial=1.0, factor=2.0, cap=10.0)
place = op("shop.orders.create", effect="write", input=Order, output=Placed, retry=RETRY)
place_keyed = op(
    "shop.orders.create", effect="write", input=Order, output=Placed, idempotent=True, retry=RETRY
)
look = op("shop.orders.get", effect="read", input=Order, output=Placed, retry=RETRY)


def _row(status: str, *, op_id: str = "shop.orders.create", input_hash: str = "h") -> LedgerRow:
    return ledger_row(
        status,
        op_id=op_id,
        input_hash=input_hash,
        output={"order_id": "o_1"} if status == "ok" else None,
        error="card declined" if status == "failed" else None,
    )


@pytest.mark.parametrize(
    ("status", "safe", "expected"),
    [
        ("ok", False, Replay(Ok(output={"order_id": "o_1"}))),
        ("ok", True, Replay(Ok(output={"order_id": "o_1"}))),
        ("failed", False, Replay(Failed(failure=CallFailure(message="card declined")))),
        ("failed", True, Replay(Failed(failure=CallFailure(message="card declined")))),
        ("started", True, CallAgain(not_done=False)),
        ("started", False, Hold()),
        ("uncertain", True, Hold()),
        ("uncertain", False, Hold()),
        ("not_done", False, CallAgain(not_done=True)),
        ("not_done", True, CallAgain(not_done=True)),
        # A read whose attempt ended before it answered: a later attempt calls it anew.
        ("abandoned", True, CallAgain(not_done=False)),
    ],
)
def test_reenter_by_status(status: str, safe: bool, expected: object) -> None:
    assert reenter(_row(status), place_keyed if safe else place, "h") == expected


@pytest.mark.parametrize("status", ["ok", "failed", "started", "uncertain", "not_done"])
def test_a_key_of_another_call_is_a_conflict_whatever_its_status(status: str) -> None:
    other_input = reenter(_row(status), place, "other")
    other_op = reenter(_row(status, op_id="shop.refunds.create"), place, "h")

    assert other_input == Conflict(_row(status), same_op=True)
    assert other_op == Conflict(_row(status, op_id="shop.refunds.create"), same_op=False)


class Scripted(Implementation):
    """Raises the scripted errors in turn, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def _answer(self) -> dict[str, Any]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"order_id": f"o_{self.calls}"}

    @implements(place)
    def create(self, input: Order, call: CallContext) -> dict[str, Any]:
        return self._answer()

    @implements(look)
    def get(self, input: Order, call: CallContext) -> dict[str, Any]:
        return self._answer()


def _tries(
    the_op: Op[Any, Any], driver: Scripted
) -> tuple[object, list[int], ManualClock, datetime]:
    clock = ManualClock()
    began = clock.now()
    noted: list[int] = []
    call = CallContext(
        op=the_op, idempotency_key="r:4", run_id="r", attempt=1, actor="a", environ={}
    )
    said: list[str] = []

    def note(tries: int, error: str) -> None:
        noted.append(tries)
        said.append(error)

    tried = make_tries(the_op, driver, Order(sku="s"), call, clock=clock, retrying=note)
    assert all(error for error in said)  # each retried failure is told with what it said
    return tried, noted, clock, began


def test_a_retryable_failure_is_tried_again_after_the_policys_delays() -> None:
    driver = Scripted(
        DriverError("busy", retryable=True, status=503, maybe_applied=False),
        DriverError("busy", retryable=True, status=503, maybe_applied=False),
    )

    tried, noted, clock, began = _tries(look, driver)

    assert tried == Answered(Placed(order_id="o_3"), 3)
    assert noted == [1, 2]
    assert (clock.now() - began).total_seconds() == pytest.approx(3.0)


def test_tries_stop_at_the_policys_most() -> None:
    busy = DriverError("busy", retryable=True, status=503, maybe_applied=False)
    driver = Scripted(busy, busy, busy, busy)

    tried, noted, _, _ = _tries(look, driver)

    assert tried == GaveUp(DriverFailure.of(busy), 3)
    assert (noted, driver.calls) == ([1, 2], 3)


def test_a_write_that_may_have_reached_the_vendor_is_unknown_and_not_tried_again() -> None:
    driver = Scripted(DriverError("timed out", retryable=True, maybe_applied=True))

    tried, noted, _, _ = _tries(place, driver)

    assert isinstance(tried, Unknown)
    assert (tried.tries, noted, driver.calls) == (1, [], 1)
    assert "may have reached the vendor (timed out)" in tried.message


def test_a_bug_in_a_write_that_cannot_be_repeated_leaves_it_unknown() -> None:
    tried, _, _, _ = _tries(place, Scripted(KeyError("id")))

    assert tried == Unknown(
        "op `shop.orders.create` raised KeyError: 'id'; its outcome is unknown", 1
    )


def test_a_bug_in_a_read_fails_it_without_a_retry() -> None:
    tried, _, _, _ = _tries(look, Scripted(KeyError("id")))

    message = "op `shop.orders.get` raised KeyError: 'id'"
    assert tried == GaveUp(DriverFailure(message=message, retryable=False), 1)


def test_a_missing_credential_fails_the_call() -> None:
    missing = MissingCredential.named(look.id, "SHOP_TOKEN")

    tried, _, _, _ = _tries(look, Scripted(missing))

    assert tried == GaveUp(CredentialFailure(message=str(missing), variable="SHOP_TOKEN"), 1)


class PerOrder:
    """A dollar a call at most; what the answer says it cost."""

    def max_cost(self, input: Order, prices: Mapping[str, Price]) -> Decimal:
        if input.sku == "unpriced":
            raise ValueError("no price for it")
        return Decimal(1)

    def actual_cost(self, input: Order, output: Placed, prices: Mapping[str, Price]) -> Decimal:
        return Decimal(output.order_id.removeprefix("o_")) / 100


billed = op("shop.orders.quote", effect="read", input=Order, output=Placed, cost=PerOrder())


def test_a_bill_is_priced_at_its_most_then_at_what_the_answer_cost() -> None:
    bill = Bill.open(billed, Order(sku="s"), {})
    assert isinstance(bill, Bill)

    dumped = bill.price(billed, Order(sku="s"), Placed(order_id="o_25"), {}, {"order_id": "o_25"})

    assert (bill.most, bill.cost) == (Decimal("1.00"), Decimal("0.25"))
    assert dumped == {"order_id": "o_25", "cost_usd": "0.250000"}


def test_a_call_that_cannot_be_priced_is_not_made() -> None:
    refused = Bill.open(billed, Order(sku="unpriced"), {})

    assert refused == CallFailure(
        kind="cost",
        message="op `shop.orders.quote` could not price the call, so it did not make it "
        "(ValueError: no price for it)",
    )


def test_an_answer_that_cannot_be_priced_is_billed_at_its_most() -> None:
    bill = Bill(Decimal("1.00"))

    bill.price(billed, Order(sku="s"), Placed(order_id="o_x"), {}, {"order_id": "o_x"})

    assert bill.cost == Decimal("1.00")

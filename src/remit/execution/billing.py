"""The bill of one call of an op with a cost.

Before the call is made it is priced at its most and that is reserved in every budget that
applies, once per call, whatever its tries (a vendor bills the answer, not the failed tries);
a reservation that would take a period past its limit refuses the call. Once it answers, it is
priced at what it cost. The transaction that records its ledger row settles the reservation at
that cost, or releases it when the call failed. What the budgets' rows mean is in `budgets/`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel

from remit.budgets.model import Reservation, money
from remit.budgets.store import Budgets
from remit.core.errors import BudgetExceeded, OpError
from remit.core.outcome import BudgetFailure, CallFailure
from remit.core.runs import RunInfo
from remit.declare.costs import Price
from remit.declare.ops import Op

log = logging.getLogger("remit.calls")

# Writes a call's ledger row with its cost: on the budget's connection when one settles or
# releases a reservation in the same transaction, on its own (None) when none does.
LedgerWrite = Callable[[sa.Connection | None, Decimal | None], bool]


@dataclass
class Bill:
    """A call of an op with a cost, as it goes: its most, its reservation (None when no budget
    applies), and what it cost once it answered."""

    most: Decimal
    reservation: Reservation | None = None
    cost: Decimal | None = None

    @classmethod
    def open(
        cls, op: Op[Any, Any], request: BaseModel, prices: Mapping[str, Price]
    ) -> Bill | CallFailure:
        """The bill of a call of `op` (which has a cost) with `request`, priced at its most; a
        `cost` failure when it cannot be priced, and then it is not made."""
        assert op.cost is not None, "only an op with a cost is billed"
        try:
            return cls(money(op.cost.max_cost(request, prices)))
        except Exception as error:
            message = (
                str(error)
                if isinstance(error, OpError)
                else f"op `{op.id}` could not price the call, so it did not make it "
                f"({type(error).__name__}: {error})"
            )
            return CallFailure(kind="cost", message=message)

    def reserve(
        self, budgets: Budgets, op: Op[Any, Any], key: str, run: RunInfo
    ) -> BudgetFailure | None:
        """Reserve the call's most in every budget that applies; the refusal when one would
        pass its limit, and then it is not made."""
        try:
            self.reservation = budgets.reserve(
                op_id=op.id,
                key=key,
                run_id=run.run_id,
                workflow_id=run.workflow_id,
                workflow=run.workflow,
                max_cost=self.most,
            )
        except BudgetExceeded as refused:
            log.warning("run %s: %s", run.run_id, refused)
            return BudgetFailure.of(refused)
        return None

    @property
    def settled(self) -> bool:
        """Whether another execution of the call's step settled it meanwhile, with its row."""
        return self.reservation is not None and self.reservation.status == "settled"

    def price(
        self,
        op: Op[Any, Any],
        request: BaseModel,
        output: BaseModel,
        prices: Mapping[str, Price],
        dumped: dict[str, Any],
    ) -> dict[str, Any]:
        """Note what the call cost for its settlement; return its output's JSON `dumped` with
        the cost in its `cost_usd`, if it has one."""
        assert op.cost is not None, "only an op with a cost is billed"
        try:
            self.cost = money(op.cost.actual_cost(request, output, prices))
        except Exception:
            # The call was made and billed: count it at its most rather than not at all.
            log.exception("%s: pricing the reply failed; billed at its most", op.id)
            self.cost = self.most
        if "cost_usd" in op.output.model_fields:
            dumped["cost_usd"] = str(self.cost)
        return dumped

    def record(self, budgets: Budgets | None, *, answered: bool, write: LedgerWrite) -> bool:
        """Write the call's ledger row with `write`, in the transaction that settles the
        reservation at its cost (it `answered`) or releases it (it did not). Returns what
        `write` returned: False when the ledger key belongs to another call."""
        cost = self.cost if answered else None
        reservation = self.reservation
        if reservation is None or budgets is None:
            return write(None, cost)
        if cost is None:
            return budgets.release(reservation, record=lambda conn: write(conn, None))
        return budgets.settle(reservation, cost, record=lambda conn: write(conn, cost))

    def release(self, budgets: Budgets | None) -> None:
        """The call's outcome is unknown, so is what it cost: its spend is not counted, as for
        a call that failed."""
        if self.reservation is not None and budgets is not None:
            budgets.release(self.reservation)

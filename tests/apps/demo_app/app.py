"""A small app for the tests of `remit demo`: a bookkeeping vendor with a fake that keeps
balances, a refund that waits for a controller's approval, and policies (ann is a clerk, carol a
controller). `PLAIN_VENDOR=1` adds a connector with no fake, which a demo refuses."""

from __future__ import annotations

import os
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
    implements,
    op,
    workflow,
)


class AccountRef(BaseModel):
    account: str


class Account(BaseModel):
    account: str
    balance: int


class Opening(BaseModel):
    account: str
    balance: int


class CreditIn(BaseModel):
    account: str
    amount: int


class Credit(BaseModel):
    credit_id: str
    account: str
    amount: int


get_account = op("books.accounts.get", effect="read", input=AccountRef, output=Account)
open_account = op(
    "books.accounts.open", effect="write", idempotent=True, input=Opening, output=Account
)
credit = op("books.credits.create", effect="write", idempotent=True, input=CreditIn, output=Credit)


class BooksDriver(Driver):
    """Stands for the live service, never reached by a demo."""

    @implements(get_account)
    def get(self, input: AccountRef, call: CallContext) -> Account:
        raise DriverError("the live books are not reachable from tests", retryable=False)

    @implements(open_account)
    def open(self, input: Opening, call: CallContext) -> Account:
        raise DriverError("the live books are not reachable from tests", retryable=False)

    @implements(credit)
    def credit(self, input: CreditIn, call: CallContext) -> Credit:
        raise DriverError("the live books are not reachable from tests", retryable=False)


class FakeBooks(Fake):
    """Balances in memory, and every credit given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.balances: dict[str, int] = {}
        self.credits: list[Credit] = []

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "accounts": [
                    {"account": name, "balance": balance}
                    for name, balance in sorted(self.balances.items())
                ],
                "credits": [each.model_dump(mode="json") for each in self.credits],
            }

    @implements(get_account)
    def get(self, input: AccountRef, call: CallContext) -> Account:
        if input.account not in self.balances:
            raise DriverError(f"no account {input.account}", retryable=False, status=404)
        return Account(account=input.account, balance=self.balances[input.account])

    @implements(open_account)
    def open(self, input: Opening, call: CallContext) -> Account:
        with self._lock:
            self.balances[input.account] = input.balance
        return Account(account=input.account, balance=input.balance)

    @implements(credit)
    def credit(self, input: CreditIn, call: CallContext) -> Credit:
        with self._lock:
            self.balances[input.account] = self.balances.get(input.account, 0) + input.amount
            made = Credit(
                credit_id=f"cr_{len(self.credits) + 1}", account=input.account, amount=input.amount
            )
            self.credits.append(made)
        return made


books = Connector(
    "books", ops=[get_account, open_account, credit], driver=BooksDriver, fake=FakeBooks
)


class RefundIn(BaseModel):
    account: str
    amount: int


class RefundDraft(BaseModel):
    amount: int


class Refunded(BaseModel):
    credit_id: str | None
    outcome: str


@workflow(name="refund", input=RefundIn, uses=[get_account, credit])
def refund(ctx: Context, input: RefundIn) -> Refunded:
    ctx.call(get_account, account=input.account)
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.amount} to {input.account}",
        draft=RefundDraft(amount=input.amount),
    )
    if not decision.approved:
        return Refunded(credit_id=None, outcome=f"not refunded ({decision.status})")
    made = ctx.call(credit, account=input.account, amount=decision.draft.amount)
    return Refunded(credit_id=made.credit_id, outcome="refunded")


get_note = op("notes.notes.get", effect="read", input=AccountRef, output=Account)


class NotesDriver(Driver):
    @implements(get_note)
    def get(self, input: AccountRef, call: CallContext) -> Account:
        raise DriverError("the live notes are not reachable from tests", retryable=False)


connectors = [books]
if os.environ.get("PLAIN_VENDOR"):
    connectors.append(Connector("notes", ops=[get_note], driver=NotesDriver))

app = App(
    name="demo-app",
    workflows=[refund],
    connectors=connectors,
    approvals=[ApprovalType("refund", draft=RefundDraft, description="Refund a customer")],
)

"""An app for the console's browser tests: a payment behind a gate whose draft has bounds, a
subscription's refund whose gate lets the approver change only the amount, a letter whose answer
is lost (a person's task), and a statement whose first fetch fails (a run to retry). Its bank is
a fake that keeps what it did; who may do what is in `policies/`."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, Field

from remit import (
    App,
    ApprovalType,
    Budget,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    RetryPolicy,
    implements,
    op,
    workflow,
)

ONCE = RetryPolicy(max_tries=1, initial=0.01, factor=2.0, cap=0.01)


class AccountRef(BaseModel):
    account: str


class Account(BaseModel):
    account: str
    holder: str


class PaymentIn(BaseModel):
    account: str
    amount: Decimal
    note: str


class Payment(BaseModel):
    payment_id: str
    account: str
    amount: Decimal
    note: str


class LetterIn(BaseModel):
    to: str
    text: str


class Letter(BaseModel):
    letter_id: str
    pages: int = Field(ge=1, le=20)


class Statement(BaseModel):
    account: str
    lines: int


get_account = op("bank.accounts.get", effect="read", input=AccountRef, output=Account)
send_payment = op(
    "bank.payments.send", effect="write", idempotent=True, input=PaymentIn, output=Payment
)
post_letter = op("bank.letters.post", effect="write", input=LetterIn, output=Letter, retry=ONCE)
fetch_statement = op(
    "bank.statements.fetch", effect="read", input=AccountRef, output=Statement, retry=ONCE
)


class BankDriver(Driver):
    """Stands for the live bank, which tests never reach."""

    @implements(get_account)
    def get(self, input: AccountRef, call: CallContext) -> Account:
        raise DriverError("the live bank is not reachable from tests", retryable=False)

    @implements(send_payment)
    def send(self, input: PaymentIn, call: CallContext) -> Payment:
        raise DriverError("the live bank is not reachable from tests", retryable=False)

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        raise DriverError("the live bank is not reachable from tests", retryable=False)

    @implements(fetch_statement)
    def fetch(self, input: AccountRef, call: CallContext) -> Statement:
        raise DriverError("the live bank is not reachable from tests", retryable=False)


class FakeBank(Fake):
    """Payments sent and letters posted, in memory. Every letter's answer is lost after it
    went out (a 504), so its call is uncertain; the first fetch of an account's statement is
    refused (a 400), and later ones answer."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.payments: list[Payment] = []
        self.letters: list[LetterIn] = []
        self.fetched: set[str] = set()

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "payments": [each.model_dump(mode="json") for each in self.payments],
                "letters": [each.model_dump(mode="json") for each in self.letters],
                "fetched": sorted(self.fetched),
            }

    @implements(get_account)
    def get(self, input: AccountRef, call: CallContext) -> Account:
        return Account(account=input.account, holder=input.account.title())

    @implements(send_payment)
    def send(self, input: PaymentIn, call: CallContext) -> Payment:
        with self._lock:
            made = Payment(
                payment_id=f"pay_{len(self.payments) + 1}",
                account=input.account,
                amount=input.amount,
                note=input.note,
            )
            self.payments.append(made)
        return made

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        with self._lock:
            self.letters.append(input)
        raise DriverError(
            "the bank timed out after the letter was handed over",
            retryable=True,
            status=504,
            maybe_applied=True,
        )

    @implements(fetch_statement)
    def fetch(self, input: AccountRef, call: CallContext) -> Statement:
        with self._lock:
            first = input.account not in self.fetched
            self.fetched.add(input.account)
        if first:
            raise DriverError(
                f"the bank has no statement for {input.account} yet", retryable=False, status=400
            )
        return Statement(account=input.account, lines=12)


bank = Connector(
    "bank",
    ops=[get_account, send_payment, post_letter, fetch_statement],
    driver=BankDriver,
    fake=FakeBank,
)


class PayIn(BaseModel):
    account: str
    amount: Decimal


class PaymentDraft(BaseModel):
    """What the approver may change before the payment goes out."""

    amount: Decimal = Field(gt=0, le=500, description="At most 500 without a second approver")
    note: str = Field(min_length=1, max_length=40)
    speed: Literal["standard", "express"] = "standard"


class Paid(BaseModel):
    payment_id: str | None
    outcome: str


@workflow(name="payment", input=PayIn, uses=[get_account, send_payment])
def payment(ctx: Context, input: PayIn) -> Paid:
    account = ctx.call(get_account, account=input.account)
    decision = ctx.approval(
        "pay",
        type="payment",
        title=f"Pay {input.amount} to {account.holder}",
        draft=PaymentDraft(amount=input.amount, note=f"Invoice for {account.holder}"),
    )
    if not decision.approved:
        return Paid(payment_id=None, outcome=f"not paid ({decision.status})")
    draft = decision.draft
    sent = ctx.call(
        send_payment,
        account=input.account,
        amount=draft.amount,
        note=f"{draft.speed}: {draft.note}",
    )
    return Paid(payment_id=sent.payment_id, outcome="paid")


@workflow(name="letter", input=LetterIn, uses=[post_letter])
def letter(ctx: Context, input: LetterIn) -> Letter:
    return ctx.call(post_letter, to=input.to, text=input.text)


@workflow(name="statement", input=AccountRef, uses=[get_account, fetch_statement])
def statement(ctx: Context, input: AccountRef) -> Statement:
    ctx.call(get_account, account=input.account)
    return ctx.call(fetch_statement, account=input.account)


class RefundIn(BaseModel):
    subscription_id: str = Field(pattern=r"^sub_[A-Za-z0-9]+$")
    amount: Decimal = Field(ge=Decimal("0.01"), le=Decimal("500.00"))
    reason: str = Field(min_length=1, max_length=120)


class RefundDraft(BaseModel):
    """The refund as the desk proposes it: the approver may change only the amount."""

    subscription_id: str
    amount: Decimal = Field(
        ge=Decimal("0.01"), le=Decimal("500.00"), description="What the customer gets back"
    )
    reason: str = Field(max_length=120)


@workflow(name="refund", input=RefundIn)
def refund(ctx: Context, input: RefundIn) -> dict[str, str | None]:
    """Refund part of a subscription's charge, once a treasurer has approved the amount."""
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.amount} on {input.subscription_id}",
        draft=RefundDraft(
            subscription_id=input.subscription_id, amount=input.amount, reason=input.reason
        ),
    )
    if not decision.approved:
        return {"refunded": None, "outcome": decision.status}
    return {"refunded": str(decision.draft.amount), "outcome": "refunded"}


@workflow(name="cooling-off", input=PayIn, uses=[get_account, send_payment])
def cooling_off(ctx: Context, input: PayIn) -> Paid:
    """A refund paid after a gate and a cooling-off of three days (the run page's timeline)."""
    account = ctx.call(get_account, account=input.account)
    decision = ctx.approval(
        "refund",
        type="payment",
        title=f"Refund {input.amount} to {account.holder} after three days",
        draft=PaymentDraft(amount=input.amount, note=f"Refund for {account.holder}"),
    )
    if not decision.approved:
        return Paid(payment_id=None, outcome=f"not refunded ({decision.status})")
    if ctx.patch("acknowledge"):
        ctx.step("acknowledge", lambda: f"told {account.holder} the refund is coming")
    ctx.sleep(timedelta(days=3))
    sent = ctx.call(
        send_payment, account=input.account, amount=decision.draft.amount, note="refund"
    )
    return Paid(payment_id=sent.payment_id, outcome="refunded")


app = App(
    name="console-app",
    workflows=[payment, letter, statement, refund, cooling_off],
    connectors=[bank],
    approvals=[
        ApprovalType("payment", draft=PaymentDraft, description="Pay a supplier"),
        ApprovalType(
            "refund", draft=RefundDraft, editable=["amount"], description="Refund a subscription"
        ),
    ],
    budgets=[Budget(Decimal("5.00"))],
)

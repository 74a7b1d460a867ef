"""An app for the crash tests: a bank whose fake can hold a call until the worker is killed.

The fake journals every applied effect to `CRASH_JOURNAL`, so the record outlives a killed
worker. When the file `<CRASH_HOLD_DIR>/hold-<point>` exists, the worker writes
`reached-<point>` there and waits to be killed at that point; `slow-<point>` holding a number
makes it wait that many seconds instead.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel

from remit import (
    App,
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
from remit.connectors.base import AppliedEffect


def hold(point: str) -> None:
    """Wait here to be killed if `hold-<point>` exists; if `slow-<point>` holds N, wait N
    seconds or until the file is removed, whichever comes first (a test that must act while a
    step runs holds it for as long as it takes, then lets it go)."""
    folder = os.environ.get("CRASH_HOLD_DIR")
    if not folder:
        return
    slow = Path(folder) / f"slow-{point}"
    if slow.exists():
        (Path(folder) / f"reached-{point}").write_text(str(os.getpid()))
        until = time.monotonic() + float(slow.read_text())
        while time.monotonic() < until and slow.exists():
            time.sleep(0.05)
        return
    if not (Path(folder) / f"hold-{point}").exists():
        return
    (Path(folder) / f"reached-{point}").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)


def jitter() -> None:
    """Wait a random 0 to `CRASH_JITTER_MS` milliseconds: a window for a kill to land in."""
    most = float(os.environ.get("CRASH_JITTER_MS", "0"))
    if most:
        time.sleep(random.random() * most / 1000)


class Account(BaseModel):
    account: str


class Balance(BaseModel):
    account: str
    balance: int


class TransferIn(BaseModel):
    to: str
    amount: int


class Transfer(BaseModel):
    transfer_id: str


class LetterIn(BaseModel):
    to: str
    text: str


class Letter(BaseModel):
    letter_id: str


read_balance = op("bank.accounts.read", effect="read", input=Account, output=Balance)
create_transfer = op(
    "bank.transfers.create", effect="write", idempotent=True, input=TransferIn, output=Transfer
)
# Not idempotent: a post cut off mid-call waits for a person; "not done" posts it again.
post_letter = op(
    "bank.letters.post", effect="write", input=LetterIn, output=Letter, on_not_done="retry"
)


class BankDriver(Driver):
    credentials = ("BANK_TOKEN",)

    @implements(read_balance)
    def read(self, input: Account, call: CallContext) -> Balance:
        raise DriverError("no live bank in tests", retryable=False)

    @implements(create_transfer)
    def transfer(self, input: TransferIn, call: CallContext) -> Transfer:
        raise DriverError("no live bank in tests", retryable=False)

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        raise DriverError("no live bank in tests", retryable=False)


class FakeBank(Fake):
    # With `CRASH_NEEDS_TOKEN` set, every call needs the credential, as a live bank's would:
    # stored with `remit secrets set`, it is read from the database on the calls' path.
    credentials = ("BANK_TOKEN",) if os.environ.get("CRASH_NEEDS_TOKEN") else ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(journal=os.environ.get("CRASH_JOURNAL"), **kwargs)

    @implements(read_balance)
    def read(self, input: Account, call: CallContext) -> Balance:
        jitter()
        hold("reading-balance")  # a read in flight, as `remit show` shows it
        return Balance(account=input.account, balance=10_000)

    @implements(create_transfer)
    def transfer(self, input: TransferIn, call: CallContext) -> Transfer:
        jitter()  # a kill here: the vendor has not acted
        return Transfer(transfer_id=f"tr_{call.idempotency_key}")

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        jitter()
        hold("sending-letter")  # a kill here: the bank has not posted it
        return Letter(letter_id=f"lt_{call.idempotency_key}")

    def _record(self, effect: AppliedEffect) -> None:
        super()._record(effect)
        # The vendor has applied the write; the worker has not yet recorded the outcome.
        hold(effect.op)
        jitter()


bank = Connector(
    "bank", ops=[read_balance, create_transfer, post_letter], driver=BankDriver, fake=FakeBank
)


class PayoutIn(BaseModel):
    account: str
    amount: int


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    balance = ctx.call(read_balance, account=input.account)
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    return {"transfers": [first.transfer_id, second.transfer_id], "letter": letter.letter_id}


@workflow(name="settle", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def settle(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Five ops: a read, an idempotent write, a non-idempotent one, another write, a read."""
    before = ctx.call(read_balance, account=input.account)
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    letter = ctx.call(post_letter, to=input.account, text=f"paying {input.amount}")
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    after = ctx.call(read_balance, account=input.account)
    return {
        "transfers": [first.transfer_id, second.transfer_id],
        "letter": letter.letter_id,
        "balances": [before.balance, after.balance],
    }


class BookIn(BaseModel):
    invoice: str
    amount: int


@workflow(name="book", input=BookIn)
def book(ctx: Context, input: BookIn) -> dict[str, Any]:
    """Books the invoice in the app's own table, `crash_bookings`, with `ctx.transaction`:
    a kill inside the transaction (`booking`) or after it (`booked`), or at any moment
    (`CRASH_JITTER_MS`), must leave one row for the run, never two."""

    def insert(conn: sa.Connection) -> dict[str, Any]:
        jitter()
        conn.execute(
            sa.text("INSERT INTO crash_bookings (run_id, invoice, amount) VALUES (:r, :i, :a)"),
            {"r": ctx.run_id, "i": input.invoice, "a": input.amount},
        )
        hold("booking")
        jitter()
        return {"invoice": input.invoice}

    booked: dict[str, Any] = ctx.transaction("book", insert)
    jitter()
    ctx.step("booked", lambda: hold("booked"))
    return booked


# Later versions of `payout`, for the redeploy tests: `CRASH_VARIANT` picks the code a worker
# runs, and each variant's code gives it its own version.


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout_thanks(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Variant `thanks`: the same steps, then one more at the end (a compatible change)."""
    balance = ctx.call(read_balance, account=input.account)
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    note = ctx.step("thanks", lambda: "thanks")
    return {
        "transfers": [first.transfer_id, second.transfer_id],
        "letter": letter.letter_id,
        "note": note,
    }


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout_reordered(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Variant `reordered`: a new step before the first transfer, unguarded (incompatible)."""
    balance = ctx.call(read_balance, account=input.account)
    ctx.step("audit", lambda: "audited")
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    return {"transfers": [first.transfer_id, second.transfer_id], "letter": letter.letter_id}


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout_patched(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Variant `patched`: the same new step, behind `ctx.patch` (a compatible change)."""
    balance = ctx.call(read_balance, account=input.account)
    if ctx.patch("audit"):
        ctx.step("audit", lambda: "audited")
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    return {"transfers": [first.transfer_id, second.transfer_id], "letter": letter.letter_id}


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout_patched_between(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Variant `patched-between`: a new step behind `ctx.patch`, placed exactly where the
    `between` step stands (a run killed inside it had got that far)."""
    balance = ctx.call(read_balance, account=input.account)
    first = ctx.call(create_transfer, to=input.account, amount=input.amount // 2)
    if ctx.patch("late-audit"):
        ctx.step("audit", lambda: "audited")
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    return {"transfers": [first.transfer_id, second.transfer_id], "letter": letter.letter_id}


@workflow(name="payout", input=PayoutIn, uses=[read_balance, create_transfer, post_letter])
def payout_rounded(ctx: Context, input: PayoutIn) -> dict[str, Any]:
    """Variant `rounded`: the same steps, the first transfer's amount rounded up (its input
    changes under a run that began it)."""
    balance = ctx.call(read_balance, account=input.account)
    first = ctx.call(create_transfer, to=input.account, amount=(input.amount + 1) // 2 + 1)
    ctx.step("between", lambda: hold("between"))
    second = ctx.call(create_transfer, to=input.account, amount=input.amount - input.amount // 2)
    letter = ctx.call(
        post_letter, to=input.account, text=f"paid {input.amount} of {balance.balance}"
    )
    return {"transfers": [first.transfer_id, second.transfer_id], "letter": letter.letter_id}


_VARIANTS = {
    "": payout,
    "thanks": payout_thanks,
    "reordered": payout_reordered,
    "patched": payout_patched,
    "patched-between": payout_patched_between,
    "rounded": payout_rounded,
}
app = App(
    name="crash-app",
    workflows=[_VARIANTS[os.environ.get("CRASH_VARIANT", "")], settle, book],
    connectors=[bank],
)

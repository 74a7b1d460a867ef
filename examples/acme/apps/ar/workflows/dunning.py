"""`ar.dunning`: a month of reminders for one open invoice, until the customer pays.

Day 0 a friendly reminder, day 7 a firm one, day 14 a final one; on day 30, if nothing was
paid, a last notice that it goes to collections. Between them the run waits for the payments
feed to tell it the customer paid (a message on `paid`: `client.send`, `remit send`), holding
no worker, and it stops as soon as one comes. Each reminder is counted on the invoice, and the
run shows how far it got (`progress`: `remit show`, `client.state`). Its scenarios move the
clock a week at a time and send the payment, so the month takes a fraction of a second
(`scenarios/dunning.feature`).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from pydantic import BaseModel

from remit import Context, workflow

from ....connectors.mail import send_message
from ....connectors.payments import Invoice, get_invoice, record_reminder

# The day of the month of dunning each reminder goes out on, and how it reads.
REMINDERS = (
    (0, "friendly", "Could you let us know when we can expect payment?"),
    (7, "firm", "Please arrange payment this week."),
    (14, "final", "Please pay within 7 days to avoid collection."),
)
HAND_OFF_DAY = 30


class DunningInput(BaseModel):
    invoice_id: str


class Paid(BaseModel):
    """The payments feed's message that the customer paid: how much, in the invoice's
    currency (`459.00`), and the payment's reference at the provider."""

    amount: Decimal
    reference: str


class DunningResult(BaseModel):
    invoice_id: str
    outcome: str
    reminders: int
    # The day of dunning of the last email sent: a reminder's, or the hand-off's (30).
    day: int
    paid: Decimal | None = None
    reference: str | None = None


@workflow(
    name="dunning",
    input=DunningInput,
    uses=[get_invoice, send_message, record_reminder],
    record=lambda input: ("invoice", input.invoice_id),
)
def dunning(ctx: Context, input: DunningInput) -> DunningResult:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    if invoice.status != "open":
        return DunningResult(
            invoice_id=invoice.invoice_id,
            outcome=f"not dunned ({invoice.status})",
            reminders=0,
            day=0,
        )
    today = 0
    sent = 0
    for day, tone, ask in REMINDERS:
        if day > today:
            paid = ctx.wait_for("paid", model=Paid, timeout=timedelta(days=day - today))
            if paid is not None:
                return _paid(invoice, paid, sent, today)
            today = day
        message = ctx.call(
            send_message,
            to=invoice.customer_email,
            subject=f"Invoice {invoice.invoice_id}: {_amount(invoice)} is open ({tone} reminder)",
            body=(
                f"Hello,\n\nour invoice {invoice.invoice_id} for {_amount(invoice)} fell due on "
                f"{invoice.due_date:%d %B %Y}. {ask}\n\nAccounts receivable"
            ),
        )
        sent += 1
        ctx.call(
            record_reminder,
            invoice_id=invoice.invoice_id,
            reminders_sent=invoice.reminders_sent + sent,
            note=f"dunning day {day}: {tone} reminder {message.message_id}",
        )
        ctx.publish("progress", {"reminders": sent, "last": tone, "day": day})
    paid = ctx.wait_for("paid", model=Paid, timeout=timedelta(days=HAND_OFF_DAY - today))
    if paid is not None:
        return _paid(invoice, paid, sent, today)
    ctx.call(
        send_message,
        to=invoice.customer_email,
        subject=f"Invoice {invoice.invoice_id}: final notice",
        body=(
            f"Hello,\n\ninvoice {invoice.invoice_id} for {_amount(invoice)} is still unpaid after "
            f"{sent} reminders. We are handing it to our collections agency.\n\n"
            "Accounts receivable"
        ),
    )
    ctx.publish("progress", {"reminders": sent, "last": "collections", "day": HAND_OFF_DAY})
    return DunningResult(
        invoice_id=invoice.invoice_id,
        outcome="handed to collections",
        reminders=sent,
        day=HAND_OFF_DAY,
    )


def _amount(invoice: Invoice) -> str:
    return f"{invoice.amount_due / 100:,.2f} {invoice.currency.upper()}"


def _paid(invoice: Invoice, paid: Paid, sent: int, day: int) -> DunningResult:
    return DunningResult(
        invoice_id=invoice.invoice_id,
        outcome="paid",
        reminders=sent,
        day=day,
        paid=paid.amount,
        reference=paid.reference,
    )

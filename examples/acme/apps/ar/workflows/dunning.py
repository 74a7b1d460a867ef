"""`ar.dunning`: a month of reminders for one open invoice, paced by the clock.

Day 0 a friendly reminder, day 7 a firm one, day 14 a final one; on day 30, if the invoice is
still open, a last notice that it goes to collections. Between them the run sleeps, holding no
worker. Before each email it reads the invoice again, and it stops as soon as the customer has
paid. Each reminder is counted on the invoice. Its scenarios move the clock a week at a time,
so the month takes a fraction of a second (`scenarios/dunning.feature`).
"""

from __future__ import annotations

from datetime import timedelta

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


class DunningResult(BaseModel):
    invoice_id: str
    outcome: str
    reminders: int
    day: int


@workflow(
    name="dunning",
    input=DunningInput,
    uses=[get_invoice, send_message, record_reminder],
    record=lambda input: ("invoice", input.invoice_id),
)
def dunning(ctx: Context, input: DunningInput) -> DunningResult:
    today = 0
    sent = 0
    for day, tone, ask in REMINDERS:
        if day > today:
            ctx.sleep(timedelta(days=day - today))
            today = day
        invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
        if invoice.status != "open":
            return _stopped(invoice, sent, today)
        message = ctx.call(
            send_message,
            to=invoice.customer_email,
            subject=f"Invoice {invoice.invoice_id}: {_amount(invoice)} is open ({tone} reminder)",
            body=(
                f"Hello,\n\nour invoice {invoice.invoice_id} for {_amount(invoice)} fell due on "
                f"{invoice.due_date:%d %B %Y}. {ask}\n\nAccounts receivable"
            ),
        )
        ctx.call(
            record_reminder,
            invoice_id=invoice.invoice_id,
            reminders_sent=invoice.reminders_sent + 1,
            note=f"dunning day {day}: {tone} reminder {message.message_id}",
        )
        sent += 1
    ctx.sleep(timedelta(days=HAND_OFF_DAY - today))
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    if invoice.status != "open":
        return _stopped(invoice, sent, HAND_OFF_DAY)
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
    return DunningResult(
        invoice_id=invoice.invoice_id,
        outcome="handed to collections",
        reminders=sent,
        day=HAND_OFF_DAY,
    )


def _amount(invoice: Invoice) -> str:
    return f"{invoice.amount_due / 100:,.2f} {invoice.currency.upper()}"


def _stopped(invoice: Invoice, sent: int, day: int) -> DunningResult:
    return DunningResult(
        invoice_id=invoice.invoice_id,
        outcome=f"stopped ({invoice.status})",
        reminders=sent,
        day=day,
    )

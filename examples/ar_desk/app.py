"""An accounts-receivable desk: chase an overdue invoice.

`chase-invoice` reads the invoice, decides how firm to be, emails the customer and counts the
reminder on the invoice. Run it with `make demo` (SQLite, fakes).
"""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from remit import App, Context, workflow

from .connectors.mail import mail, send_message
from .connectors.payments import get_invoice, payments, record_reminder


class ChaseInput(BaseModel):
    invoice_id: str
    customer_email: str | None = None
    as_of: date = date(2026, 11, 29)


class ChaseResult(BaseModel):
    invoice_id: str
    outcome: str
    days_overdue: int
    message_id: str | None = None


def tone_for(days_overdue: int) -> str:
    if days_overdue > 30:
        return "final"
    if days_overdue > 7:
        return "firm"
    return "friendly"


@workflow(
    name="chase-invoice",
    input=ChaseInput,
    uses=[get_invoice, send_message, record_reminder],
)
def chase_invoice(ctx: Context, input: ChaseInput) -> ChaseResult:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    days = ctx.step("days-overdue", lambda: (input.as_of - invoice.due_date).days, output=int)
    if invoice.status != "open" or days <= 0:
        return ChaseResult(
            invoice_id=invoice.invoice_id,
            outcome=f"nothing to chase ({invoice.status})",
            days_overdue=max(days, 0),
        )

    tone = tone_for(days)
    amount = f"{invoice.amount_due / 100:,.2f} {invoice.currency.upper()}"
    sent = ctx.call(
        send_message,
        to=input.customer_email or invoice.customer_email,
        subject=f"Invoice {invoice.invoice_id}: {amount} is {days} days overdue",
        body=(
            f"Hello,\n\nour invoice {invoice.invoice_id} for {amount} fell due on "
            f"{invoice.due_date:%d %B %Y}. "
            + {
                "friendly": "Could you let us know when we can expect payment?",
                "firm": "Please arrange payment this week.",
                "final": "Please pay within 7 days to avoid collection.",
            }[tone]
            + "\n\nAccounts receivable"
        ),
    )
    ctx.call(
        record_reminder,
        invoice_id=invoice.invoice_id,
        reminders_sent=invoice.reminders_sent + 1,
        note=f"{tone} reminder {sent.message_id}",
    )
    return ChaseResult(
        invoice_id=invoice.invoice_id,
        outcome=f"{tone} reminder sent",
        days_overdue=days,
        message_id=sent.message_id,
    )


app = App(
    name="ar-desk",
    workflows=[chase_invoice],
    connectors=[payments, mail],
)

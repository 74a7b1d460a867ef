"""`ar.chase-invoice`: remind a customer of an overdue invoice, as firmly as it is late.

It reads the invoice, decides how firm to be, has a model draft the email (the `llm`
connector, within the repo's monthly budget; on fakes the model echoes the draft it is given),
emails the customer, counts the reminder on the invoice and on the desk's record of the contact
(`ar.contacts`). Each chase concerns its invoice: `remit activity invoice inv_1001` lists it.
"""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel

from remit import Context, chat_complete, workflow

from ....connectors.mail import send_message
from ....connectors.payments import get_invoice, record_reminder
from .contacts import Contact, contacts


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
    """How firm a reminder is, by how late the invoice is."""
    if days_overdue > 30:
        return "final"
    if days_overdue > 7:
        return "firm"
    return "friendly"


@workflow(
    name="chase-invoice",
    input=ChaseInput,
    uses=[get_invoice, chat_complete, send_message, record_reminder, contacts.get, contacts.put],
    # Each chase concerns its invoice: `remit activity invoice inv_1001` shows it.
    record=lambda input: ("invoice", input.invoice_id),
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
    to = input.customer_email or invoice.customer_email
    # Billed to the repo's budget: it reserves the most this call can cost before making it.
    drafted = ctx.llm(
        f"Hello,\n\nour invoice {invoice.invoice_id} for {amount} fell due on "
        f"{invoice.due_date:%d %B %Y}. "
        + {
            "friendly": "Could you let us know when we can expect payment?",
            "firm": "Please arrange payment this week.",
            "final": "Please pay within 7 days to avoid collection.",
        }[tone]
        + "\n\nAccounts receivable",
        system=(
            f"You write accounts-receivable reminders. Rewrite the user's draft in a {tone} "
            "tone, keeping every fact in it. Reply with the email's body only."
        ),
        model="gpt-4o-mini",
        max_tokens=400,
    )
    sent = ctx.call(
        send_message,
        to=to,
        subject=f"Invoice {invoice.invoice_id}: {amount} is {days} days overdue",
        body=drafted.content,
    )
    ctx.call(
        record_reminder,
        invoice_id=invoice.invoice_id,
        reminders_sent=invoice.reminders_sent + 1,
        note=f"{tone} reminder {sent.message_id}",
    )
    known = ctx.data.ar.contacts.get(email=to).record or Contact(email=to)
    ctx.data.ar.contacts.put(
        known.model_copy(update={"reminders": known.reminders + 1, "last_chased": input.as_of})
    )
    return ChaseResult(
        invoice_id=invoice.invoice_id,
        outcome=f"{tone} reminder sent",
        days_overdue=days,
        message_id=sent.message_id,
    )

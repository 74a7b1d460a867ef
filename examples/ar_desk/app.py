"""An accounts-receivable desk: chase an overdue invoice, and write off what will not be paid.

`chase-invoice` reads the invoice, decides how firm to be, has a model draft the email (the
`llm` connector, within the desk's monthly budget of $5.00; on fakes the model echoes the
draft it is given), emails the customer, counts the reminder on the invoice and on the desk's
record of the contact (the `contacts` collection). `write-off` proposes writing off an invoice's balance and waits for a
person to approve it (they may change the amount); once approved it issues the credit note and
tells the customer. Both concern their invoice: `remit activity invoice inv_1003` lists the runs,
gates and tasks about it. `follow-up` waits (a week, by default) and emails the customer again if
the invoice is still open: a run that spends its life asleep, which is what lets the desk's
worker stop when idle and be woken for it (README, "Scale to zero"). Run them with `make demo`
(SQLite, fakes).
What the desk runs on (its container, DNS name and database) is declared in `resources/`:
`remit plan` and `remit apply` (README, "Resources").
Who may do what is in `policies/` (Cedar): clerks chase and propose, controllers approve.
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from pydantic import BaseModel, Field

from remit import (
    App,
    ApprovalType,
    Budget,
    Context,
    chat_complete,
    collection,
    llm,
    schedule,
    workflow,
)

from .connectors import dns, hosting, pgcloud
from .connectors.mail import mail, send_message
from .connectors.payments import get_invoice, payments, record_reminder, write_off


class Contact(BaseModel):
    """The desk's record of a customer's accounts-payable contact: how often it was chased."""

    email: str
    reminders: int = 0
    last_chased: date | None = None
    note: str = ""


# Kept in the app's own database; `remit data contacts get ap@northwind.example` reads one.
contacts = collection("contacts", model=Contact, key="email")


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
    # Billed to the desk's budget: it reserves the most this call can cost before making it.
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
    known = ctx.data.contacts.get(email=to).record or Contact(email=to)
    ctx.data.contacts.put(
        known.model_copy(update={"reminders": known.reminders + 1, "last_chased": input.as_of})
    )
    return ChaseResult(
        invoice_id=invoice.invoice_id,
        outcome=f"{tone} reminder sent",
        days_overdue=days,
        message_id=sent.message_id,
    )


class WriteOffInput(BaseModel):
    invoice_id: str
    reason: str = "uncollectible"
    # Who must approve it (any admin may too); None lets anyone decide.
    approver: str | None = None


class WriteOffDraft(BaseModel):
    """What the approver sees. They may edit the amount, in cents, and the memo; the workflow
    uses the invoice, customer and currency it read, and the desk's policies refuse a decision
    whose draft names another invoice."""

    invoice_id: str
    customer_email: str
    amount: int = Field(gt=0)
    currency: str
    memo: str


class WriteOffResult(BaseModel):
    invoice_id: str
    outcome: str
    amount: int = 0
    credit_note_id: str | None = None
    decided_by: str | None = None


@workflow(
    name="write-off",
    input=WriteOffInput,
    uses=[get_invoice, write_off, send_message],
    record=lambda input: ("invoice", input.invoice_id),
)
def write_off_invoice(ctx: Context, input: WriteOffInput) -> WriteOffResult:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    if invoice.status != "open" or invoice.amount_due <= 0:
        return WriteOffResult(invoice_id=invoice.invoice_id, outcome="nothing to write off")
    amount = f"{invoice.amount_due / 100:,.2f} {invoice.currency.upper()}"
    decision = ctx.approval(
        "write-off",
        type="write-off",
        title=f"Write off {amount} on {invoice.invoice_id} ({invoice.customer_email})",
        draft=WriteOffDraft(
            invoice_id=invoice.invoice_id,
            customer_email=invoice.customer_email,
            amount=invoice.amount_due,
            currency=invoice.currency,
            memo=f"Written off: {input.reason}",
        ),
        assignee=input.approver,
        expires_in=timedelta(days=7),
        record=("invoice", invoice.invoice_id),
    )
    if not decision.approved:
        return WriteOffResult(
            invoice_id=invoice.invoice_id,
            outcome=f"not written off ({decision.status})",
            decided_by=decision.decided_by,
        )
    # Only the amount and the memo are the approver's to change: the invoice, its customer and
    # its currency are the ones read before the gate, whatever the draft says.
    draft = decision.draft
    note = ctx.call(write_off, invoice_id=invoice.invoice_id, amount=draft.amount, memo=draft.memo)
    written = f"{note.amount / 100:,.2f} {invoice.currency.upper()}"
    ctx.call(
        send_message,
        to=invoice.customer_email,
        subject=f"Invoice {invoice.invoice_id}: {written} credited",
        body=(
            f"Hello,\n\nwe have issued credit note {note.credit_note_id} for {written} "
            f"against invoice {invoice.invoice_id}.\n\nAccounts receivable"
        ),
    )
    return WriteOffResult(
        invoice_id=invoice.invoice_id,
        outcome="written off",
        amount=note.amount,
        credit_note_id=note.credit_note_id,
        decided_by=decision.decided_by,
    )


class FollowUpInput(BaseModel):
    invoice_id: str
    wait_seconds: float = 7 * 86400


class FollowUpResult(BaseModel):
    invoice_id: str
    outcome: str
    message_id: str | None = None


@workflow(
    name="follow-up",
    input=FollowUpInput,
    uses=[get_invoice, send_message],
    record=lambda input: ("invoice", input.invoice_id),
)
def follow_up(ctx: Context, input: FollowUpInput) -> FollowUpResult:
    """Wait, then remind the customer again if the invoice is still open. The wait holds no
    thread or connection: a worker may stop meanwhile, and is woken at its end."""
    ctx.sleep(input.wait_seconds)
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    if invoice.status != "open":
        return FollowUpResult(
            invoice_id=invoice.invoice_id, outcome=f"no follow-up ({invoice.status})"
        )
    sent = ctx.call(
        send_message,
        to=invoice.customer_email,
        subject=f"Invoice {invoice.invoice_id}: still open",
        body=f"Hello,\n\ninvoice {invoice.invoice_id} is still open.\n\nAccounts receivable",
    )
    return FollowUpResult(
        invoice_id=invoice.invoice_id, outcome="followed up", message_id=sent.message_id
    )


app = App(
    name="ar-desk",
    workflows=[chase_invoice, write_off_invoice, follow_up],
    connectors=[payments, mail, llm, dns.connector, hosting.connector, pgcloud.connector],
    collections=[contacts],
    approvals=[ApprovalType("write-off", draft=WriteOffDraft, description="Write off a balance")],
    budgets=[Budget(Decimal("5.00"))],
    # The built-in `drift` compares the vendors with resources/*.py every morning.
    drift_schedule=schedule("0 6 * * *", tz="Europe/Helsinki"),
)

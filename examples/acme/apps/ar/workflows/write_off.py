"""`ar.write-off`: propose writing off an invoice's balance, and wait for a person to approve it.

The approver may change the amount and the memo; once approved the workflow issues the credit
note and tells the customer. A clerk may approve up to 500.00, a controller any amount
(`policies/acme.cedar`).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field

from remit import ApprovalType, Context, workflow

from ....connectors.mail import send_message
from ....connectors.payments import get_invoice, write_off


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


approval = ApprovalType("write-off", draft=WriteOffDraft, description="Write off a balance")

"""`ar.follow-up`: wait (a week, by default), then email the customer again if the invoice is
still open. A run that spends its life asleep, which is what lets the repo's worker stop when
idle and be woken for it (README, "Scale to zero")."""

from __future__ import annotations

from pydantic import BaseModel

from remit import Context, workflow

from ....connectors.mail import send_message
from ....connectors.payments import get_invoice


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

"""An app for the scenario tests: chase an invoice (with a model's draft, within a budget),
write one off behind a gate, follow up after a month asleep, and post a letter whose answer
may be lost (a person's task). Its scenarios are in `scenarios/`; who may do what is in
`policies/`."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from pydantic import BaseModel

from remit import App, ApprovalType, Budget, Context, chat_complete, llm, schedule, workflow

from .books import books, get_invoice, post_letter, remind, write_off


class InvoiceIn(BaseModel):
    invoice_id: str


class Chased(BaseModel):
    invoice_id: str
    reminders: int
    text: str


@workflow(name="chase", input=InvoiceIn, uses=[get_invoice, chat_complete, remind])
def chase(ctx: Context, input: InvoiceIn) -> Chased:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    drafted = ctx.llm(
        f"Invoice {invoice.invoice_id} of {invoice.amount} fell due on {invoice.due}.",
        model="gpt-4o-mini",
        max_tokens=100,
    )
    reminded = ctx.call(remind, invoice_id=invoice.invoice_id)
    return Chased(invoice_id=invoice.invoice_id, reminders=reminded.reminders, text=drafted.content)


class WriteOffDraft(BaseModel):
    invoice_id: str
    amount: int


@workflow(name="write-off", input=InvoiceIn, uses=[get_invoice, write_off])
def write_off_invoice(ctx: Context, input: InvoiceIn) -> dict[str, object]:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    decision = ctx.approval(
        "write-off",
        type="write-off",
        title=f"Write off {invoice.amount} on {invoice.invoice_id}",
        draft=WriteOffDraft(invoice_id=invoice.invoice_id, amount=invoice.amount),
        expires_in=timedelta(days=7),
    )
    if not decision.approved:
        return {"outcome": f"not written off ({decision.status})", "amount": 0}
    done = ctx.call(write_off, invoice_id=invoice.invoice_id, amount=decision.draft.amount)
    return {"outcome": "written off", "amount": done.written_off}


class FollowUpIn(BaseModel):
    invoice_id: str
    days: int = 30


@workflow(name="follow-up", input=FollowUpIn, uses=[get_invoice, remind])
def follow_up(ctx: Context, input: FollowUpIn) -> dict[str, object]:
    ctx.sleep(input.days * 86400)
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    if invoice.status != "open":
        return {"invoice_id": invoice.invoice_id, "reminders": invoice.reminders}
    reminded = ctx.call(remind, invoice_id=invoice.invoice_id)
    return {"invoice_id": reminded.invoice_id, "reminders": reminded.reminders}


class LetterIn(BaseModel):
    to: str
    text: str = "Your invoice is overdue."


@workflow(name="post-letter", input=LetterIn, uses=[post_letter])
def post(ctx: Context, input: LetterIn) -> dict[str, str]:
    letter = ctx.call(post_letter, to=input.to, text=input.text)
    return {"letter_id": letter.letter_id}


class CreditIn(BaseModel):
    invoice_id: str
    amount: Decimal
    note: str = ""


@workflow(name="credit", input=CreditIn)
def credit(ctx: Context, input: CreditIn) -> dict[str, object]:
    return {"invoice_id": input.invoice_id, "amount": str(input.amount), "note": input.note}


class SummaryIn(BaseModel):
    scheduled_at: datetime | None = None


@workflow(name="weekly-summary", input=SummaryIn, trigger=schedule("0 6 * * MON"))
def weekly_summary(ctx: Context, input: SummaryIn) -> dict[str, object]:
    at = input.scheduled_at
    return {"week_of": at.date().isoformat() if at else None}


app = App(
    name="scen",
    workflows=[chase, write_off_invoice, follow_up, post, credit, weekly_summary],
    connectors=[books, llm],
    approvals=[ApprovalType("write-off", draft=WriteOffDraft)],
    budgets=[Budget(Decimal("1.00"))],
)

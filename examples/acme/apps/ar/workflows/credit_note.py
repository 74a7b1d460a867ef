"""`ar.credit-note`: credit an invoice line by line, each line a run of its own.

A controller credits the lines of an invoice the customer disputes (clerks may not:
`policies/acme.cedar`). The run starts one `ar.credit-line` run per line, each of which issues
the credit note for its line at the payments provider, and waits for them all, holding no
worker; it shows how many lines it started and credited (`progress`), then tells the customer.
Each line is an ordinary run, with its own ledger and page (`remit runs --parent RUN`), and a
retry never issues a line twice. A line the provider refuses (more than the balance left)
fails its run, and the credit note with it, naming the line; cancelling the credit note
cancels the lines still running.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, Field

from remit import Context, workflow

from ....connectors.mail import send_message
from ....connectors.payments import get_invoice, write_off


class CreditLine(BaseModel):
    """One line to credit: what it is for, and its amount in the invoice's currency."""

    description: str
    amount: Decimal = Field(gt=0, decimal_places=2)


class CreditNoteInput(BaseModel):
    invoice_id: str
    lines: list[CreditLine] = Field(min_length=1)


class LineInput(BaseModel):
    invoice_id: str
    line: int
    description: str
    amount: Decimal = Field(gt=0, decimal_places=2)


class LineCredited(BaseModel):
    line: int
    credit_note_id: str
    amount: int  # in cents


class CreditNoteResult(BaseModel):
    invoice_id: str
    lines: int
    credited: int  # in cents
    credit_notes: list[str]


@workflow(
    name="credit-line",
    input=LineInput,
    uses=[write_off],
    record=lambda input: ("invoice", input.invoice_id),
)
def credit_line(ctx: Context, input: LineInput) -> LineCredited:
    note = ctx.call(
        write_off,
        invoice_id=input.invoice_id,
        amount=int(input.amount * 100),
        memo=f"Line {input.line}: {input.description}",
    )
    return LineCredited(line=input.line, credit_note_id=note.credit_note_id, amount=note.amount)


@workflow(
    name="credit-note",
    input=CreditNoteInput,
    uses=[get_invoice, send_message],
    record=lambda input: ("invoice", input.invoice_id),
)
def credit_note(ctx: Context, input: CreditNoteInput) -> CreditNoteResult:
    invoice = ctx.call(get_invoice, invoice_id=input.invoice_id)
    lines = [
        ctx.start(
            credit_line,
            LineInput(
                invoice_id=invoice.invoice_id,
                line=n,
                description=line.description,
                amount=line.amount,
            ),
            key=f"line-{n}",
        )
        for n, line in enumerate(input.lines, start=1)
    ]
    ctx.publish("progress", {"lines": len(lines), "credited": 0})
    credited: list[LineCredited] = ctx.wait_all(lines)
    ctx.publish("progress", {"lines": len(lines), "credited": len(credited)})
    total = sum(line.amount for line in credited)
    amount = f"{total / 100:,.2f} {invoice.currency.upper()}"
    ctx.call(
        send_message,
        to=invoice.customer_email,
        subject=f"Invoice {invoice.invoice_id}: {amount} credited",
        body=(
            f"Hello,\n\nwe have credited {len(credited)} lines of invoice {invoice.invoice_id}, "
            f"{amount} in all:\n\n"
            + "".join(
                f"- {line.description}: {line.amount:,.2f} ({note.credit_note_id})\n"
                for line, note in zip(input.lines, credited, strict=True)
            )
            + "\nAccounts receivable"
        ),
    )
    return CreditNoteResult(
        invoice_id=invoice.invoice_id,
        lines=len(credited),
        credited=total,
        credit_notes=[note.credit_note_id for note in credited],
    )

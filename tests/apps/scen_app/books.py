"""The books connector: invoices and letters at a bookkeeping service.

The fake keeps invoices in memory. A letter to an address at `unreachable.example` is posted,
and its answer is lost (a 504): the post is a write remit may not repeat, so a person says
whether it went out. The connector's scenario steps seed invoices and read them back.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from pydantic import BaseModel

from remit import (
    CallContext,
    Connector,
    Driver,
    DriverError,
    Fake,
    Given,
    RetryPolicy,
    implements,
    op,
    steps,
)

FAST = RetryPolicy(max_tries=3, initial=0.01, factor=2.0, cap=0.02)


class NewInvoice(BaseModel):
    invoice_id: str
    amount: int  # in cents
    due: date
    email: str


class InvoiceRef(BaseModel):
    invoice_id: str


class WriteOffIn(BaseModel):
    invoice_id: str
    amount: int


class Invoice(BaseModel):
    invoice_id: str
    amount: int
    due: date
    email: str
    status: str = "open"
    reminders: int = 0
    written_off: int = 0


class LetterIn(BaseModel):
    to: str
    text: str


class Letter(BaseModel):
    letter_id: str


create_invoice = op(
    "books.invoices.create", effect="write", idempotent=True, input=NewInvoice, output=Invoice
)
get_invoice = op("books.invoices.get", effect="read", input=InvoiceRef, output=Invoice, retry=FAST)
remind = op(
    "books.invoices.remind", effect="write", idempotent=True, input=InvoiceRef, output=Invoice
)
write_off = op(
    "books.invoices.write_off", effect="write", idempotent=True, input=WriteOffIn, output=Invoice
)
post_letter = op("books.letters.post", effect="write", input=LetterIn, output=Letter, retry=FAST)


class BooksDriver(Driver):
    """Stands for the live service, which tests never reach."""

    credentials = ("BOOKS_TOKEN",)

    def _unreachable(self) -> Any:
        raise DriverError("the live books service is not reachable from tests", retryable=False)

    @implements(create_invoice)
    def create(self, input: NewInvoice, call: CallContext) -> Invoice:
        return self._unreachable()

    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        return self._unreachable()

    @implements(remind)
    def remind(self, input: InvoiceRef, call: CallContext) -> Invoice:
        return self._unreachable()

    @implements(write_off)
    def write_off(self, input: WriteOffIn, call: CallContext) -> Invoice:
        return self._unreachable()

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        return self._unreachable()


class FakeBooks(Fake):
    """The books in memory: `invoices` by id, `letters` posted."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.invoices: dict[str, Invoice] = {}
        self.letters: list[LetterIn] = []

    def _invoice(self, invoice_id: str) -> Invoice:
        if invoice_id not in self.invoices:
            raise DriverError(f"no invoice {invoice_id}", retryable=False, status=404)
        return self.invoices[invoice_id]

    @implements(create_invoice)
    def create(self, input: NewInvoice, call: CallContext) -> Invoice:
        self.invoices[input.invoice_id] = Invoice(**input.model_dump())
        return self.invoices[input.invoice_id]

    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        return self._invoice(input.invoice_id)

    @implements(remind)
    def remind(self, input: InvoiceRef, call: CallContext) -> Invoice:
        invoice = self._invoice(input.invoice_id)
        self.invoices[invoice.invoice_id] = invoice.model_copy(
            update={"reminders": invoice.reminders + 1}
        )
        return self.invoices[invoice.invoice_id]

    @implements(write_off)
    def write_off(self, input: WriteOffIn, call: CallContext) -> Invoice:
        invoice = self._invoice(input.invoice_id)
        self.invoices[invoice.invoice_id] = invoice.model_copy(
            update={"status": "written off", "written_off": input.amount}
        )
        return self.invoices[invoice.invoice_id]

    @implements(post_letter)
    def post(self, input: LetterIn, call: CallContext) -> Letter:
        self.letters.append(input)
        if input.to.endswith("@unreachable.example"):
            raise DriverError("the post office did not answer in time", retryable=True, status=504)
        return Letter(letter_id=f"lt_{len(self.letters)}")


books_steps = steps("books")


@books_steps.given("an invoice {invoice_id} of {amount:d} due {due}")
def an_invoice(invoice_id: str, amount: int, due: str) -> Given:
    return Given(
        op=create_invoice,
        input={
            "invoice_id": invoice_id,
            "amount": amount,
            "due": due,
            "email": f"ap@{invoice_id}.example",
        },
        actor="user:sam",
        name="invoice",
    )


@books_steps.given("an invoice with:")
def an_invoice_with(table: list[dict[str, Any]]) -> Given:
    """An invoice from a `field | value` table, each cell passed on as it is: the op's input
    model says what a cell means (`0042` is an id, not the number 42)."""
    return Given(
        op=create_invoice,
        input={row["field"]: row["value"] for row in table},
        actor="user:sam",
        name="invoice",
    )


@books_steps.then("the invoice {invoice_id} has {n:d} reminders")
def has_reminders(fake: FakeBooks, invoice_id: str, n: int) -> None:
    found = fake.invoices[invoice_id].reminders
    assert found == n, f"the invoice {invoice_id} has {found} reminders, not {n}"


@books_steps.then("the invoice {invoice_id} is {status}")
def is_status(fake: FakeBooks, invoice_id: str, status: str) -> None:
    found = fake.invoices[invoice_id]
    assert found.status == status, f"the invoice {invoice_id} is {found.status}, not {status}"


@books_steps.then("{n:d} letters were posted")
def letters_posted(fake: FakeBooks, n: int) -> None:
    assert len(fake.letters) == n, f"{len(fake.letters)} letters were posted, not {n}"


@books_steps.then("the amount of {invoice_id} is {amount:d}")
def amount_is(fake: FakeBooks, invoice_id: str, amount: int) -> None:
    assert fake.invoices[invoice_id].amount == amount  # no message: the report says the values


books = Connector(
    "books",
    ops=[create_invoice, get_invoice, remind, write_off, post_letter],
    driver=BooksDriver,
    fake=FakeBooks,
    steps=books_steps,
)

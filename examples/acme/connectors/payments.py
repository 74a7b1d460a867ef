"""The payments connector: invoices at a Stripe-shaped payments API.

The driver speaks the vendor's documented HTTP API (`POST /v1/invoices`, `GET /v1/invoices/{id}`,
`POST /v1/invoices/{id}`, `POST /v1/invoices/{id}/pay` and `POST /v1/credit_notes`, each POST
with an `Idempotency-Key` header); the fake keeps invoices and credit notes in memory.

Its scenario steps put invoices in the fake and record payments (through the ops, as the
billing system does: `agent:billing`), and read back what the fake holds.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from pydantic import BaseModel

from remit import CallContext, Connector, Driver, DriverError, Fake, Given, implements, op, steps


class InvoiceRef(BaseModel):
    invoice_id: str


class Invoice(BaseModel):
    invoice_id: str
    customer_email: str
    amount_due: int  # in cents
    currency: str
    due_date: date
    status: str  # open, paid, void
    reminders_sent: int = 0


class NewInvoice(BaseModel):
    """An invoice to issue: its id, customer, amount in cents, currency and due date."""

    invoice_id: str
    customer_email: str
    amount_due: int  # in cents
    currency: str
    due_date: date


class ReminderNote(BaseModel):
    """The reminder count to set, decided by the workflow: a retry sends the same request."""

    invoice_id: str
    reminders_sent: int
    note: str


class CreditNoteIn(BaseModel):
    """Write off `amount` (cents) of an invoice's balance."""

    invoice_id: str
    amount: int
    memo: str


class CreditNote(BaseModel):
    credit_note_id: str
    invoice_id: str
    amount: int
    memo: str


create_invoice = op(
    "payments.invoices.create",
    effect="write",
    idempotent=True,
    input=NewInvoice,
    output=Invoice,
    description="Issue an invoice (keyed).",
)
get_invoice = op(
    "payments.invoices.get",
    effect="read",
    input=InvoiceRef,
    output=Invoice,
    description="Read an invoice.",
)
record_reminder = op(
    "payments.invoices.record_reminder",
    effect="write",
    idempotent=True,
    input=ReminderNote,
    output=Invoice,
    description="Count a reminder on the invoice and note it (keyed, so repeating is harmless).",
)

mark_paid = op(
    "payments.invoices.pay",
    effect="write",
    idempotent=True,
    input=InvoiceRef,
    output=Invoice,
    description="Record that the customer paid an invoice outside the provider (keyed).",
)
write_off = op(
    "payments.credit_notes.create",
    effect="write",
    idempotent=True,
    input=CreditNoteIn,
    output=CreditNote,
    description="Write off part of an invoice's balance with a credit note (keyed).",
)


def _error(response: httpx.Response) -> DriverError:
    try:
        body: dict[str, Any] = response.json().get("error", {})
    except ValueError:
        body = {}
    return DriverError(
        body.get("message") or f"payments API answered {response.status_code}",
        retryable=response.status_code == 429 or response.status_code >= 500,
        status=response.status_code,
        vendor_code=body.get("code"),
    )


def _invoice(body: dict[str, Any]) -> Invoice:
    metadata = body.get("metadata") or {}
    return Invoice(
        invoice_id=body["id"],
        customer_email=body["customer_email"],
        amount_due=body["amount_due"],
        currency=body["currency"],
        due_date=datetime.fromtimestamp(body["due_date"], UTC).date(),
        status=body["status"],
        reminders_sent=int(metadata.get("reminders_sent", 0)),
    )


class PaymentsDriver(Driver):
    """The live payments API. Needs `PAYMENTS_API_KEY`; `PAYMENTS_API_BASE` points elsewhere."""

    credentials = ("PAYMENTS_API_KEY",)

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = os.environ.get("PAYMENTS_API_BASE", "https://api.payments.example")
        self.transport = transport

    def _client(self, call: CallContext) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            transport=self.transport,
            timeout=call.timeout,  # within the try remit gives it
            headers={"Authorization": f"Bearer {call.credential('PAYMENTS_API_KEY')}"},
        )

    def _send(self, call: CallContext, request: httpx.Request) -> dict[str, Any]:
        with self._client(call) as client:
            try:
                response = client.send(request)
            except httpx.TransportError as error:
                raise DriverError(f"payments API unreachable: {error}", retryable=True) from error
        if response.status_code >= 400:
            raise _error(response)
        body: dict[str, Any] = response.json()
        return body

    def _post(self, call: CallContext, path: str, data: dict[str, str]) -> dict[str, Any]:
        """A form POST keyed by the call's idempotency key: the vendor replays a repeat."""
        with self._client(call) as client:
            request = client.build_request(
                "POST", path, headers={"Idempotency-Key": call.idempotency_key}, data=data
            )
        return self._send(call, request)

    @implements(create_invoice)
    def create(self, input: NewInvoice, call: CallContext) -> Invoice:
        due = datetime(input.due_date.year, input.due_date.month, input.due_date.day, tzinfo=UTC)
        form = {
            "id": input.invoice_id,
            "customer_email": input.customer_email,
            "amount_due": str(input.amount_due),
            "currency": input.currency,
            "due_date": str(int(due.timestamp())),
        }
        return _invoice(self._post(call, "/v1/invoices", form))

    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        with self._client(call) as client:
            request = client.build_request("GET", f"/v1/invoices/{input.invoice_id}")
        return _invoice(self._send(call, request))

    @implements(record_reminder)
    def record(self, input: ReminderNote, call: CallContext) -> Invoice:
        form = {
            "metadata[reminders_sent]": str(input.reminders_sent),
            "metadata[last_reminder]": input.note,
        }
        return _invoice(self._post(call, f"/v1/invoices/{input.invoice_id}", form))

    @implements(mark_paid)
    def pay(self, input: InvoiceRef, call: CallContext) -> Invoice:
        form = {"paid_out_of_band": "true"}
        return _invoice(self._post(call, f"/v1/invoices/{input.invoice_id}/pay", form))

    @implements(write_off)
    def credit(self, input: CreditNoteIn, call: CallContext) -> CreditNote:
        form = {"invoice": input.invoice_id, "amount": str(input.amount), "memo": input.memo}
        body = self._post(call, "/v1/credit_notes", form)
        return CreditNote(
            credit_note_id=body["id"],
            invoice_id=body["invoice"],
            amount=body["amount"],
            memo=body.get("memo") or "",
        )


# The fake's invoices: id, customer, balance in cents, due date, status.
_SEED = [
    ("inv_1001", "ap@northwind.example", 128_000, date(2026, 10, 15), "open"),
    ("inv_1002", "billing@contoso.example", 45_900, date(2026, 11, 1), "paid"),
    ("inv_1003", "finance@fabrikam.example", 61_250, date(2026, 6, 30), "open"),
]


class FakePayments(Fake):
    """Invoices in memory. Every fake starts with the three of `_SEED`, so a process on fakes
    (`REMIT_FAKES=1 remit run ...`) has invoices to chase; scenarios and the demo issue their
    own with `payments.invoices.create`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.invoices: dict[str, Invoice] = {
            invoice_id: Invoice(
                invoice_id=invoice_id,
                customer_email=email,
                amount_due=cents,
                currency="eur",
                due_date=due,
                status=status,
            )
            for invoice_id, email, cents, due, status in _SEED
        }
        self.credit_notes: list[CreditNote] = []

    def state(self) -> dict[str, Any]:
        """The invoices as they stand, and the credit notes written."""
        with self._lock:
            return {
                "invoices": [invoice.model_dump(mode="json") for invoice in self.invoices.values()],
                "credit_notes": [note.model_dump(mode="json") for note in self.credit_notes],
            }

    @implements(create_invoice)
    def create(self, input: NewInvoice, call: CallContext) -> Invoice:
        with self._lock:
            invoice = Invoice(**input.model_dump(), status="open")
            known = self.invoices.get(input.invoice_id)
            if known is not None and known != invoice:
                raise DriverError(
                    f"an invoice {input.invoice_id} exists already: give the new one another id",
                    retryable=False,
                    status=409,
                    vendor_code="invoice_exists",
                )
            self.invoices[input.invoice_id] = known or invoice
            return self.invoices[input.invoice_id]

    @implements(get_invoice)
    def get(self, input: InvoiceRef, call: CallContext) -> Invoice:
        invoice = self.invoices.get(input.invoice_id)
        if invoice is None:
            raise DriverError(
                f"no invoice {input.invoice_id}",
                retryable=False,
                status=404,
                vendor_code="resource_missing",
            )
        return invoice

    @implements(record_reminder)
    def record(self, input: ReminderNote, call: CallContext) -> Invoice:
        with self._lock:
            invoice = self.get(InvoiceRef(invoice_id=input.invoice_id), call)
            updated = invoice.model_copy(update={"reminders_sent": input.reminders_sent})
            self.invoices[input.invoice_id] = updated
            return updated

    @implements(mark_paid)
    def pay(self, input: InvoiceRef, call: CallContext) -> Invoice:
        with self._lock:
            invoice = self.get(input, call)
            if invoice.status == "void":
                raise DriverError(
                    f"invoice {input.invoice_id} is void: it cannot be paid",
                    retryable=False,
                    status=400,
                    vendor_code="invoice_not_payable",
                )
            paid = invoice.model_copy(update={"status": "paid", "amount_due": 0})
            self.invoices[input.invoice_id] = paid
            return paid

    @implements(write_off)
    def credit(self, input: CreditNoteIn, call: CallContext) -> CreditNote:
        with self._lock:
            invoice = self.get(InvoiceRef(invoice_id=input.invoice_id), call)
            if not 0 < input.amount <= invoice.amount_due:
                raise DriverError(
                    f"credit note amount {input.amount} must be between 1 and the invoice's "
                    f"balance {invoice.amount_due}",
                    retryable=False,
                    status=400,
                    vendor_code="amount_invalid",
                )
            note = CreditNote(
                credit_note_id=f"cn_{len(self.credit_notes) + 1:04d}",
                invoice_id=input.invoice_id,
                amount=input.amount,
                memo=input.memo,
            )
            self.credit_notes.append(note)
            balance = invoice.amount_due - input.amount
            self.invoices[input.invoice_id] = invoice.model_copy(
                update={"amount_due": balance, "status": "open" if balance else "paid"}
            )
            return note


payments_steps = steps("payments")
# Who the givens act as: the billing system, which issues invoices and records payments.
BILLING = "agent:billing"


def cents(amount: str) -> int:
    """`612.50` (or `1,280.00`) as a number of cents, refusing what is not an amount."""
    try:
        value = Decimal(amount.replace(",", ""))
    except InvalidOperation:
        raise AssertionError(f"`{amount}` is not an amount: write it as 612.50") from None
    return int(value * 100)


@payments_steps.given("an invoice {invoice_id} of {amount} {currency} due {due} for {email}")
def an_invoice(invoice_id: str, amount: str, currency: str, due: str, email: str) -> Given:
    return Given(
        op=create_invoice,
        input={
            "invoice_id": invoice_id,
            "customer_email": email,
            "amount_due": cents(amount),
            "currency": currency.lower(),
            "due_date": due,
        },
        actor=BILLING,
        name="invoice",
    )


@payments_steps.given("the customer pays invoice {invoice_id}")
def the_customer_pays(invoice_id: str) -> Given:
    return Given(op=mark_paid, input={"invoice_id": invoice_id}, actor=BILLING, name="payment")


def _invoice_in(fake: FakePayments, invoice_id: str) -> Invoice:
    found = fake.invoices.get(invoice_id)
    assert found is not None, f"the payments fake has no invoice {invoice_id}"
    return found


@payments_steps.then("invoice {invoice_id} has {n:d} reminders")
def has_reminders(fake: FakePayments, invoice_id: str, n: int) -> None:
    found = _invoice_in(fake, invoice_id).reminders_sent
    assert found == n, f"invoice {invoice_id} has {found} reminders, not {n}"


@payments_steps.then("invoice {invoice_id} has 1 reminder")
def has_one_reminder(fake: FakePayments, invoice_id: str) -> None:
    has_reminders(fake, invoice_id, 1)


@payments_steps.then("invoice {invoice_id} is {status}")
def is_status(fake: FakePayments, invoice_id: str, status: str) -> None:
    found = _invoice_in(fake, invoice_id).status
    assert found == status, f"invoice {invoice_id} is {found}, not {status}"


@payments_steps.then("invoice {invoice_id} has a credit note of {amount} {currency}")
def has_credit_note(fake: FakePayments, invoice_id: str, amount: str, currency: str) -> None:
    notes = [note for note in fake.credit_notes if note.invoice_id == invoice_id]
    found = ", ".join(f"{note.amount / 100:.2f}" for note in notes) or "none"
    assert [note.amount for note in notes] == [cents(amount)], (
        f"invoice {invoice_id} has credit notes of {found}, not one of {amount} {currency}"
    )
    invoice = _invoice_in(fake, invoice_id)
    assert invoice.currency == currency.lower(), (
        f"invoice {invoice_id} is in {invoice.currency.upper()}, not {currency}"
    )


@payments_steps.then("invoice {invoice_id} has credit notes of {amounts}")
def has_credit_notes(fake: FakePayments, invoice_id: str, amounts: str) -> None:
    """`300.00 and 45.50` (or `300.00, 45.50 and 10.00`), in any order: a credit note's lines
    are issued by runs of their own, side by side."""
    wanted = sorted(cents(amount) for amount in re.split(r",\s*|\s+and\s+", amounts.strip()))
    notes = [note for note in fake.credit_notes if note.invoice_id == invoice_id]
    found = sorted(note.amount for note in notes)
    assert found == wanted, (
        f"invoice {invoice_id} has credit notes of "
        f"{', '.join(f'{amount / 100:.2f}' for amount in found) or 'nothing'}, not {amounts}"
    )


payments = Connector(
    "payments",
    ops=[create_invoice, get_invoice, record_reminder, mark_paid, write_off],
    driver=PaymentsDriver,
    fake=FakePayments,
    description="Invoices at the payments provider.",
    steps=payments_steps,
)

"""`Fake.state()`: what a fake vendor holds, as the JSON `remit fakes show` prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import AppError, CallContext, Connector, Driver, DriverError, Fake, Op, implements, op
from remit.connectors.llm import ChatMessage, ChatRequest, FakeLLM, chat_complete
from tests.resource_support import FakeStore, box

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


class Note(BaseModel):
    text: str


class Kept(BaseModel):
    note_id: str


keep = op("notes.notes.keep", effect="write", input=Note, output=Kept)
peek = op("notes.notes.peek", effect="read", input=Note, output=Note)


class FakeNotes(Fake):
    @implements(keep)
    def keep(self, input: Note, call: CallContext) -> Kept:
        return Kept(note_id=f"n_{len(self.effects) + 1}")

    @implements(peek)
    def peek(self, input: Note, call: CallContext) -> Note:
        return input


class NotesDriver(Driver):
    @implements(keep)
    def keep(self, input: Note, call: CallContext) -> Kept:
        raise AssertionError("not reached")

    @implements(peek)
    def peek(self, input: Note, call: CallContext) -> Note:
        raise AssertionError("not reached")


def call_for(which: Op[BaseModel, BaseModel], key: str) -> CallContext:
    return CallContext(
        op=which, idempotency_key=key, run_id="run_1", attempt=1, actor="test", environ={}
    )


def test_a_fake_shows_the_writes_it_applied_by_default() -> None:
    fake = FakeNotes()
    fake.invoke(keep, Note(text="call back"), call_for(keep, "k1"))
    fake.invoke(keep, Note(text="call back"), call_for(keep, "k1"))  # a replay applies nothing
    fake.invoke(peek, Note(text="read"), call_for(peek, "k2"))  # a read is no effect

    state = fake.state()

    assert state == {
        "effects": [
            {
                "op": "notes.notes.keep",
                "idempotency_key": "k1",
                "input": {"text": "call back"},
                "output": {"note_id": "n_1"},
            }
        ]
    }
    json.dumps(state)


def test_the_desks_fakes_show_their_invoices_and_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from acme.connectors.mail import FakeMail, Message, send_message
    from acme.connectors.payments import CreditNoteIn, FakePayments, write_off

    payments = FakePayments()
    payments.invoke(
        write_off,
        CreditNoteIn(invoice_id="inv_1003", amount=1250, memo="goodwill"),
        call_for(write_off, "k1"),
    )
    mail = FakeMail()
    mail.invoke(
        send_message,
        Message(to="a@b.example", subject="Hi", body="..."),
        call_for(send_message, "k2"),
    )

    held = payments.state()
    invoices = {invoice["invoice_id"]: invoice for invoice in held["invoices"]}
    assert invoices["inv_1003"]["amount_due"] == 61_250 - 1250
    assert held["credit_notes"] == [
        {"credit_note_id": "cn_0001", "invoice_id": "inv_1003", "amount": 1250, "memo": "goodwill"}
    ]
    assert mail.state() == {"sent": [{"to": "a@b.example", "subject": "Hi", "body": "..."}]}
    json.dumps(held)


def test_the_payments_fake_issues_an_invoice_once_and_records_its_payment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from acme.connectors.payments import (
        FakePayments,
        InvoiceRef,
        NewInvoice,
        create_invoice,
        mark_paid,
    )

    payments = FakePayments()
    new = NewInvoice(
        invoice_id="inv_2001",
        customer_email="ap@northwind.example",
        amount_due=128_000,
        currency="eur",
        due_date="2026-11-01",
    )
    made = payments.invoke(create_invoice, new, call_for(create_invoice, "k1"))
    again = payments.invoke(create_invoice, new, call_for(create_invoice, "k2"))
    assert made == again  # the same invoice again is the one there
    other = new.model_copy(update={"amount_due": 1})
    with pytest.raises(DriverError, match="an invoice inv_2001 exists already") as taken:
        payments.invoke(create_invoice, other, call_for(create_invoice, "k3"))
    assert taken.value.status == 409

    payments.invoke(mark_paid, InvoiceRef(invoice_id="inv_2001"), call_for(mark_paid, "k4"))
    invoices = {invoice["invoice_id"]: invoice for invoice in payments.state()["invoices"]}
    assert invoices["inv_2001"] == {
        "invoice_id": "inv_2001",
        "customer_email": "ap@northwind.example",
        "amount_due": 0,
        "currency": "eur",
        "due_date": "2026-11-01",
        "status": "paid",
        "reminders_sent": 0,
    }
    assert sorted(invoices) == ["inv_1001", "inv_1002", "inv_1003", "inv_2001"]


def test_the_model_fake_shows_its_requests() -> None:
    fake = FakeLLM(["Dear customer"])
    request = ChatRequest(model="m", messages=[ChatMessage(role="user", content="Draft")])
    fake.invoke(chat_complete, request, call_for(chat_complete, "k1"))

    state = fake.state()

    assert [r["messages"][0]["content"] for r in state["requests"]] == ["Draft"]
    assert state["replies_left"] == 0


def test_a_resource_fake_shows_its_resources_without_write_only_fields() -> None:
    fake = FakeStore()
    fake.tamper(box, "st-1", name="files", size=2, password="hunter2")

    state = fake.state()

    assert state["resources"]["store.box"] == {"st-1": {"name": "files", "size": 2}}
    assert state["resources"]["store.alias"] == {}
    assert "hunter2" not in json.dumps(state)


def test_a_connector_may_leave_out_its_fake() -> None:
    notes = Connector("notes", ops=[keep, peek], driver=NotesDriver)

    assert notes.fake is None


def test_a_fake_that_misses_an_op_is_still_refused() -> None:
    class HalfNotes(Fake):
        @implements(keep)
        def keep(self, input: Note, call: CallContext) -> Kept:
            return Kept(note_id="n")

    with pytest.raises(
        AppError, match=re.escape("its fake HalfNotes does not implement `notes.notes.peek`")
    ):
        Connector("notes", ops=[keep, peek], driver=NotesDriver, fake=HalfNotes)

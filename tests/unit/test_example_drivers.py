"""The example app's drivers speak their vendors' HTTP APIs: checked against a vendor fake
served through httpx's transport (no network)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remit import CallContext, DriverError, MissingCredential

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "examples"))

from acme.connectors.mail import MailDriver, Message, send_message
from acme.connectors.payments import (
    CreditNoteIn,
    InvoiceRef,
    NewInvoice,
    PaymentsDriver,
    ReminderNote,
    create_invoice,
    get_invoice,
    mark_paid,
    record_reminder,
    write_off,
)


class PaymentsVendor:
    """A payments API in memory: invoices, keyed POSTs replayed, every request recorded."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.replies: dict[str, httpx.Response] = {}
        self.fail_with: int | None = None
        due = int(datetime(2026, 10, 15, 12, tzinfo=UTC).timestamp())
        self.invoices: dict[str, dict[str, Any]] = {
            "inv_1": {
                "id": "inv_1",
                "customer_email": "ap@x.example",
                "amount_due": 5000,
                "currency": "eur",
                "due_date": due,
                "status": "open",
                "metadata": {},
            }
        }

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("Authorization") != "Bearer sk_test":
            return httpx.Response(
                401, json={"error": {"message": "bad key", "code": "unauthorized"}}
            )
        if self.fail_with is not None:
            return httpx.Response(
                self.fail_with, json={"error": {"message": "try later", "code": "busy"}}
            )
        if request.url.path == "/v1/credit_notes":
            return self._credit_note(request)
        if request.url.path == "/v1/invoices":
            return self._create(request)
        paying = request.url.path.endswith("/pay")
        invoice_id = request.url.path.removesuffix("/pay").rsplit("/", 1)[-1]
        invoice = self.invoices.get(invoice_id)
        if invoice is None:
            return httpx.Response(
                404,
                json={
                    "error": {
                        "message": f"No such invoice: {invoice_id}",
                        "code": "resource_missing",
                    }
                },
            )
        if request.method == "GET":
            return httpx.Response(200, json=invoice)
        key = request.headers["Idempotency-Key"]
        if key in self.replies:
            return self.replies[key]
        form = dict(httpx.QueryParams(request.content.decode()))
        if paying:
            assert form == {"paid_out_of_band": "true"}
            invoice |= {"status": "paid", "amount_due": 0}
        else:
            invoice["metadata"] = {
                **invoice["metadata"],
                "reminders_sent": form["metadata[reminders_sent]"],
            }
        self.replies[key] = httpx.Response(200, json=invoice)
        return self.replies[key]

    def _create(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["Idempotency-Key"]
        if key not in self.replies:
            form = dict(httpx.QueryParams(request.content.decode()))
            invoice = {
                "id": form["id"],
                "customer_email": form["customer_email"],
                "amount_due": int(form["amount_due"]),
                "currency": form["currency"],
                "due_date": int(form["due_date"]),
                "status": "open",
                "metadata": {},
            }
            self.invoices[form["id"]] = invoice
            self.replies[key] = httpx.Response(200, json=invoice)
        return self.replies[key]

    def _credit_note(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["Idempotency-Key"]
        if key not in self.replies:
            form = dict(httpx.QueryParams(request.content.decode()))
            invoice = self.invoices[form["invoice"]]
            invoice["amount_due"] -= int(form["amount"])
            note = {"id": f"cn_{len(self.replies) + 1}", "invoice": form["invoice"]}
            note |= {"amount": int(form["amount"]), "memo": form["memo"]}
            self.replies[key] = httpx.Response(200, json=note)
        return self.replies[key]


def call(op: Any, environ: dict[str, str], key: str = "run_1:3") -> CallContext:
    return CallContext(
        op=op, idempotency_key=key, run_id="run_1", attempt=1, actor="user:t", environ=environ
    )


def test_payments_get_reads_the_invoice() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    invoice = driver.invoke(
        get_invoice,
        InvoiceRef(invoice_id="inv_1"),
        call(get_invoice, {"PAYMENTS_API_KEY": "sk_test"}),
    )
    assert invoice.model_dump()["amount_due"] == 5000
    assert invoice.model_dump()["due_date"].isoformat() == "2026-10-15"
    assert [(r.method, r.url.path) for r in vendor.requests] == [("GET", "/v1/invoices/inv_1")]


def test_payments_record_sends_the_idempotency_key_and_a_repeat_changes_nothing() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    context = call(record_reminder, {"PAYMENTS_API_KEY": "sk_test"}, key="run_1:4")
    first = driver.invoke(
        record_reminder, ReminderNote(invoice_id="inv_1", reminders_sent=1, note="firm"), context
    )
    again = driver.invoke(
        record_reminder, ReminderNote(invoice_id="inv_1", reminders_sent=1, note="firm"), context
    )
    posts = [r for r in vendor.requests if r.method == "POST"]
    assert [r.headers["Idempotency-Key"] for r in posts] == ["run_1:4", "run_1:4"]
    assert first.model_dump()["reminders_sent"] == 1
    assert again.model_dump()["reminders_sent"] == 1
    assert vendor.invoices["inv_1"]["metadata"]["reminders_sent"] == "1"


def test_payments_create_posts_a_keyed_invoice_once_and_it_reads_back() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    new = NewInvoice(
        invoice_id="inv_9",
        customer_email="ap@y.example",
        amount_due=61250,
        currency="eur",
        due_date=date(2026, 10, 1),
    )
    context = call(create_invoice, {"PAYMENTS_API_KEY": "sk_test"}, key="run_1:1")
    made = driver.invoke(create_invoice, new, context)
    again = driver.invoke(create_invoice, new, context)
    assert made == again
    assert (made.model_dump()["amount_due"], made.model_dump()["status"]) == (61250, "open")
    assert made.model_dump()["due_date"] == date(2026, 10, 1)
    (post, _) = [r for r in vendor.requests if r.method == "POST"]
    assert (post.url.path, post.headers["Idempotency-Key"]) == ("/v1/invoices", "run_1:1")
    assert list(vendor.invoices) == ["inv_1", "inv_9"]  # made once


def test_payments_pay_marks_the_invoice_paid_out_of_band() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    context = call(mark_paid, {"PAYMENTS_API_KEY": "sk_test"}, key="run_1:2")
    paid = driver.invoke(mark_paid, InvoiceRef(invoice_id="inv_1"), context)
    assert (paid.model_dump()["status"], paid.model_dump()["amount_due"]) == ("paid", 0)
    assert [(r.method, r.url.path) for r in vendor.requests] == [("POST", "/v1/invoices/inv_1/pay")]
    with pytest.raises(DriverError, match="No such invoice: inv_404") as missing:
        driver.invoke(mark_paid, InvoiceRef(invoice_id="inv_404"), context)
    assert missing.value.status == 404


def test_payments_write_off_posts_a_keyed_credit_note_once() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    context = call(write_off, {"PAYMENTS_API_KEY": "sk_test"}, key="run_1:3")
    note = CreditNoteIn(invoice_id="inv_1", amount=1200, memo="written off")
    first = driver.invoke(write_off, note, context)
    again = driver.invoke(write_off, note, context)
    assert first.model_dump() == {
        "credit_note_id": "cn_1",
        "invoice_id": "inv_1",
        "amount": 1200,
        "memo": "written off",
    }
    assert again == first
    assert vendor.invoices["inv_1"]["amount_due"] == 3800  # credited once
    posts = [r for r in vendor.requests if r.method == "POST"]
    assert {(r.url.path, r.headers["Idempotency-Key"]) for r in posts} == {
        ("/v1/credit_notes", "run_1:3")
    }


@pytest.mark.parametrize(("status", "retryable"), [(503, True), (429, True), (400, False)])
def test_payments_errors_say_whether_a_retry_can_help(status: int, retryable: bool) -> None:
    vendor = PaymentsVendor()
    vendor.fail_with = status
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    with pytest.raises(DriverError) as failed:
        driver.invoke(
            get_invoice,
            InvoiceRef(invoice_id="inv_1"),
            call(get_invoice, {"PAYMENTS_API_KEY": "sk_test"}),
        )
    assert (failed.value.retryable, failed.value.status, failed.value.vendor_code) == (
        retryable,
        status,
        "busy",
    )


def test_payments_unknown_invoice_is_not_retryable() -> None:
    driver = PaymentsDriver(transport=httpx.MockTransport(PaymentsVendor()))
    with pytest.raises(DriverError) as failed:
        driver.invoke(
            get_invoice,
            InvoiceRef(invoice_id="inv_9"),
            call(get_invoice, {"PAYMENTS_API_KEY": "sk_test"}),
        )
    assert failed.value.retryable is False
    assert failed.value.vendor_code == "resource_missing"
    assert "inv_9" in str(failed.value)


def test_payments_without_its_key_names_the_variable() -> None:
    vendor = PaymentsVendor()
    driver = PaymentsDriver(transport=httpx.MockTransport(vendor))
    with pytest.raises(MissingCredential) as missing:
        driver.invoke(get_invoice, InvoiceRef(invoice_id="inv_1"), call(get_invoice, {}))
    assert missing.value.variable == "PAYMENTS_API_KEY"
    assert "PAYMENTS_API_KEY" in str(missing.value)
    assert vendor.requests == []
    assert PaymentsDriver.credentials == ("PAYMENTS_API_KEY",)


def test_mail_send_posts_the_message_with_the_server_token() -> None:
    seen: list[httpx.Request] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        return httpx.Response(
            200, json={"To": body["To"], "MessageID": "b7bc2f4a", "ErrorCode": 0, "Message": "OK"}
        )

    driver = MailDriver(transport=httpx.MockTransport(vendor))
    environ = {"MAIL_SERVER_TOKEN": "tok", "MAIL_FROM": "ar@us.example"}
    sent = driver.invoke(
        send_message, Message(to="ap@x.example", subject="s", body="b"), call(send_message, environ)
    )
    assert sent.model_dump() == {"message_id": "b7bc2f4a", "to": "ap@x.example"}
    assert seen[0].url.path == "/email"
    assert seen[0].headers["X-Postmark-Server-Token"] == "tok"
    body = json.loads(seen[0].content)
    assert (body["From"], body["Subject"], body["TextBody"]) == ("ar@us.example", "s", "b")


def test_mail_refusal_carries_the_vendor_code() -> None:
    def vendor(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json={"ErrorCode": 406, "Message": "You tried to send to an inactive recipient."}
        )

    driver = MailDriver(transport=httpx.MockTransport(vendor))
    environ = {"MAIL_SERVER_TOKEN": "tok", "MAIL_FROM": "ar@us.example"}
    with pytest.raises(DriverError) as failed:
        driver.invoke(
            send_message,
            Message(to="x@y.example", subject="s", body="b"),
            call(send_message, environ),
        )
    assert (failed.value.retryable, failed.value.status, failed.value.vendor_code) == (
        False,
        422,
        "406",
    )
    assert "inactive recipient" in str(failed.value)

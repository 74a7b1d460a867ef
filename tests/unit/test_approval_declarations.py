"""Approval types and notifiers as an app declares them: refused early, with what to change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, AppError, ApprovalNotice, ApprovalType, LogNotifier, WebhookNotifier
from remit.ops.concluding import conclusion
from remit.ops.runtime import suspended_output
from remit.people.notify import sign


class Draft(BaseModel):
    amount: int


def test_an_approval_type_needs_a_name_and_a_model_class() -> None:
    with pytest.raises(AppError, match="approval type name `Write Off` must be lowercase"):
        ApprovalType("Write Off", draft=Draft)
    with pytest.raises(AppError, match="draft must be a pydantic model class"):
        ApprovalType("write-off", draft=dict)  # type: ignore[arg-type]


class RefundDraft(BaseModel):
    subscription_id: str
    amount: int
    reason: str


def test_an_approval_type_names_the_fields_a_decider_may_change() -> None:
    everything = ApprovalType("refund", draft=RefundDraft)
    assert (everything.editable_fields, everything.read_only) == (
        ("subscription_id", "amount", "reason"),
        (),
    )
    amount = ApprovalType("refund", draft=RefundDraft, editable=["reason", "amount"])
    assert (amount.editable_fields, amount.read_only) == (
        ("amount", "reason"),
        ("subscription_id",),
    )
    assert hash(amount) == hash(
        ApprovalType("refund", draft=RefundDraft, editable=("reason", "amount"))
    )
    assert ApprovalType("refund", draft=RefundDraft, editable=[]).read_only == (
        "subscription_id",
        "amount",
        "reason",
    )
    with pytest.raises(
        AppError,
        match=r"approval type `refund`: editable names `amout`, `memo`, which RefundDraft does "
        r"not have \(its fields: subscription_id, amount, reason\)",
    ):
        ApprovalType("refund", draft=RefundDraft, editable=["amout", "memo"])
    with pytest.raises(
        AppError,
        match=r"editable must list field names of RefundDraft, e.g. "
        r"editable=\['subscription_id'\], not 'amount'",
    ):
        ApprovalType("refund", draft=RefundDraft, editable="amount")


def test_an_app_refuses_a_type_twice_and_what_is_not_a_type() -> None:
    with pytest.raises(AppError, match="declares the approval type `write-off` twice"):
        App(name="a", workflows=[], approvals=[ApprovalType("write-off", Draft)] * 2)
    with pytest.raises(AppError, match="use ApprovalType\\(name, draft=YourModel\\)"):
        App(name="a", workflows=[], approvals=[Draft])  # type: ignore[list-item]


def test_an_app_refuses_two_notifiers_with_one_name() -> None:
    with pytest.raises(AppError, match="two notifiers with one name"):
        App(name="a", workflows=[], notifiers=[LogNotifier(), LogNotifier()])
    hooks = [WebhookNotifier("http://127.0.0.1:9/a"), LogNotifier()]
    assert [n.name for n in App(name="a", workflows=[], notifiers=hooks).notifiers or []] == [
        "webhook",
        "log",
    ]


def test_the_webhook_signature_is_an_hmac_of_timestamp_and_body() -> None:
    # Known answer from `printf '1.{}' | openssl dgst -sha256 -hmac k`.
    assert sign("k", "1", "{}") == (
        "3dd49b2593d0f9a349e9e71c4bde3e2b862c2be4003fe9b4ba81332029310158"
    )


def test_a_notice_is_plain_json() -> None:
    at = datetime(2026, 11, 29, 12, tzinfo=UTC)
    notice = ApprovalNotice("apr_1", "run_1", "w", "k", "t", "title", {"a": 1}, None, at, None)
    assert notice.as_json()["created_at"] == "2026-11-29T12:00:00+00:00"


class _Status:
    """The fields of a DBOS workflow status that `conclusion` reads."""

    def __init__(self, status: str, output: Any = None, error: Any = None) -> None:
        self.status, self.output, self.error = status, output, error


def test_an_attempt_that_ended_at_a_gate_concludes_its_run_waiting() -> None:
    assert conclusion(_Status("SUCCESS", suspended_output("waiting"))) == (  # type: ignore[arg-type]
        "waiting",
        None,
        None,
    )
    assert conclusion(_Status("SUCCESS", {"x": 1})) == ("done", {"x": 1}, None)  # type: ignore[arg-type]

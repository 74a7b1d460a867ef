"""Starting a run from the console, on both databases: the workflows the viewer may start, each
as a form generated from its input model with its bounds shown, an input that does not parse
shown again as typed, a start the policies refuse shown with their reason, and a run started
that opens its page. Scheduled workflows and remit's own have no form. Driven over HTTP
(starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from remit import App, Context, schedule, workflow
from remit.testing import Harness
from tests.console_support import Desk, console_desk, form_of, policies_in, sign_in

ANN, BOB, CAROL, DAVE = "user:ann", "user:bob", "user:carol", "user:dave"

POLICIES = """
permit (principal == User::"carol", action, resource);
// Ann and Bob start refunds; Ann reads them, Bob does not.
permit (principal == User::"ann", action == Action::"start", resource);
permit (principal == User::"bob", action == Action::"start", resource);
permit (principal == User::"ann", action == Action::"read_runs", resource);
// Ann starts refunds of up to 100 only.
forbid (principal == User::"ann", action == Action::"start", resource == Workflow::"refund")
when { context.input has amount && context.input.amount.greaterThan(decimal("100.0")) };
"""


class RefundIn(BaseModel):
    subscription_id: str = Field(pattern=r"^sub_[a-z0-9]+$")
    amount: Decimal = Field(ge=Decimal("0.01"), le=Decimal("500.00"))
    reason: str = Field(max_length=80)


@workflow(name="refund", input=RefundIn)
def refund(ctx: Context, input: RefundIn) -> dict[str, Any]:
    """Refund part of a subscription's charge."""
    return {"refunded": str(input.amount)}


class Nightly(BaseModel):
    day: str = "today"


@workflow(name="nightly", input=Nightly, trigger=schedule("0 3 1 1 *"))
def nightly(ctx: Context, input: Nightly) -> str:
    return input.day


@pytest.fixture
def desk(database_url: str, tmp_path: Path) -> Iterator[Desk]:
    app = App(name="desk", workflows=[refund, nightly])
    with console_desk(app, database_url, policies_in(tmp_path, POLICIES), actor=CAROL) as both:
        yield both


def started(harness: Harness) -> list[dict[str, Any]]:
    return [run.input for run in harness.client.runs.list(workflow="refund")]


def test_the_start_page_lists_what_the_viewer_may_start_by_hand(desk: Desk) -> None:
    harness, http = desk
    sign_in(http, harness, ANN)
    page = http.get("/console/start")
    assert page.status_code == 200
    assert '<a href="/console/start" aria-current="page">Start a run</a>' in page.text
    offered = re.search(r'<ul id="workflows".*?</ul>', page.text, re.S)
    assert offered is not None, page.text
    assert re.findall(r'<a href="/console/start/([^"]+)">', offered.group(0)) == ["refund"]
    assert "Refund part of a subscription&#39;s charge." in offered.group(0)
    # Nor a scheduled workflow, nor remit's own held call, has a form.
    for name, why in (
        ("nightly", "`nightly` starts on its schedule (0 3 1 1 *, UTC), not from the console"),
        ("call", "`call` runs the direct calls a policy holds"),
        ("payroll", "there is no workflow `payroll` (you may start: refund)"),
    ):
        missing = http.get(f"/console/start/{name}")
        assert missing.status_code == 404
        assert why in missing.text.replace("&#39;", "'"), missing.text

    sign_in(http, harness, DAVE)
    none = http.get("/console/start").text
    assert "There is no workflow the policies let you start from here." in none


def test_a_run_is_started_from_a_form_generated_from_its_input_model(desk: Desk) -> None:
    harness, http = desk
    csrf = sign_in(http, harness, ANN)
    form = form_of(http.get("/console/start/refund").text, "start")
    assert 'action="/console/start/refund"' in form
    assert f'<input type="hidden" name="csrf" value="{csrf}">' in form
    amount = re.search(r'<input type="number"[^>]*name="input.amount"[^>]*>', form)
    assert amount is not None, form
    for attribute in ('min="0.01"', 'max="500"', "required"):
        assert attribute in amount.group(0)
    assert '<span class="hint" id="start-input-amount-hint">0.01 to 500.00</span>' in form
    assert '<span class="hint" id="start-input-reason-hint">at most 80 characters</span>' in form
    assert 'pattern="^sub_[a-z0-9]+$"' in form

    given = {"input.subscription_id": "sub_7", "input.amount": "40.00", "input.reason": "late"}
    done = http.post("/console/start/refund", data={"csrf": csrf, **given}, follow_redirects=False)
    assert done.status_code == 303, done.text
    [run] = harness.client.runs.list(workflow="refund")
    assert done.headers["location"] == f"/console/runs/{run.run_id}"
    assert (run.started_by, run.input) == (
        ANN,
        {"subscription_id": "sub_7", "amount": "40.00", "reason": "late"},
    )
    assert f"Started refund: run {run.run_id}." in http.get(done.headers["location"]).text
    assert harness.wait(run.run_id).output == {"refunded": "40.00"}


def test_an_input_that_does_not_parse_or_that_the_policies_refuse_starts_nothing(
    desk: Desk,
) -> None:
    harness, http = desk
    csrf = sign_in(http, harness, ANN)
    typed = {"input.subscription_id": "SUB 7", "input.amount": "900", "input.reason": "late"}
    bad = http.post("/console/start/refund", data={"csrf": csrf, **typed})
    assert bad.status_code == 422
    form = form_of(bad.text, "start")
    assert "String should match pattern" in form
    assert "Input should be less than or equal to 500.00" in form
    for value in ('value="SUB 7"', 'value="900"', 'value="late"'):
        assert value in form  # what was typed is kept
    assert started(harness) == []

    refused = http.post(
        "/console/start/refund",
        data={"csrf": csrf, **typed, "input.subscription_id": "sub_7", "input.amount": "300"},
    )
    assert refused.status_code == 403
    form = form_of(refused.text, "start")
    alert = re.search(r'<div class="refusal" role="alert">(.*?)</div>', form, re.S)
    assert alert is not None, form
    assert 'user:ann may not start Workflow::"refund"' in alert.group(1).replace("&#34;", '"')
    assert 'value="300"' in form
    assert started(harness) == []
    assert [(d.principal, d.action) for d in harness.client.ops.denials()] == [(ANN, "start")]

    unsigned = http.post("/console/start/refund", data={**typed, "input.amount": "30"})
    assert unsigned.status_code == 403
    assert "no valid CSRF token" in unsigned.text
    scheduled = http.post("/console/start/nightly", data={"csrf": csrf})
    assert scheduled.status_code == 404
    assert harness.client.runs.list(workflow="nightly") == []
    assert started(harness) == []


def test_a_run_started_by_someone_who_may_not_read_it_says_so(desk: Desk) -> None:
    harness, http = desk
    csrf = sign_in(http, harness, BOB)
    given = {"input.subscription_id": "sub_8", "input.amount": "300", "input.reason": "late"}
    done = http.post("/console/start/refund", data={"csrf": csrf, **given}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, "/console/start")
    [run] = harness.client.runs.list(workflow="refund")
    assert run.started_by == BOB
    assert (
        f"Started refund: run {run.run_id}. The policies do not let you read its runs."
        in http.get("/console/start").text
    )


def test_a_form_sent_twice_starts_one_run(desk: Desk) -> None:
    harness, http = desk
    csrf = sign_in(http, harness, ANN)
    form = form_of(http.get("/console/start/refund").text, "start")
    key = re.search(r'<input type="hidden" name="start_key" value="([^"]+)">', form)
    assert key is not None, form
    # Each form shown has a key of its own.
    assert key.group(1) not in http.get("/console/start/refund").text
    given = {
        "csrf": csrf,
        "start_key": key.group(1),
        "input.subscription_id": "sub_7",
        "input.amount": "40.00",
        "input.reason": "late",
    }
    first = http.post("/console/start/refund", data=given, follow_redirects=False)
    again = http.post("/console/start/refund", data=given, follow_redirects=False)
    assert first.status_code == again.status_code == 303, again.text
    [run] = harness.client.runs.list(workflow="refund")
    assert first.headers["location"] == again.headers["location"] == f"/console/runs/{run.run_id}"
    # The same form sent with another input starts nothing, and says why.
    other = http.post("/console/start/refund", data={**given, "input.amount": "41.00"})
    assert other.status_code == 409, other.text
    assert "This form was sent already, with another answer, which stands." in other.text
    assert len(harness.client.runs.list(workflow="refund")) == 1

"""The console's inbox and tasks pages, on both databases, driven over HTTP (starlette's
TestClient on `create_api`): a gate's draft as a form generated from its model, decisions with
and without edits, the policies' refusals, double submits, batches all or none, the CSRF check,
the live header, and tasks answered both ways."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from remit import (
    App,
    ApprovalType,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    implements,
    op,
    workflow,
)
from remit.connectors.base import AppliedEffect
from remit.testing import Harness
from tests.console_support import console_of, form_of, hidden, policies_in, sign_in
from tests.support import FAST

ANN, CAROL = "user:ann", "user:carol"

POLICIES = """
permit (principal, action == Action::"start", resource);
// A clerk may reject any refund, and approve one of up to 100 (after edits).
permit (principal in Group::"clerks", action == Action::"decide", resource == ApprovalType::"refund")
when { context.decision == "rejected" || (context.draft has amount && context.draft.amount <= 100) };
permit (principal in Group::"controllers", action in [Action::"decide", Action::"resolve"], resource);
// Both read the runs (a task's page shows its run's input) and the gates.
permit (principal, action in [Action::"read_runs", Action::"read_approvals"], resource);
"""
PRINCIPALS = """
[groups]
clerks = ["user:ann"]
controllers = ["user:carol"]
"""


class RefundIn(BaseModel):
    account: str = "acc-1"
    amount: int = 80
    approver: str | None = None
    expires_in: float | None = None


class RefundDraft(BaseModel):
    amount: int = Field(gt=0, le=500, description="In whole euros")
    memo: str = Field(default="", max_length=200)
    speed: Literal["standard", "express"] = "standard"
    notify: bool = True


@workflow(name="refund", input=RefundIn)
def refund(ctx: Context, input: RefundIn) -> dict[str, Any]:
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.amount} to {input.account}",
        draft=RefundDraft(amount=input.amount, memo="goodwill"),
        assignee=input.approver,
        expires_in=input.expires_in,
    )
    return {"status": decision.status, "draft": decision.draft.model_dump()}


class SubscriptionRefundIn(BaseModel):
    subscription_id: str = "sub_1"
    amount: Decimal = Decimal("299.00")


class SubscriptionRefundDraft(BaseModel):
    subscription_id: str
    amount: Decimal = Field(ge=Decimal("0.01"), le=Decimal("500.00"))
    reason: str = Field(max_length=80)


@workflow(name="subscription-refund", input=SubscriptionRefundIn)
def subscription_refund(ctx: Context, input: SubscriptionRefundIn) -> dict[str, Any]:
    proposed = SubscriptionRefundDraft(
        subscription_id=input.subscription_id, amount=input.amount, reason="double charge"
    )
    title = f"Refund {input.amount} on {input.subscription_id}"
    decision = ctx.approval("refund", type="subscription-refund", title=title, draft=proposed)
    return {"status": decision.status, "draft": decision.draft.model_dump(mode="json")}


class LetterIn(BaseModel):
    to: str


class Letter(BaseModel):
    letter_id: str
    pages: int = Field(default=1, ge=1)


send_letter = op(
    "post.letters.send",
    effect="write",
    input=LetterIn,
    output=Letter,
    retry=FAST,
    description="Post a letter",
)


class PostDriver(Driver):
    @implements(send_letter)
    def send(self, input: LetterIn, call: CallContext) -> Letter:
        raise DriverError("no live post office in tests", retryable=False)


class FakePost(Fake):
    """A post office whose answer to every letter is lost after it was sent."""

    @implements(send_letter)
    def send(self, input: LetterIn, call: CallContext) -> Letter:
        return Letter(letter_id=f"lt_{len(self.effects) + 1}")

    def _record(self, effect: AppliedEffect) -> None:
        super()._record(effect)
        raise DriverError("the post office did not answer in time", retryable=True, status=504)


post = Connector("post", ops=[send_letter], driver=PostDriver, fake=FakePost)


@workflow(name="mail", input=LetterIn, uses=[send_letter])
def mail(ctx: Context, input: LetterIn) -> dict[str, Any]:
    sent = ctx.call(send_letter, to=input.to)
    return {"letter": sent.letter_id, "pages": sent.pages}


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    policies = policies_in(tmp_path, POLICIES, PRINCIPALS)
    app = App(
        name="desk",
        workflows=[refund, mail],
        connectors=[post],
        approvals=[ApprovalType("refund", draft=RefundDraft)],
    )
    with Harness(app, database_url=database_url, actor=CAROL, policies=policies) as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with console_of(harness) as client:
        yield client


def gate_of(harness: Harness, **input: Any) -> str:
    run = harness.start("refund", input, by=ANN)
    return harness.gate(run.run_id).id


def post_gate(http: TestClient, approval_id: str, **fields: str) -> Any:
    page = http.get("/console/inbox").text
    form = form_of(page, f"gate-{approval_id}")
    data = {
        "csrf": hidden(form, "csrf"),
        "key": hidden(form, "key"),
        "draft.amount": hidden(form, "draft.amount"),
        "draft.memo": "goodwill",
        "draft.speed": "standard",
        "draft.notify": "true",
        "reason": "",
        "decision": "approved",
        **fields,
    }
    return http.post(f"/console/inbox/{approval_id}", data=data, follow_redirects=False)


def test_a_gate_is_a_form_generated_from_its_draft_model(
    http: TestClient, harness: Harness
) -> None:
    approval_id = gate_of(harness, expires_in=3 * 3600 + 20 * 60 + 30)
    sign_in(http, harness, ANN)
    page = http.get("/console/inbox")
    assert page.status_code == 200
    form = form_of(page.text, f"gate-{approval_id}")
    assert 'class="gate card"' in form
    assert f'action="/console/inbox/{approval_id}"' in form
    amount = re.search(r'<input type="number"[^>]*name="draft.amount"[^>]*>', form)
    assert amount is not None, form
    for attribute in ('value="80"', "required", 'min="1"', 'max="500"', 'step="1"'):
        assert attribute in amount.group(0)
    assert "In whole euros" in form
    # Its bounds in words, before anything is sent.
    hint = f'<span class="hint" id="gate-{approval_id}-draft-amount-hint">'
    assert f"{hint}more than 0, at most 500</span>" in form
    assert re.search(
        r'<input type="text"[^>]*name="draft.memo" value="goodwill"[^>]*maxlength="200"', form
    )
    assert "at most 200 characters</span>" in form
    assert '<select id="gate-' in form
    assert '<option value="standard" selected>standard</option>' in form
    assert '<option value="express">express</option>' in form
    assert re.search(r'type="checkbox"[^>]*name="draft.notify" value="true" checked', form)
    assert f'<label for="reason-{approval_id}">Decision note</label>' in form
    assert 'name="reason"' in form
    assert 'name="decision" value="approved">Approve</button>' in form
    assert 'name="decision" value="rejected" formnovalidate>Reject</button>' in form
    assert "expires in 3 h 20 min" in form
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+"[^>]*>expires in', form)
    assert "refund" in form  # its workflow
    assert 'id="batch"' not in page.text  # one gate: no batch form to take the page's top
    assert 'hx-get="/console/inbox/live?shown=' in page.text
    assert 'hx-trigger="every 5s"' in page.text


def test_an_edit_that_does_not_parse_is_shown_again_and_decides_nothing(
    http: TestClient, harness: Harness
) -> None:
    approval_id = gate_of(harness)
    sign_in(http, harness, ANN)
    answer = post_gate(http, approval_id, **{"draft.amount": "600", "draft.memo": "typed"})
    assert answer.status_code == 422
    form = form_of(answer.text, f"gate-{approval_id}")
    error_id = f"gate-{approval_id}-draft-amount-error"
    assert (
        f'<span class="error" id="{error_id}">Input should be less than or equal to 500</span>'
        in form
    )
    hint_id, help_id = (f"gate-{approval_id}-draft-amount-{part}" for part in ("hint", "help"))
    assert f'aria-describedby="{error_id} {hint_id} {help_id}"' in form
    assert 'value="600"' in form  # what was typed is kept
    assert 'value="typed"' in form
    assert harness.approvals.get(approval_id).status == "pending"


def test_an_edited_draft_is_approved_as_edited(http: TestClient, harness: Harness) -> None:
    approval_id = gate_of(harness)
    sign_in(http, harness, ANN)
    answer = post_gate(
        http, approval_id, **{"draft.amount": "60", "draft.speed": "express", "reason": "ok"}
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/inbox"
    decided = harness.approvals.get(approval_id)
    assert (decided.status, decided.decided_by, decided.decided_via) == ("approved", ANN, "console")
    assert decided.reason == "ok"
    assert decided.edited_draft_json == {
        "amount": 60,
        "memo": "goodwill",
        "speed": "express",
        "notify": True,
    }
    run = harness.wait(decided.run_id)
    assert run.output["draft"]["amount"] == 60
    shown = http.get("/console/inbox")
    # What was approved, not the title the run made from the amount before the edit.
    assert (
        f"Approved with edits (amount 80 → 60; speed standard → express): Refund 80 to acc-1 "
        f"({approval_id})" in shown.text
    )
    assert f"gate-{approval_id}" not in shown.text


def test_a_form_sent_twice_decides_once(http: TestClient, harness: Harness) -> None:
    approval_id = gate_of(harness)
    sign_in(http, harness, ANN)
    page = http.get("/console/inbox").text
    form = form_of(page, f"gate-{approval_id}")
    data = {
        "csrf": hidden(form, "csrf"),
        "key": hidden(form, "key"),
        "draft.amount": "80",
        "draft.memo": "goodwill",
        "draft.speed": "standard",
        "draft.notify": "true",
        "decision": "approved",
    }
    first = http.post(f"/console/inbox/{approval_id}", data=data, follow_redirects=False)
    second = http.post(f"/console/inbox/{approval_id}", data=data, follow_redirects=False)
    assert (first.status_code, second.status_code) == (303, 303)
    assert "already decided by this form" in http.get("/console/inbox").text
    decided = harness.approvals.get(approval_id)
    assert decided.status == "approved"
    assert decided.edited_draft_json is None  # unchanged: no edits
    assert [a["action"] for a in harness.approvals.audit(approval_id)] == ["approval.approved"]

    # Back, then the other button: the same form's key with another answer changes nothing.
    other = http.post(
        f"/console/inbox/{approval_id}", data={**data, "decision": "rejected", "reason": "no"}
    )
    assert other.status_code == 409
    assert "This form was sent already, with another answer, which stands." in other.text
    assert harness.approvals.get(approval_id).status == "approved"


def test_a_decision_the_policies_refuse_shows_their_reason_and_changes_nothing(
    http: TestClient, harness: Harness
) -> None:
    approval_id = gate_of(harness)
    sign_in(http, harness, ANN)
    answer = post_gate(http, approval_id, **{"draft.amount": "300"})
    assert answer.status_code == 403
    form = form_of(answer.text, f"gate-{approval_id}")
    refusal = re.search(r'<div class="refusal" role="alert">(.*?)</div>', form, re.S)
    assert refusal is not None, form
    assert "user:ann may not decide" in refusal.group(1)
    assert harness.approvals.get(approval_id).status == "pending"
    assert [d.principal for d in harness.client.ops.denials()] == [ANN]
    # Rejecting is allowed, and needs no valid draft.
    rejected = post_gate(http, approval_id, decision="rejected", **{"draft.amount": "x"})
    assert rejected.status_code == 303
    assert harness.approvals.get(approval_id).status == "rejected"


def test_the_inbox_holds_only_what_the_viewer_may_decide(
    http: TestClient, harness: Harness
) -> None:
    mine = gate_of(harness)
    carols = gate_of(harness, approver=CAROL)
    big = gate_of(harness, amount=400)  # ann may reject it, not approve it as it stands
    sign_in(http, harness, ANN)
    page = http.get("/console/inbox").text
    assert f'id="gate-{mine}"' in page
    assert f'id="gate-{big}"' in page
    assert f'id="gate-{carols}"' not in page
    assert "The policies do not let you approve this draft as it stands" in form_of(
        page, f"gate-{big}"
    )
    assert "3 approvals wait" not in page
    assert "2 approvals wait for you." in page
    sign_in(http, harness, CAROL)
    page = http.get("/console/inbox").text
    assert all(f'id="gate-{i}"' in page for i in (mine, carols, big))
    # Oldest first.
    assert page.index(f'id="gate-{mine}"') < page.index(f'id="gate-{carols}"')


def test_a_batch_is_decided_all_or_none(http: TestClient, harness: Harness) -> None:
    first, second = gate_of(harness), gate_of(harness)
    big = gate_of(harness, amount=400)
    sign_in(http, harness, ANN)
    batch = form_of(http.get("/console/inbox").text, "batch")
    assert all(f'name="ids" value="{i}"' in batch for i in (first, second, big))
    assert '<label for="batch-reason">Decision note</label>' in batch
    data = {"csrf": hidden(batch, "csrf"), "key": hidden(batch, "key"), "decision": "approved"}
    refused = http.post(
        "/console/inbox/batch", data={**data, "ids": [first, big]}, follow_redirects=False
    )
    assert refused.status_code == 403
    assert f"{big}: user:ann may not decide" in refused.text
    assert [harness.approvals.get(i).status for i in (first, second, big)] == ["pending"] * 3

    done = http.post(
        "/console/inbox/batch", data={**data, "ids": [first, second]}, follow_redirects=False
    )
    assert done.status_code == 303
    assert [harness.approvals.get(i).status for i in (first, second, big)] == [
        "approved",
        "approved",
        "pending",
    ]
    assert harness.approvals.get(first).batch_id == harness.approvals.get(second).batch_id
    assert "Approved 2 approvals" in http.get("/console/inbox").text
    nothing = http.post("/console/inbox/batch", data={**data, "key": "k2"})
    assert nothing.status_code == 422
    assert "Select at least one approval" in nothing.text


def test_a_post_without_its_csrf_token_is_refused(http: TestClient, harness: Harness) -> None:
    approval_id = gate_of(harness)
    sign_in(http, harness, ANN)
    answer = post_gate(http, approval_id, csrf="")
    assert answer.status_code == 403
    assert "no valid CSRF token" in answer.text
    batch = http.post("/console/inbox/batch", data={"ids": approval_id, "decision": "approved"})
    assert batch.status_code == 403
    assert harness.approvals.get(approval_id).status == "pending"


def test_the_live_header_counts_and_names_new_gates(http: TestClient, harness: Harness) -> None:
    first = gate_of(harness)
    sign_in(http, harness, ANN)
    page = http.get("/console/inbox").text
    live = re.search(r'hx-get="(/console/inbox/live\?shown=[^"]+)"', page)
    assert live is not None
    url = live.group(1)
    assert first in url
    assert "1 approval waits for you." in http.get(url).text
    gate_of(harness, amount=20)
    fragment = http.get(url).text
    assert fragment.startswith('<div id="inbox-live"')
    assert "2 approvals wait for you." in fragment
    assert "New since this page was shown: <strong>Refund 20 to acc-1</strong>" in fragment
    harness.decide(first, by=CAROL)
    assert f"Decided or withdrawn since this page was shown: <code>{first}</code>" in (
        http.get(url).text
    )
    # Signed out, the poll asks htmx to load the sign-in page.
    http.cookies.clear()
    out = http.get(url, headers={"HX-Request": "true"}, follow_redirects=False)
    assert out.status_code == 204
    assert out.headers["HX-Redirect"].startswith("/console/sign-in")


@pytest.fixture
def subscriptions(database_url: str) -> Iterator[Harness]:
    """A subscription desk without policies, whose refund type lets a decider change only the
    amount."""
    app = App(
        name="subscriptions",
        workflows=[subscription_refund],
        approvals=[
            ApprovalType("subscription-refund", draft=SubscriptionRefundDraft, editable=["amount"])
        ],
    )
    with Harness(app, database_url=database_url, actor=CAROL) as running:
        yield running


@pytest.fixture
def desk_http(subscriptions: Harness) -> Iterator[TestClient]:
    with console_of(subscriptions) as client:
        yield client


def subscription_gate(http: TestClient, harness: Harness) -> tuple[str, str]:
    """A subscription's refund waiting at its gate, and its form in carol's inbox."""
    approval_id = harness.gate(harness.start("subscription-refund", {}, by=CAROL).run_id).id
    sign_in(http, harness, CAROL)
    return approval_id, form_of(http.get("/console/inbox").text, f"gate-{approval_id}")


def test_fields_the_type_keeps_are_shown_read_only_and_the_bounds_in_words(
    desk_http: TestClient, subscriptions: Harness
) -> None:
    approval_id, form = subscription_gate(desk_http, subscriptions)
    assert "You may change Amount; the rest stays as the run proposed it." in form
    read_only = re.search(r'<dl class="facts read-only">(.*?)</dl>', form, re.S)
    assert read_only is not None, form
    shown = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", read_only.group(1))).strip()
    assert shown == "Subscription id sub_1 Reason double charge"
    assert 'name="draft.subscription_id"' not in form
    assert 'name="draft.reason"' not in form
    amount = re.search(r'<input type="number"[^>]*name="draft.amount"[^>]*>', form)
    assert amount is not None, form
    for attribute in ('value="299.00"', 'min="0.01"', 'max="500"', 'step="any"'):
        assert attribute in amount.group(0)
    assert (
        f'<span class="hint" id="gate-{approval_id}-draft-amount-hint">0.01 to 500.00</span>'
        in (form)
    )
    # The draft's own `reason` and the decision's note are told apart.
    assert "<dt>Reason</dt>" in form
    assert f'<label for="reason-{approval_id}">Decision note</label>' in form
    assert ">Reason</label>" not in form


def test_an_edit_to_a_kept_field_is_refused_and_an_allowed_one_approved_as_edited(
    desk_http: TestClient, subscriptions: Harness
) -> None:
    http, harness = desk_http, subscriptions
    approval_id, form = subscription_gate(http, harness)
    data = {
        "csrf": hidden(form, "csrf"),
        "key": hidden(form, "key"),
        "draft.amount": "250.00",
        "reason": "partial refund",
        "decision": "approved",
    }
    # A post that changes a field the type keeps (no browser shows an input for it).
    forged = http.post(
        f"/console/inbox/{approval_id}", data={**data, "draft.subscription_id": "sub_2"}
    )
    assert forged.status_code == 409
    refusal = form_of(forged.text, f"gate-{approval_id}")
    assert (
        "has an edit changing subscription_id, which approval type `subscription-refund` keeps "
        "as the run proposed it: a decider may change only amount" in html.unescape(refusal)
    )
    assert harness.approvals.get(approval_id).status == "pending"

    done = http.post(f"/console/inbox/{approval_id}", data=data, follow_redirects=False)
    assert done.status_code == 303, done.text
    decided = harness.approvals.get(approval_id)
    assert decided.status == "approved"
    assert decided.edited_draft_json == {
        "subscription_id": "sub_1",
        "amount": "250.00",
        "reason": "double charge",
    }
    assert decided.reason == "partial refund"
    assert harness.wait(decided.run_id).output["draft"]["amount"] == "250.00"
    assert (
        f"Approved with edits (amount 299.00 → 250.00): Refund 299.00 on sub_1 ({approval_id})"
        in http.get("/console/inbox").text
    )


def uncertain_task(harness: Harness) -> tuple[str, str]:
    run = harness.start("mail", {"to": "ann@example.com"}, by=CAROL)
    return run.run_id, harness.task(run.run_id).id


def test_a_task_said_to_have_happened_carries_its_run_on_with_the_output(
    http: TestClient, harness: Harness
) -> None:
    run_id, task_id = uncertain_task(harness)
    sign_in(http, harness, CAROL)
    page = http.get("/console/tasks")
    assert page.status_code == 200
    form = form_of(page.text, f"task-{task_id}")
    assert 'class="task card"' in form
    assert "post.letters.send" in form
    assert f"{run_id}:1" in form  # the ledger key
    assert "vendor post): Post a letter" in form
    # What the write was: what the call was sent, and the input of the run that made it.
    sent = re.search(r'<pre class="input sent">([^<]*)</pre>', form)
    assert sent is not None
    assert json.loads(html.unescape(sent.group(1))) == harness.tasks.get(task_id).input
    assert harness.tasks.get(task_id).input is not None
    shown = re.search(r'<pre class="input">([^<]*)</pre>', form)
    assert shown is not None
    assert json.loads(html.unescape(shown.group(1))) == {"to": "ann@example.com"}
    assert re.search(r'<input type="text"[^>]*name="output.letter_id"[^>]*required', form)
    assert re.search(r'<input type="number"[^>]*name="output.pages" value="1"[^>]*min="1"', form)
    assert 'name="done" value="yes">It happened</button>' in form
    assert 'name="done" value="no" formnovalidate>It did not happen</button>' in form
    data = {"csrf": hidden(form, "csrf"), "key": hidden(form, "key"), "done": "yes"}

    bad = http.post(f"/console/tasks/{task_id}", data={**data, "output.pages": "0"})
    assert bad.status_code == 422
    again = form_of(bad.text, f"task-{task_id}")
    assert "Field required" in again
    assert "Input should be greater than or equal to 1" in again
    assert harness.tasks.get(task_id).status == "open"

    done = http.post(
        f"/console/tasks/{task_id}",
        data={**data, "output.letter_id": "lt_1", "output.pages": "2"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    task = harness.tasks.get(task_id)
    assert (task.status, task.resolved_by, task.output) == (
        "done",
        CAROL,
        {"letter_id": "lt_1", "pages": 2},
    )
    finished = harness.wait(run_id)
    assert (finished.status, finished.output) == ("done", {"letter": "lt_1", "pages": 2})
    assert "it happened" in http.get("/console/tasks").text


def test_a_task_said_not_to_have_happened_fails_its_run(http: TestClient, harness: Harness) -> None:
    run_id, task_id = uncertain_task(harness)
    sign_in(http, harness, ANN)  # a clerk may not answer tasks
    form = form_of(http.get("/console/tasks").text, f"task-{task_id}")
    data = {"csrf": hidden(form, "csrf"), "key": hidden(form, "key"), "done": "no"}
    refused = http.post(f"/console/tasks/{task_id}", data=data)
    assert refused.status_code == 403
    assert "user:ann may not resolve" in form_of(refused.text, f"task-{task_id}")
    assert harness.tasks.get(task_id).status == "open"

    sign_in(http, harness, CAROL)
    form = form_of(http.get("/console/tasks").text, f"task-{task_id}")
    data = {"csrf": hidden(form, "csrf"), "key": hidden(form, "key"), "done": "no"}
    answer = http.post(f"/console/tasks/{task_id}", data=data, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    assert harness.tasks.get(task_id).status == "not_done"
    assert harness.wait(run_id).status == "failed"
    assert f'id="task-{task_id}"' not in http.get("/console/tasks").text

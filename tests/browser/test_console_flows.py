"""The console's flows in Chromium, each with JavaScript and without, on SQLite and Postgres:
signing in by a link, deciding gates one by one and in a batch, answering a task, cancelling
and retrying runs, a refusal by the policies, the CSRF check, and signing out.

The server is a real `remit serve --worker` (see conftest.py), so a decided gate or an answered
task lets its run finish on the worker while the browser watches. What a test checks is what a
person sees on the page, and, behind it, the run's row the page speaks of.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from playwright.sync_api import Browser, Page, Response, expect

from tests.browser.conftest import Console, Shots, sign_in

pytestmark = pytest.mark.browser


def _payment(console: Console, amount: str = "120.50", account: str = "acme") -> tuple[str, str]:
    """A payment run waiting at its gate: (run id, approval id)."""
    run_id = console.start_run("payment", {"account": account, "amount": amount})
    console.wait_for(run_id, "waiting")
    (approval,) = console.client.approvals.list(run_id=run_id, status="pending")
    return run_id, approval.id


def _account(name: str) -> str:
    """An account no other test uses: the fake bank remembers accounts for the whole module."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def _posted(response: Response) -> bool:
    return response.request.method == "POST"


def _status_becomes(page: Page, console: Console, run_id: str, status: str) -> None:
    """Wait for the run to be `status`, then see the run page say so."""
    console.wait_for(run_id, status)
    page.goto(f"{console.url}/console/runs/{run_id}")
    expect(page.locator("#status")).to_have_text(status)


def test_a_sign_in_link_opens_the_runs_page(page: Page, console: Console, shoot: Shots) -> None:
    run_id = console.start_run("statement", {"account": _account("initech")})
    page.goto(f"{console.url}/console/runs")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next="))
    shoot(page, "sign-in")

    printed = console.remit("login-link", "--for", "user:ann", "--base-url", console.url)
    link = printed.splitlines()[-1].strip()
    assert link.startswith(f"{console.url}/console/sign-in?code=rml_"), printed
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(re.compile(r"/console/runs$"))
    expect(page.locator("header #principal")).to_have_text("user:ann")
    expect(page.locator(f'table#runs a[href="/console/runs/{run_id}"]')).to_be_visible()
    shoot(page, "runs")
    # The link was used up by the button's post.
    page.context.clear_cookies()
    page.goto(link)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".refusal")).to_contain_text("used already")
    expect(page.locator("header #principal")).to_have_count(0)


def test_an_edit_out_of_bounds_is_refused_in_place_and_a_good_one_finishes_the_run(
    page: Page, console: Console, shoot: Shots
) -> None:
    run_id, approval_id = _payment(console)
    sign_in(page, console)
    page.goto(f"{console.url}/console/inbox")
    gate = page.locator(f"form.gate#gate-{approval_id}")
    expect(gate).to_be_visible()
    expect(gate.locator('[name="draft.amount"]')).to_have_value("120.50")
    shoot(page, "inbox")

    # The browser's own check, drawn from the draft model's bounds, holds the form back.
    gate.locator('[name="draft.amount"]').fill("900")
    gate.get_by_role("button", name="Approve", exact=True).click()
    expect(gate.locator('[name="draft.amount"]:invalid')).to_have_count(1)
    assert console.client.approvals.get(approval_id).status == "pending"

    # Posted without the browser's check, the model refuses it, and says why beside the field.
    gate.evaluate("form => { form.noValidate = true }")
    with page.expect_response(_posted) as refused:
        gate.get_by_role("button", name="Approve", exact=True).click()
    assert refused.value.status == 422
    gate = page.locator(f"form.gate#gate-{approval_id}")
    expect(gate.locator(".error")).to_contain_text("Input should be less than or equal to 500")
    assert console.client.approvals.get(approval_id).status == "pending"
    assert console.client.runs.get(run_id).status == "waiting"

    gate.locator('[name="draft.amount"]').fill("450")
    gate.locator('[name="draft.speed"]').select_option("express")
    gate.locator('[name="reason"]').fill("Checked against the invoice")
    with page.expect_response(_posted) as approved:
        gate.get_by_role("button", name="Approve", exact=True).click()
    assert approved.value.status == 303
    expect(page.locator("#flash")).to_be_visible()
    expect(page.locator(f"#gate-{approval_id}")).to_have_count(0)

    decided = console.client.approvals.get(approval_id)
    assert decided.status == "approved"
    assert decided.decided_by == "user:ann"
    assert decided.decided_via is not None
    assert str(decided.edited_draft.amount) == "450"
    _status_becomes(page, console, run_id, "done")
    output = console.client.runs.get(run_id).output
    assert output is not None
    assert output["outcome"] == "paid"
    (sent,) = [r for r in console.client.calls.ledger(run_id) if r.op_id == "bank.payments.send"]
    assert sent.status == "ok"
    assert sent.output["amount"] == "450"
    assert sent.output["note"] == "express: Invoice for Acme"
    # The decision forked the run onto its next attempt: the steps before the gate were copied.
    expect(page.locator("svg#timeline rect.step.copied").first).to_be_attached()
    expect(page.locator("svg#timeline rect.step.ran").first).to_be_attached()
    expect(page.locator("table#ledger")).to_contain_text("bank.payments.send")
    shoot(page, "run")


def test_two_gates_are_approved_in_one_batch(page: Page, console: Console) -> None:
    first_run, first = _payment(console, "10", "globex")
    second_run, second = _payment(console, "20", "umbrella")
    other_run, other = _payment(console, "30", "hooli")
    sign_in(page, console)
    page.goto(f"{console.url}/console/inbox")

    batch = page.locator("form#batch")
    batch.locator(f'input[name="ids"][value="{first}"]').check()
    batch.locator(f'input[name="ids"][value="{second}"]').check()
    with page.expect_response(_posted) as posted:
        batch.get_by_role("button", name="Approve selected").click()
    assert posted.value.status == 303
    expect(page.locator("#flash")).to_be_visible()
    expect(page.locator(f"#gate-{first}")).to_have_count(0)
    expect(page.locator(f"#gate-{second}")).to_have_count(0)
    expect(page.locator(f"#gate-{other}")).to_be_visible()

    assert console.client.approvals.get(first).status == "approved"
    assert console.client.approvals.get(second).status == "approved"
    assert console.client.approvals.get(other).status == "pending"
    assert console.wait_for(first_run, "done").output["outcome"] == "paid"  # type: ignore[index]
    assert console.wait_for(second_run, "done").output["outcome"] == "paid"  # type: ignore[index]
    assert console.client.runs.get(other_run).status == "waiting"


def test_a_task_answered_it_happened_carries_its_run_on(
    page: Page, console: Console, shoot: Shots
) -> None:
    run_id = console.start_run("letter", {"to": "Wile E. Coyote", "text": "Your order shipped."})
    console.wait_for(run_id, "waiting")
    (task,) = console.client.tasks.list(run_id=run_id, status="open")
    sign_in(page, console)
    page.goto(f"{console.url}/console/ledger?run={run_id}")
    expect(page.locator("table#ledger tr.uncertain")).to_contain_text("bank.letters.post")

    page.goto(f"{console.url}/console/tasks")
    form = page.locator(f"form.task#task-{task.id}")
    expect(form).to_be_visible()
    shoot(page, "tasks")
    form.locator('[name="output.letter_id"]').fill("ltr_77")
    form.locator('[name="output.pages"]').fill("2")
    with page.expect_response(_posted) as posted:
        form.get_by_role("button", name="It happened").click()
    assert posted.value.status == 303
    expect(page.locator("#flash")).to_be_visible()
    expect(page.locator(f"#task-{task.id}")).to_have_count(0)

    answered = console.client.tasks.get(task.id)
    assert answered.status == "done"
    _status_becomes(page, console, run_id, "done")
    assert console.client.runs.get(run_id).output == {"letter_id": "ltr_77", "pages": 2}


def _press(page: Page, button: str) -> Response:
    """Press a button that posts, accepting a confirmation if the page asks for one."""
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_response(_posted) as posted:
        page.get_by_role("button", name=button).click()
    return posted.value


def test_a_run_is_cancelled_and_retried(page: Page, console: Console) -> None:
    run_id, approval_id = _payment(console, "75", "stark")
    sign_in(page, console)
    page.goto(f"{console.url}/console/runs/{run_id}")
    expect(page.locator("#status")).to_have_text("waiting")
    expect(page.get_by_role("button", name="Retry run")).to_have_count(0)

    assert _press(page, "Cancel run").status == 303
    expect(page.locator("#flash")).to_be_visible()
    _status_becomes(page, console, run_id, "cancelled")
    assert console.client.approvals.get(approval_id).status == "cancelled"
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)

    assert _press(page, "Retry run").status == 303
    expect(page.locator("#flash")).to_be_visible()
    # The retry carries on from the gate, which waits again for a decision.
    _status_becomes(page, console, run_id, "waiting")
    pending = console.client.approvals.list(run_id=run_id, status="pending")
    assert [a.id for a in pending] == [approval_id]
    assert console.client.runs.get(run_id).attempt == 2


def test_a_failed_run_is_retried_to_the_end(page: Page, console: Console) -> None:
    account = _account("wayne")
    run_id = console.start_run("statement", {"account": account})
    console.wait_for(run_id, "failed")
    sign_in(page, console)
    page.goto(f"{console.url}/console/runs/{run_id}")
    expect(page.locator("#status")).to_have_text("failed")
    expect(page.locator("svg#timeline rect.step.failed")).to_have_count(1)

    assert _press(page, "Retry run").status == 303
    expect(page.locator("#flash")).to_be_visible()
    _status_becomes(page, console, run_id, "done")
    assert console.client.runs.get(run_id).output == {"account": account, "lines": 12}
    # The retry is a new attempt: the account's read before the failed step was copied.
    expect(page.locator("svg#timeline rect.step.copied")).to_have_count(1)


def test_a_refused_decision_shows_the_policy_reason_and_leaves_the_gate(
    page: Page, console: Console
) -> None:
    # Bob may approve a payment of up to 100 (policies/payments.cedar), so the gate is his to
    # decide; raised past that, his approval is refused.
    run_id, approval_id = _payment(console, "60", "cyberdyne")
    sign_in(page, console, "user:bob")
    page.goto(f"{console.url}/console/inbox")
    gate = page.locator(f"form.gate#gate-{approval_id}")
    gate.locator('[name="draft.amount"]').fill("300")
    with page.expect_response(_posted) as refused:
        gate.get_by_role("button", name="Approve", exact=True).click()
    assert refused.value.status == 403
    refusal = page.locator(".refusal")
    expect(refusal).to_contain_text("user:bob may not decide")
    expect(refusal).to_contain_text("forbidden by policies/payments.cedar:8")

    assert console.client.approvals.get(approval_id).status == "pending"
    assert console.client.runs.get(run_id).status == "waiting"
    denied = [d for d in console.client.ops.denials() if d.principal == "user:bob"]
    assert any(d.action == "decide" for d in denied)


def test_a_form_posted_without_its_csrf_token_is_refused(page: Page, console: Console) -> None:
    run_id, approval_id = _payment(console, "15", "tyrell")
    sign_in(page, console)
    decide = f"{console.url}/console/inbox/{approval_id}"

    # The request carries the session's cookie, as a form forged on another site would.
    for csrf in ({}, {"csrf": "not-the-token"}):
        form = {"decision": "approved", "draft.amount": "15", "draft.note": "x", **csrf}
        refused = page.request.post(decide, form=form, max_redirects=0)
        assert refused.status == 403
        assert "no valid CSRF token" in refused.text()
    assert console.client.approvals.get(approval_id).status == "pending"
    assert console.client.runs.get(run_id).status == "waiting"
    page.goto(f"{console.url}/console/inbox")
    expect(page.locator(f"form.gate#gate-{approval_id}")).to_be_visible()


def test_signing_out_ends_the_session(page: Page, console: Console, browser: Browser) -> None:
    sign_in(page, console)
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies if c["name"] == "remit_session"] == ["remit_session"]

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/console/sign-in$"))
    expect(page.locator("#flash")).to_contain_text("user:ann signed out.")
    page.goto(f"{console.url}/console/runs")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/runs$"))

    # The cookie as it was before signing out, in another browser, works no more.
    elsewhere = browser.new_context()
    try:
        elsewhere.add_cookies(cookies)  # type: ignore[arg-type]
        other = elsewhere.new_page()
        other.goto(f"{console.url}/console/runs")
        expect(other).to_have_url(re.compile(r"/console/sign-in\?next="))
    finally:
        elsewhere.close()


def test_the_ledger_budgets_operations_and_resources_pages(
    page: Page, console: Console, shoot: Shots
) -> None:
    run_id = console.start_run("statement", {"account": _account("soylent")})
    console.wait_for(run_id, "failed")
    sign_in(page, console)

    page.goto(f"{console.url}/console/ledger")
    expect(page.locator("table#ledger")).to_contain_text("bank.statements.fetch")
    shoot(page, "ledger")

    page.goto(f"{console.url}/console/budgets")
    expect(page.locator("svg.budget-chart")).to_have_count(1)
    shoot(page, "budgets")

    page.goto(f"{console.url}/console/resources")
    expect(page.locator("h1")).to_be_visible()
    shoot(page, "resources")

    page.goto(f"{console.url}/console/operations")
    shoot(page, "operations")
    assert _press(page, "Pause").status == 303
    try:
        expect(page.locator("#flash")).to_be_visible()
        expect(page.get_by_role("button", name="Resume")).to_be_visible()
        assert console.client.services.app_state.paused()
    finally:
        if page.get_by_role("button", name="Resume").count():
            _press(page, "Resume")
        _resumed(console)
    expect(page.get_by_role("button", name="Pause")).to_be_visible()


def _resumed(console: Console) -> None:
    """Make sure the app is not left paused for the tests after this one."""
    deadline = time.monotonic() + 10
    while console.client.services.app_state.paused():
        if time.monotonic() > deadline:
            console.client.ops.resume(by="user:ann")
            return
        time.sleep(0.05)


def _refund(
    console: Console, amount: str = "299.00", record: tuple[str, str] | None = None
) -> tuple[str, str, str]:
    """A subscription's refund waiting at its gate: (subscription id, run id, approval id)."""
    subscription = f"sub_{uuid.uuid4().hex[:8]}"
    given = {"subscription_id": subscription, "amount": amount, "reason": "Charged twice"}
    run_id = console.client.runs.start("refund", given, by="user:ann", record=record).run_id
    console.wait_for(run_id, "waiting")
    (approval,) = console.client.approvals.list(run_id=run_id, status="pending")
    return subscription, run_id, approval.id


def test_a_refund_shows_what_may_change_with_its_bounds_and_approves_the_amount(
    page: Page, console: Console, shoot: Shots
) -> None:
    subscription, run_id, approval_id = _refund(console)
    sign_in(page, console)
    page.goto(f"{console.url}/console/inbox")
    gate = page.locator(f"form.gate#gate-{approval_id}")
    # The refund type lets the approver change the amount alone: the rest is shown, not edited.
    expect(gate).to_contain_text("You may change Amount; the rest stays as the run proposed it.")
    kept = gate.locator("dl.read-only")
    expect(kept.locator(f"#gate-{approval_id}-draft-subscription_id")).to_have_text(subscription)
    expect(kept.locator(f"#gate-{approval_id}-draft-reason")).to_have_text("Charged twice")
    expect(gate.locator('[name="draft.subscription_id"], [name="draft.reason"]')).to_have_count(0)
    # The amount's bounds are on the input and in words, before anything is sent.
    amount = gate.locator('[name="draft.amount"]')
    expect(amount).to_have_value("299.00")
    expect(amount).to_have_attribute("min", "0.01")
    expect(amount).to_have_attribute("max", "500")
    expect(gate.locator(f"#gate-{approval_id}-draft-amount-hint")).to_have_text("0.01 to 500.00")
    note = gate.get_by_label("Decision note")
    expect(note).to_be_visible()
    gate.scroll_into_view_if_needed()
    shoot(page, "inbox-refund")

    amount.fill("250.00")
    note.fill("Refund the second charge only")
    with page.expect_response(_posted) as approved:
        gate.get_by_role("button", name="Approve", exact=True).click()
    assert approved.value.status == 303
    expect(page.locator("#flash")).to_contain_text(
        f"Approved with edits (amount 299.00 → 250.00): Refund 299.00 on {subscription}"
    )
    decided = console.client.approvals.get(approval_id)
    assert decided.edited_draft_json == {
        "subscription_id": subscription,
        "amount": "250.00",
        "reason": "Charged twice",
    }
    assert decided.reason == "Refund the second charge only"
    done = console.wait_for(run_id, "done")
    assert done.output == {"refunded": "250.00", "outcome": "refunded"}


def test_a_run_is_found_from_the_header_by_id_record_or_starter(
    page: Page, console: Console, shoot: Shots
) -> None:
    subscription = f"sub_{uuid.uuid4().hex[:8]}"
    _, run_id, _ = _refund(console, record=("subscription", subscription))
    _refund(console)  # ann has started two runs at least, whichever tests ran before
    sign_in(page, console)
    box = page.locator("header form.search")

    def find(text: str) -> None:
        box.get_by_role("searchbox").fill(text)
        box.get_by_role("button", name="Find").click()

    # One run found opens its page, whose box is empty again.
    find(run_id[:14])
    expect(page).to_have_url(re.compile(rf"/console/runs/{run_id}$"))
    expect(page.locator("h1")).to_contain_text(run_id)
    expect(box.get_by_role("searchbox")).to_have_value("")
    find(f"subscription {subscription}")
    expect(box.get_by_role("searchbox")).to_have_value("")
    expect(page).to_have_url(re.compile(rf"/console/runs/{run_id}$"))

    find("user:ann")
    expect(page).to_have_url(re.compile(r"/console/search\?q=user%3Aann$"))
    expect(page.locator("#search-count")).to_contain_text("match user:ann, newest first")
    expect(page.locator(f'table#runs a[href="/console/runs/{run_id}"]')).to_be_visible()
    expect(box.get_by_role("searchbox")).to_have_value("user:ann")
    shoot(page, "search")

    find("invoice:nothing-here")
    expect(page.locator("#search-none")).to_contain_text(
        "No run you may read matches invoice:nothing-here."
    )


def test_a_run_is_started_from_its_form_and_a_refused_start_says_why(
    page: Page, console: Console, shoot: Shots
) -> None:
    # Bob, a clerk, may start a refund of up to 100 (policies/refunds.cedar).
    sign_in(page, console, "user:bob")
    page.get_by_role("link", name="Start a run").click()
    expect(page.locator("#workflows")).to_contain_text("refund")
    page.locator("#workflows").get_by_role("link", name="refund").click()
    form = page.locator("form#start")
    expect(form.locator("#start-input-amount-hint")).to_have_text("0.01 to 500.00")
    subscription = f"sub_{uuid.uuid4().hex[:8]}"
    form.locator('[name="input.subscription_id"]').fill(subscription)
    form.locator('[name="input.amount"]').fill("300")
    form.locator('[name="input.reason"]').fill("Cancelled in the trial")
    shoot(page, "start")

    with page.expect_response(_posted) as refused:
        form.get_by_role("button", name="Start run").click()
    assert refused.value.status == 403
    form = page.locator("form#start")
    expect(form.locator(".refusal")).to_contain_text('user:bob may not start Workflow::"refund"')
    expect(form.locator(".refusal")).to_contain_text("forbidden by policies/refunds.cedar")
    expect(form.locator('[name="input.subscription_id"]')).to_have_value(subscription)
    expect(form.locator('[name="input.amount"]')).to_have_value("300")

    form.locator('[name="input.amount"]').fill("80")
    with page.expect_response(_posted) as posted:
        form.get_by_role("button", name="Start run").click()
    assert posted.value.status == 303
    expect(page).to_have_url(re.compile(r"/console/runs/run_[0-9a-f]+$"))
    expect(page.locator("#flash")).to_contain_text("Started refund: run ")
    run_id = page.url.rsplit("/", 1)[1]
    run = console.wait_for(run_id, "waiting")
    assert (run.workflow, run.started_by) == ("refund", "user:bob")
    assert run.input == {
        "subscription_id": subscription,
        "amount": "80",
        "reason": "Cancelled in the trial",
    }

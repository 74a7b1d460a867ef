"""The console's pages of runs, the ledger, budgets and operations, on both databases: a
retried run's copied steps on its timeline, the cancel and retry buttons, the ledger's filters
and its uncertain rows, the budget charts with their drift, pause and resume through the
buttons, and a principal the policies refuse seeing why, with nothing changed. Driven over HTTP
(starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from markupsafe import escape
from rich.console import Console

from remit import App, Budget, DriverError
from remit.cli.runs import _ledger_table
from remit.core.schema import budget_periods
from remit.policy.cedar import PolicyDenied
from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import sign_in
from tests.support import FakeShop, create_order, governed_shop, send_email

POLICIES = (
    'permit (principal == User::"carol", action, resource);\n'
    'permit (principal == User::"ann", action == Action::"start", resource);\n'
)
STEP = re.compile(r'<rect class="step ([^"]*)"')
POST_FORM = re.compile(r'<form [^>]*method="post"[^>]*>')


def _app(tmp_path: Path) -> App:
    return governed_shop(tmp_path, POLICIES, budgets=[Budget(Decimal("50"))])


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    with Harness(_app(tmp_path), database_url=database_url, actor="user:carol") as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def steps_of(html: str) -> list[set[str]]:
    return [set(found.split()) for found in STEP.findall(html)]


def test_a_failed_run_is_retried_by_its_button_and_its_fork_shows_copied_steps(
    http: TestClient, harness: Harness
) -> None:
    harness.fake("shop", FakeShop).failures[create_order.id].append(
        DriverError("no stock", retryable=False, status=409)
    )
    run = harness.run("purchase", {"sku": "sku-1"})
    assert run.status == "failed"
    csrf = sign_in(http, harness, "user:carol")

    page = http.get(f"/console/runs/{run.run_id}").text
    assert f"<h1>Run <code>{run.run_id}</code></h1>" in page
    assert '<span id="status" class="status status-failed">failed</span>' in page
    assert "Retry run</button>" in page
    assert "Cancel run</button>" not in page
    assert 'hx-trigger="every 3s"' not in page  # a finished run is not polled
    first = steps_of(page)
    assert all("ran" in kinds for kinds in first)
    assert any("failed" in kinds for kinds in first)
    assert page.count('<svg id="timeline"') == 1

    assert '<input type="hidden" name="attempt" value="1">' in page
    retried = http.post(
        f"/console/runs/{run.run_id}/retry",
        data={"csrf": csrf, "attempt": "1"},
        follow_redirects=False,
    )
    assert (retried.status_code, retried.headers["location"]) == (
        303,
        f"/console/runs/{run.run_id}",
    )
    assert harness.wait(run.run_id).status == "done"
    page = http.get(f"/console/runs/{run.run_id}").text
    assert "carries on as attempt 2, from step 3" in page
    assert '<span id="status" class="status status-done">done</span>' in page
    kinds = steps_of(page)
    # Attempt 2 copied the read and the total, and ran the order and the email.
    assert sum("copied" in k for k in kinds) == 2
    assert sum("ran" in k for k in kinds) == len(first) + 2
    assert "Attempt 2</text>" in page
    attempts = page.split('<section id="attempts">')[1].split("</section>")[0]
    assert attempts.count(f"<code>{run.run_id}:") == 2
    ledger = page.split('<table id="ledger">')[1].split("</table>")[0]
    # The order that failed is called again under its key: one row, ok, and the refusal of
    # attempt 1 kept above it (the retry marked it `not_done`: it did not happen).
    assert ledger.count("<code>shop.orders.create</code>") == 1
    assert ledger.count('<tr class="ok">') == 3
    assert ledger.count('<tr class="earlier not_done">') == 1
    assert "no stock" in ledger.split('<tr class="earlier not_done">')[1].split("</tr>")[0]
    [order] = [r for r in harness.client.calls.ledger(run.run_id) if r.op_id == create_order.id]
    assert [(t.attempt, t.status) for t in order.earlier] == [(1, "not_done")]
    assert (order.attempt, order.status) == (2, "ok")
    assert "run.retry</code> by user:carol" in page

    # The same form again, sent after the retry made attempt 2, retries nothing more.
    again = http.post(f"/console/runs/{run.run_id}/retry", data={"csrf": csrf, "attempt": "1"})
    assert again.status_code == 200
    assert f"Run {run.run_id} was already retried as attempt 2." in again.text
    # A retry of attempt 2, which is done, is refused.
    refused = http.post(f"/console/runs/{run.run_id}/retry", data={"csrf": csrf})
    assert refused.status_code == 409
    assert harness.client.runs.get(run.run_id).attempt == 2


def test_a_waiting_run_is_polled_and_cancelled_by_its_button(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("refund", {"sku": "sku-1"})
    harness.wait(run.run_id, until=("waiting",))
    csrf = sign_in(http, harness, "user:carol")

    live = http.get(f"/console/runs/{run.run_id}/live").text
    assert live.startswith('<div id="live"')
    assert f'hx-get="/console/runs/{run.run_id}/live" hx-trigger="every 3s"' in live
    assert '<span id="status" class="status status-waiting">waiting</span>' in live
    assert '<rect class="wait gate open"' in live  # the gate's wait, drawn up to now
    page = http.get(f"/console/runs/{run.run_id}").text
    assert "Cancel run</button>" in page
    assert "Retry run</button>" not in page
    approvals = page.split('<section id="approvals">')[1].split("</section>")[0]
    assert "pending" in approvals
    assert "decide in the inbox" in approvals

    done = http.post(
        f"/console/runs/{run.run_id}/cancel", data={"csrf": csrf}, follow_redirects=False
    )
    assert done.status_code == 303
    assert harness.client.runs.get(run.run_id).status == "cancelled"
    page = http.get(f"/console/runs/{run.run_id}").text
    assert f"Run {run.run_id} is cancelled." in page
    assert "Retry run</button>" in page
    assert "Cancel run</button>" not in page
    assert 'hx-trigger="every 3s"' not in http.get(f"/console/runs/{run.run_id}/live").text


def test_the_ledger_filters_and_marks_uncertain_rows(http: TestClient, harness: Harness) -> None:
    harness.fake("shop", FakeShop).failures[send_email.id].append(
        DriverError("the shop did not answer in time", retryable=True, status=504)
    )
    unsure = harness.start("purchase", {"sku": "sku-1"})
    harness.wait(unsure.run_id, until=("waiting",))
    sure = harness.run("purchase", {"sku": "sku-2"})
    assert sure.status == "done"
    sign_in(http, harness, "user:carol")

    every = http.get("/console/ledger").text
    assert every.count('<tr class="uncertain">') == 1
    assert "uncertain — did it happen?" in every
    assert every.count('<tr class="ok">') == 5

    only = http.get("/console/ledger?status=uncertain").text
    assert only.count("<tr class=") == 1
    assert "<code>shop.emails.send</code>" in only
    ops = http.get("/console/ledger?op=shop.orders.create").text
    assert ops.count('<tr class="ok">') == 2
    assert "shop.items.get</code> <span" not in ops
    one = http.get(f"/console/ledger?run={sure.run_id}").text
    assert one.count("<tr class=") == 3
    assert unsure.run_id not in one.split('<table id="ledger">')[1]
    none = http.get(f"/console/ledger?run={sure.run_id}&status=uncertain").text
    assert "No op calls match these filters." in none
    bad = http.get("/console/ledger?status=maybe").text
    assert "status &#39;maybe&#39; is not one of" in bad
    # A run prefix of several runs is said beside the filters, as the page itself (200).
    several = http.get("/console/ledger?run=run_")
    assert several.status_code == 200
    assert "run `run_` is ambiguous" in several.text.split('class="refusal"')[1]

    page = http.get(f"/console/runs/{unsure.run_id}").text
    assert '<tr class="uncertain">' in page
    tasks = page.split('<section id="tasks">')[1].split("</section>")[0]
    assert "answer it" in tasks


def test_a_calls_refused_tries_are_kept_and_shown_everywhere(
    http: TestClient, harness: Harness
) -> None:
    busy = DriverError("the shop is busy", retryable=True, status=503, maybe_applied=False)
    harness.fake("shop", FakeShop).failures[create_order.id].extend([busy, busy])
    run = harness.run("purchase", {"sku": "sku-1"})
    assert run.status == "done", run.error

    [row] = [r for r in harness.client.calls.ledger(run.run_id) if r.op_id == create_order.id]
    assert (row.status, row.tries) == ("ok", 3)
    assert [(t.try_number, t.status, t.attempt, t.actor) for t in row.earlier] == [
        (1, "failed", 1, "user:carol"),
        (2, "failed", 1, "user:carol"),
    ]
    assert all("the shop is busy" in (t.error or "") for t in row.earlier)

    # The API, the command line's table, the ledger page and the run page.
    _, token = harness.client.services.tokens.create("user:carol", by="user:carol")
    listed = http.get(
        "/ledger", params={"run": run.run_id}, headers={"Authorization": f"Bearer {token}"}
    ).json()
    [entry] = [e for e in listed if e["op_id"] == create_order.id]
    assert [(e["try_number"], e["status"]) for e in entry["earlier"]] == [
        (1, "failed"),
        (2, "failed"),
    ]
    shown = Console(width=300, record=True)
    shown.print(_ledger_table(harness.client.calls.ledger(run.run_id), with_run=False))
    table = shown.export_text()
    assert table.count("earlier, at") == 2
    assert table.count("the shop is busy") == 2
    sign_in(http, harness, "user:carol")
    for page in (http.get("/console/ledger").text, http.get(f"/console/runs/{run.run_id}").text):
        ledger = page.split('<table id="ledger">')[1].split("</table>")[0]
        assert ledger.count('<tr class="earlier failed">') == 2
        assert ledger.count("the shop is busy") == 2


def test_each_budget_is_a_chart_with_its_drift(http: TestClient, harness: Harness) -> None:
    harness.client.budgets.set("app", 80, by="user:carol")
    with harness.client.db.begin() as conn:
        conn.execute(sa.update(budget_periods).values(spent_usd=Decimal("2.5")))
    sign_in(http, harness, "user:carol")

    page = http.get("/console/budgets").text
    assert page.count('<svg class="budget-chart"') == 1
    assert "spent $2.50 + reserved $0.00 of $80.00" in page
    assert '<tspan class="drift" dx="8" fill="#a4161a">drift $+2.50</tspan>' in page
    assert "$2.50: the counter and the ledger differ" in page
    assert "<td>user:carol</td>" in page


def test_pause_and_resume_through_the_buttons(http: TestClient, harness: Harness) -> None:
    csrf = sign_in(http, harness, "user:carol")
    page = http.get("/console/operations").text
    assert '<strong id="pause-state">running</strong>' in page
    assert 'action="/console/pause"' in page
    assert "live</span>" in page.split('<section id="workers">')[1]

    paused = http.post("/console/pause", data={"csrf": csrf}, follow_redirects=False)
    assert (paused.status_code, paused.headers["location"]) == (303, "/console/operations")
    assert harness.client.services.app_state.paused()
    page = http.get("/console/operations").text
    assert "The app is paused:" in page
    assert '<strong id="pause-state">paused</strong>' in page
    assert "Resume</button>" in page
    audit = page.split('<section id="audit">')[1]
    assert "<td>user:carol</td><td><code>app.paused</code>" in audit

    resumed = http.post("/console/resume", data={"csrf": csrf}, follow_redirects=False)
    assert resumed.status_code == 303
    assert not harness.client.services.app_state.paused()
    assert '<strong id="pause-state">running</strong>' in http.get("/console/operations").text


def test_a_refused_principal_sees_the_policys_reason_and_nothing_changes(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("refund", {"sku": "sku-1"})
    harness.wait(run.run_id, until=("waiting",))
    with pytest.raises(PolicyDenied) as pausing:
        harness.client.ops.pause(by="user:ann")
    with pytest.raises(PolicyDenied) as cancelling:
        harness.client.runs.cancel(run.run_id, by="user:ann")
    csrf = sign_in(http, harness, "user:ann")

    refused = http.post("/console/pause", data={"csrf": csrf})
    assert refused.status_code == 403
    assert "Refused by the policies" in refused.text
    assert escape(str(pausing.value)) in refused.text.split('class="refusal"')[1]
    assert not harness.client.services.app_state.paused()

    refused = http.post(f"/console/runs/{run.run_id}/cancel", data={"csrf": csrf})
    assert refused.status_code == 403
    assert escape(str(cancelling.value)) in refused.text
    assert harness.client.runs.get(run.run_id).status == "waiting"

    # Nor may ann read the operations (nor any run): the page says so, and is refused too.
    refused = http.get("/console/operations")
    assert refused.status_code == 403
    assert "read_operations" in refused.text
    assert http.get(f"/console/runs/{run.run_id}").status_code == 403

    sign_in(http, harness, "user:carol")
    denials = http.get("/console/operations").text.split('<section id="denials">')[1]
    assert "<code>pause</code>" in denials
    assert "<code>cancel</code>" in denials
    assert "<code>read_operations</code>" in denials
    assert "<code>read_runs</code>" in denials


def test_every_button_that_posts_shows_its_answer_with_htmx_on_too(
    http: TestClient, harness: Harness
) -> None:
    # htmx swaps no 4xx answer: a boosted form the policies refuse would show nothing. Each
    # form that acts is posted by the browser itself, which shows the 403 page.
    run = harness.start("refund", {"sku": "sku-1"})
    harness.wait(run.run_id, until=("waiting",))
    sign_in(http, harness, "user:carol")
    for path in (f"/console/runs/{run.run_id}", "/console/operations", "/console/inbox"):
        forms = POST_FORM.findall(http.get(path).text)
        assert len(forms) >= 2, path  # sign-out, and the page's own
        assert all('hx-boost="false"' in form for form in forms), (path, forms)


def test_the_resources_page_says_when_the_app_declares_none(
    http: TestClient, harness: Harness
) -> None:
    sign_in(http, harness, "user:carol")
    page = http.get("/console/resources")
    assert page.status_code == 200
    assert "The app declares no resources" in page.text
    assert 'aria-current="page">Resources</a>' in page.text

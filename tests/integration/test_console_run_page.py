"""A run's page and the ledger page, on both databases, as the subscription-refund desk found
them: a run gated and then asleep for three days shows each wait as a span on its timeline, its
steps named as its workflow wrote them; a call whose outcome is unknown waits for its task's
answer; the ledger says who each call acted as and cuts long values to a length a row can
hold; and a run's page lists the failures remit keeps and says where its log lines are. Driven
over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import html
import itertools
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from remit import App, Context, DriverError, workflow
from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import sign_in
from tests.support import (
    REFUND,
    FakeShop,
    RefundDraft,
    create_order,
    get_item,
    purchase,
    send_email,
    shop,
)

POLICIES = 'permit (principal == User::"carol", action, resource);\n'
SVG = "{http://www.w3.org/2000/svg}"


class Desk(BaseModel):
    sku: str = "sku-1"


@workflow(name="refund-desk", input=Desk, uses=[get_item, create_order])
def refund_desk(ctx: Context, input: Desk) -> str:
    """A subscription's refund: approved at a gate, then paid after three days."""
    item = ctx.call(get_item, sku=input.sku)
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {item.sku}",
        draft=RefundDraft(sku=item.sku, quantity=1),
    )
    if ctx.patch("acknowledge"):
        ctx.step("acknowledge", lambda: "told the customer")
    ctx.sleep(timedelta(days=3))
    return ctx.call(create_order, sku=item.sku, quantity=1).order_id + decision.status


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    app = App(name="desk", workflows=[refund_desk, purchase], connectors=[shop], approvals=[REFUND])
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "desk.cedar").write_text(POLICIES)
    app.use_policies(tmp_path / "policies")
    with Harness(app, database_url=database_url, actor="user:carol") as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        sign_in(client, harness, "user:carol")
        yield client


def section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">')[1].split("</section>")[0]


# The narrowest a wait's bar may be and still be seen and pointed at.
VISIBLE = 12.0


def timeline_of(page: str) -> ET.Element:
    found = re.search(r'<svg id="timeline".*?</svg>', page, re.S)
    assert found is not None, page
    return ET.fromstring(found.group(0))


def bars(root: ET.Element, *kinds: str) -> list[ET.Element]:
    """The timeline's rectangles that have every class in `kinds` (not the legend's)."""
    return [
        rect
        for group in root.iter(f"{SVG}g")
        if group.get("class") == "row"
        for rect in group.iter(f"{SVG}rect")
        if set(kinds) <= set(rect.get("class", "").split())
    ]


def test_a_gated_run_asleep_for_three_days_draws_each_wait_in_the_workflows_words(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("refund-desk", {})
    harness.wait(run.run_id, until=("waiting",))
    page = http.get(f"/console/runs/{run.run_id}").text
    [waiting] = bars(timeline_of(page), "wait", "gate", "open")
    # Not a sliver (what each wait was drawn as before, 3 px). How wide exactly depends on how
    # long the steps took beside it, which a loaded machine stretches: the scale's own tests
    # (tests/unit/test_console_svg.py) pin the widths down on fixed times.
    assert float(waiting.get("width", "0")) >= VISIBLE
    time.sleep(1.2)  # a gate that waits a while
    [approval] = harness.client.approvals.list(run_id=run.run_id)
    harness.decide(approval.id, "approved", by="user:carol")
    harness.wait(run.run_id, until=("sleeping",))

    page = http.get(f"/console/runs/{run.run_id}").text
    drawn = timeline_of(page)
    [waited] = bars(drawn, "wait", "gate")
    [sleeping] = bars(drawn, "wait", "sleep", "open")
    assert "open" not in (waited.get("class") or "")
    assert float(waited.get("width", "0")) >= VISIBLE
    assert float(sleeping.get("width", "0")) >= VISIBLE
    # Steps of milliseconds beside a wait of seconds and a sleep of days: none is a sliver,
    # and each is at its own place on the axis, not piled at one end.
    ran = bars(drawn, "step", "ran")
    assert min(float(rect.get("width", "0")) for rect in ran) >= 6
    starts = sorted(float(rect.get("x", "0")) for rect in ran)
    assert all(later - earlier >= 3 for earlier, later in itertools.pairwise(starts)), starts
    names = ["".join(text.itertext()) for text in drawn.iter(f"{SVG}text")]
    for said in ("approval refund", "patch acknowledge", "acknowledge", "sleep 3 days"):
        assert said in names
    assert any(re.fullmatch(r"[\d.]+ m?s so far, wakes in 2 d 23 h", n) for n in names), names
    # No name DBOS gives a step reaches the page.
    assert "DBOS." not in page
    assert "approval:refund" not in page
    steps = html.unescape(page.split('<table id="steps">')[1].split("</table>")[0])
    # At least the 1.2 s it was left (more on a loaded machine).
    gate = re.search(r"waited at the gate for ([\d.]+) s\b", steps)
    assert gate is not None, steps
    assert float(gate[1]) >= 1.2
    assert f"{approval.id} approved by user:carol via test" in steps
    assert re.search(r"sleeping for [\d.]+ m?s so far, wakes in 2 d 23 h \(due to wake 20", steps)
    # A run that names no record has no Activity heading with nothing under it.
    assert "<h2>Activity</h2>" not in page
    assert "<h2>Audit</h2>" in page
    # The part that refreshes draws the same.
    live = http.get(f"/console/runs/{run.run_id}/live").text
    assert len(bars(timeline_of(live), "wait", "sleep", "open")) == 1


def test_a_call_whose_outcome_is_unknown_waits_for_its_tasks_answer(
    http: TestClient, harness: Harness
) -> None:
    harness.fake("shop", FakeShop).failures[send_email.id].append(
        DriverError("the shop did not answer in time", retryable=True, status=504)
    )
    run = harness.start("purchase", {"sku": "sku-1"})
    harness.wait(run.run_id, until=("waiting",))
    drawn = timeline_of(http.get(f"/console/runs/{run.run_id}").text)
    assert len(bars(drawn, "wait", "task", "open")) == 1
    # Waiting for a person is not a failure.
    assert bars(drawn, "failed") == []

    [task] = harness.client.tasks.list(run_id=run.run_id)
    harness.client.tasks.resolve(task.id, done=True, output={"message_id": "m1"}, by="user:carol")
    assert harness.wait(run.run_id).status == "done"
    page = http.get(f"/console/runs/{run.run_id}").text
    [answered] = bars(timeline_of(page), "wait", "task")
    assert "open" not in (answered.get("class") or "")
    assert "waited for the task&#39;s answer for" in page
    assert f"({task.id} done by user:carol)" in page


def test_the_ledger_names_who_each_call_acted_as_and_cuts_long_values(
    http: TestClient, harness: Harness
) -> None:
    long_sku = "sku-" + "x" * 300
    harness.fake("shop", FakeShop).prices[long_sku] = 5
    long_run = harness.run("purchase", {"sku": long_sku})
    assert long_run.status == "done", long_run.error
    missing = harness.run("purchase", {"sku": "sku-" + "y" * 300})
    assert missing.status == "failed"

    for path in ("/console/ledger", f"/console/runs/{long_run.run_id}"):
        page = http.get(path).text
        table = page.split('<table id="ledger">')[1].split("</table>")[0]
        assert '<th scope="col" class="c-actor">Actor</th>' in table
        rows = table.split("<tr class=")[1:]
        assert rows
        assert all("<td>user:carol</td>" in row for row in rows)
        # Each long outcome shows its first 59 characters and opens to the whole, once.
        for row in rows:
            if long_sku not in row:
                continue
            cut = re.search(
                r'<details class="cut"><summary title="Show all of it"><code>(.*?)</code></summary>',
                row,
            )
            assert cut is not None, row
            assert len(html.unescape(cut.group(1))) == 60
            assert html.unescape(cut.group(1)).endswith("…")
            assert row.count(long_sku) == 1
            assert "<pre>{\n" in row
    # The error of the call that failed is cut the same way, to 89 characters and its ellipsis.
    failed = http.get(f"/console/ledger?run={missing.run_id}").text
    error = re.search(r'<summary title="Show all of it"><span class="error">(.*?)</span>', failed)
    assert error is not None
    assert html.unescape(error.group(1)) == ("no item sku-" + "y" * 300)[:89] + "…"


def test_a_run_page_lists_the_failures_remit_keeps_and_where_its_log_lines_are(
    http: TestClient, harness: Harness
) -> None:
    busy = DriverError("the shop is busy", retryable=True, status=503, maybe_applied=False)
    refused = DriverError("the shop refused the order", retryable=False, status=409)
    harness.fake("shop", FakeShop).failures[create_order.id].extend([busy, refused])
    run = harness.run("purchase", {"sku": "sku-1"})
    assert run.status == "failed"

    logs = html.unescape(section(http.get(f"/console/runs/{run.run_id}").text, "logs"))
    kept = logs.split('<ul class="kept">')[1].split("</ul>")[0]
    assert kept.index("shop.orders.create, attempt 1, try 1 (failed)") < kept.index(
        "shop.orders.create, attempt 1 (failed)"
    )
    assert "the shop is busy" in kept
    assert "the shop refused the order" in kept
    assert f"jq -c 'select(.run_id == \"{run.run_id}\")'" in logs
    assert (
        f'jq -c \'select(.run_id == "{run.run_id}" and .level != "INFO" and '
        f'.level != "DEBUG")\'' in logs
    )
    assert "REMIT_LOG_FORMAT=json" in logs
    assert f"remit.run_id={run.run_id}" in logs

    done = harness.run("purchase", {"sku": "sku-2"})
    logs = section(http.get(f"/console/runs/{done.run_id}").text, "logs")
    assert "No step or call of this run has failed." in logs
    assert done.run_id in logs

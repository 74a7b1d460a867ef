"""A run's page and the ledger page in Chromium, with JavaScript and without, on SQLite and
Postgres, as the subscription-refund desk sees them: a refund approved at a gate and then asleep
for three days draws its waits as spans wide enough to see, its steps named as the workflow
wrote them, its axis labels inside the drawing; and the ledger, with values long enough to
stretch any table, stays within a window 1280 pixels wide.

With `REMIT_SCREENSHOT_DIR` set, the timeline and the ledger are saved there as
`timeline.png` and `ledger.png` (from the run with JavaScript on SQLite), to be looked at.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import VIEWPORT, Console, sign_in

pytestmark = pytest.mark.browser


def _keep(shot: Page | Locator, name: str, console: Console, js: bool) -> None:
    """Save a screenshot to REMIT_SCREENSHOT_DIR, once (JavaScript on, SQLite)."""
    folder = os.environ.get("REMIT_SCREENSHOT_DIR")
    if folder and js and console.backend == "sqlite":
        Path(folder).mkdir(parents=True, exist_ok=True)
        shot.screenshot(path=str(Path(folder) / f"{name}.png"))


# The timeline as drawn, read in one go: the drawing's left and right, each wait's classes and
# width, each step that ran its x and width, and each axis label's left and right.
_MEASURE = """() => {
  const svg = document.querySelector("svg#timeline");
  const box = (e) => e.getBoundingClientRect();
  return {
    drawing: [box(svg).left, box(svg).right],
    waits: [...svg.querySelectorAll("rect.wait")].map((r) => [r.getAttribute("class"), box(r).width]),
    ran: [...svg.querySelectorAll("rect.step.ran")].map((r) => [box(r).left, box(r).width]),
    axis: [...svg.querySelectorAll("g.axis text")].map((t) => [t.textContent, [box(t).left, box(t).right]]),
  };
}"""


def _measured(page: Page) -> dict[str, Any]:
    seen: dict[str, Any] = page.evaluate(_MEASURE)
    return seen


def _box(locator: Locator) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def _page_width(page: Page) -> int:
    width: Any = page.evaluate("document.documentElement.scrollWidth")
    return int(width)


def test_a_refund_gated_then_asleep_for_three_days_draws_its_waits(
    page: Page, console: Console, js: bool
) -> None:
    account = f"desk-{uuid.uuid4().hex[:6]}"
    run_id = console.start_run("cooling-off", {"account": account, "amount": "42"})
    console.wait_for(run_id, "waiting")
    time.sleep(1.5)  # the refund waits at its gate a while before it is approved
    (approval,) = console.client.approvals.list(run_id=run_id, status="pending")
    console.client.approvals.decide(
        approval.id, "approved", key=f"test:{uuid.uuid4().hex}", by="user:ann"
    )
    console.wait_for(run_id, "sleeping")

    sign_in(page, console)
    page.goto(f"{console.url}/console/runs/{run_id}")
    expect(page.locator("#status")).to_have_text("sleeping")
    timeline = page.locator("svg#timeline")
    expect(timeline).to_be_visible()
    # Measured at once: with JavaScript, htmx redraws the timeline every 3 s.
    seen = _measured(page)

    # Each wait is a span: the gate's, closed, and the sleep's, up to now.
    # Not slivers (3 px, as each wait was drawn before): how wide exactly depends on how long
    # the steps beside took, which a loaded machine stretches (the scale's unit tests pin it).
    assert [(kinds, width >= 12) for kinds, width in seen["waits"]] == [
        ("wait gate", True),
        ("wait sleep open", True),
    ]
    # The steps, of milliseconds, are not slivers piled at one end: each is a bar of its own,
    # at its own place on the axis.
    assert min(width for _, width in seen["ran"]) >= 6
    starts = sorted(x for x, _ in seen["ran"])
    assert all(later - earlier >= 3 for earlier, later in itertools.pairwise(starts)), starts
    # Every axis label lies inside the drawing.
    left, right = seen["drawing"]
    for label, (start, end) in seen["axis"]:
        assert start >= left, label
        assert end <= right, label

    # The steps in the workflow's words, and no name DBOS gives them.
    for said in ("approval refund", "patch acknowledge", "sleep 3 days", "bank.accounts.get"):
        expect(timeline.locator("text", has_text=said).first).to_be_visible()
    assert "DBOS." not in page.content()
    # The legend says each kind in words.
    legend = timeline.locator("g.legend")
    for said in ("step ran", "waiting at a gate", "sleeping", "shortened: not to scale"):
        expect(legend).to_contain_text(said)
    assert _page_width(page) <= VIEWPORT["width"]
    _keep(page.locator(".svg-wrap"), "timeline", console, js)

    # The same in words, a click away.
    page.get_by_text("The steps in words").click()
    words = page.locator("table#steps")
    expect(words).to_contain_text("waited at the gate for")
    expect(words).to_contain_text("wakes in 2 d 23 h")


def test_the_ledger_keeps_within_the_window_and_opens_a_long_value(
    page: Page, console: Console, js: bool
) -> None:
    # An account name long enough to stretch any cell it is written in, unbroken.
    account = f"desk-{uuid.uuid4().hex[:6]}-" + "x" * 160
    run_id = console.start_run("statement", {"account": account})
    console.wait_for(run_id, "failed")
    sign_in(page, console)

    for path in ("/console/ledger", f"/console/runs/{run_id}"):
        page.goto(f"{console.url}{path}")
        table = page.locator("table#ledger")
        expect(table).to_contain_text("bank.statements.fetch")
        expect(table.locator("th", has_text="Actor")).to_be_visible()
        assert _page_width(page) <= VIEWPORT["width"], path
        assert _box(table)["width"] <= VIEWPORT["width"], path

    page.goto(f"{console.url}/console/ledger?run={run_id}")
    row = page.locator("table#ledger tr", has_text="bank.accounts.get")
    expect(row.locator("td", has_text="user:ann")).to_have_count(1)
    before = _box(row)["height"]
    assert before <= 120  # a cut outcome: a few lines, not the whole value
    _keep(page, "ledger", console, js)
    outcome = row.locator("details.cut")
    outcome.locator("summary").click()
    expect(outcome.locator("pre")).to_contain_text(account)
    assert _page_width(page) <= VIEWPORT["width"]

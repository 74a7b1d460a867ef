"""Finding a run from the console's header, on both databases: by its id or the start of it, by
the record it concerns, by who started it, and by these together; one run found opens its page,
several are listed, none says what to try, and only what the viewer may read is looked at.
Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from remit import App, Context, workflow
from tests.console_support import Desk, console_desk, policies_in, sign_in

ANN, CAROL = "user:ann", "user:carol"

POLICIES = """
permit (principal == User::"carol", action, resource);
permit (principal == User::"ann", action == Action::"start", resource);
// Ann reads the chases, not the audits.
permit (principal == User::"ann", action == Action::"read_runs", resource == Workflow::"chase");
"""


class InvoiceRef(BaseModel):
    invoice_id: str


@workflow(name="chase", input=InvoiceRef, record=lambda given: ("invoice", given.invoice_id))
def chase(ctx: Context, input: InvoiceRef) -> dict[str, Any]:
    return {"chased": input.invoice_id}


@workflow(name="audit", input=InvoiceRef, record=lambda given: ("invoice", given.invoice_id))
def audit(ctx: Context, input: InvoiceRef) -> dict[str, Any]:
    return {"audited": input.invoice_id}


@pytest.fixture
def desk(database_url: str, tmp_path: Path) -> Iterator[Desk]:
    app = App(name="desk", workflows=[chase, audit])
    with console_desk(app, database_url, policies_in(tmp_path, POLICIES), actor=CAROL) as both:
        yield both


def search(http: TestClient, q: str) -> Any:
    return http.get("/console/search", params={"q": q}, follow_redirects=False)


def listed(html: str) -> list[str]:
    """The run ids the page's table of runs lists, in order."""
    table = re.search(r'<table id="runs">.*?</table>', html, re.S)
    assert table is not None, html
    return re.findall(r'<a href="/console/runs/(run_[0-9a-f]+)">', table.group(0))


def test_one_run_found_opens_its_page_and_several_are_listed_newest_first(desk: Desk) -> None:
    harness, http = desk
    first = harness.start("chase", {"invoice_id": "inv_1003"}, by=ANN).run_id
    second = harness.start("chase", {"invoice_id": "inv_1003"}, by=CAROL).run_id
    other = harness.start("chase", {"invoice_id": "inv_2001"}, by=ANN).run_id
    sign_in(http, harness, ANN)

    page = http.get("/console/runs").text
    assert re.search(
        r'<form class="search" method="get" action="/console/search" role="search"', page
    )
    assert '<input type="search" id="search-q" name="q"' in page

    for q, run_id in (
        (first, first),
        (first[:14], first),
        ("invoice inv_2001", other),
        ("invoice:inv_1003 user:carol", second),
    ):
        found = search(http, q)
        assert (found.status_code, found.headers["location"]) == (303, f"/console/runs/{run_id}")

    by_record = search(http, "invoice:inv_1003")
    assert by_record.status_code == 200
    assert listed(by_record.text) == [second, first]
    assert "2 runs match <strong>invoice:inv_1003</strong>, newest first." in by_record.text
    assert '<a href="/console/runs?record=invoice%3Ainv_1003">' in by_record.text
    assert 'value="invoice:inv_1003"' in by_record.text  # the header's box keeps the search
    assert listed(search(http, "invoice inv_1003").text) == [second, first]
    assert listed(search(http, "user:ann").text) == [other, first]
    # A word alone is the start of a run's id or a user's name.
    assert listed(search(http, "ann").text) == [other, first]
    assert listed(search(http, "run_").text) == [other, second, first]
    assert listed(search(http, "user:ann since:1h").text) == [other, first]
    later = search(http, "user:ann since:2999-01-01").text
    assert "No run you may read matches <strong>user:ann since:2999-01-01</strong>." in later


def test_a_search_looks_only_at_what_the_viewer_may_read(desk: Desk) -> None:
    harness, http = desk
    chased = harness.start("chase", {"invoice_id": "inv_1003"}, by=ANN).run_id
    audited = harness.start("audit", {"invoice_id": "inv_1003"}, by=ANN).run_id
    sign_in(http, harness, ANN)
    found = search(http, "invoice:inv_1003")
    assert (found.status_code, found.headers["location"]) == (303, f"/console/runs/{chased}")
    unread = search(http, audited)
    assert unread.status_code == 200
    assert f"No run you may read matches <strong>{audited}</strong>." in unread.text
    assert f'href="/console/runs/{audited}"' not in unread.text

    sign_in(http, harness, CAROL)
    assert listed(search(http, "invoice:inv_1003").text) == [audited, chased]


def test_a_search_that_finds_nothing_or_cannot_be_read_says_what_to_try(desk: Desk) -> None:
    harness, http = desk
    harness.start("chase", {"invoice_id": "inv_1003"}, by=ANN)
    sign_in(http, harness, ANN)
    none = search(http, "inv_9999")
    assert none.status_code == 200
    said = re.search(r'<p id="search-none"[^>]*>(.*?)</p>', none.text, re.S)
    assert said is not None, none.text
    assert "No run you may read matches <strong>inv_9999</strong>." in said.group(1)
    assert "a record as <code>invoice:inv_1003</code>" in said.group(1)
    assert "who started it as <code>user:ann</code>" in said.group(1)
    assert 'id="runs"' not in none.text

    for q, problem in (
        ("invoice inv_1003 now", "'invoice inv_1003 now' is more than one thing to look for"),
        ("since:yesterday", "since: 'yesterday' is not a time: give an ISO date or time"),
        ("user:ann user:bob", "'user:bob' gives who started it a second time"),
        ("a\u0000b", "type at most 200 characters, with no control characters"),
    ):
        bad = search(http, q)
        assert bad.status_code == 422, q
        assert problem in bad.text.replace("&#39;", "'"), (q, bad.text)

    empty = search(http, "")
    assert empty.status_code == 200
    assert "Type in the box at the top of every page: a run's id" in empty.text

"""A run's page when the run waits for the world, on both databases: what it waits for (a
message on a topic until when, its child runs), what it published, the messages sent to it,
the run that started it and the runs it started (those the viewer may read), and its timeline
naming `ctx.wait_for`, `ctx.start`, `ctx.wait` and `ctx.publish` as the workflow wrote them,
with each wait drawn beside its step. Driven over HTTP (starlette's TestClient on
`create_api`), signed in as a browser is."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import policies_in, sign_in
from tests.waits_app import make_waits_app

# carol may do anything; ann reads the credit notes, not their refund lines.
POLICIES = """
permit (principal == User::"carol", action, resource);
permit (principal == User::"ann", action == Action::"read_runs", resource == Workflow::"credit-note");
"""
SVG = "{http://www.w3.org/2000/svg}"
PAID = {"amount": "120.00", "reference": "pi_<1>"}


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    policies = policies_in(tmp_path, POLICIES)
    with Harness(
        make_waits_app(), database_url=database_url, actor="user:carol", policies=policies
    ) as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        sign_in(client, harness, "user:carol")
        yield client


def text_of(markup: str) -> str:
    """Markup as a reader reads it: a space between cells, items and headings, the rest of
    the tags dropped, its entities read and its spaces made one."""
    spaced = re.sub(r"</?(td|th|tr|h2|li|p|ul|table|thead|tbody)\b[^>]*>", " ", markup)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", spaced)).split())


def section(page: str, name: str) -> str:
    """The text of the page's `section#name`."""
    assert f'<section id="{name}">' in page, f"no section#{name}"
    return text_of(page.split(f'<section id="{name}">')[1].split("</section>")[0])


def timeline_of(page: str) -> ET.Element:
    found = re.search(r'<svg id="timeline".*?</svg>', page, re.S)
    assert found is not None, page
    return ET.fromstring(found.group(0))


def waits(root: ET.Element, *kinds: str) -> list[ET.Element]:
    """The timeline's wait bars that have every class in `kinds` (not the legend's)."""
    return [
        rect
        for group in root.iter(f"{SVG}g")
        if group.get("class") == "row"
        for rect in group.iter(f"{SVG}rect")
        if {"wait", *kinds} <= set(rect.get("class", "").split())
    ]


def names(root: ET.Element) -> list[str]:
    return ["".join(text.itertext()) for text in root.iter(f"{SVG}text")]


def steps_in_words(page: str) -> str:
    return text_of(page.split('<table id="steps">')[1].split("</table>")[0])


def waiting(harness: Harness, run_id: str) -> None:
    harness.wait(run_id, until=("waiting",))
    harness.wait_attempt_ended(run_id, 1)


def unclocked(text: str) -> str:
    """`text` without its spans of time from now (`1 s ago`, `in 59 min 58 s`), which move on
    between two reads of a page."""
    return re.sub(r"\d+ (?:h|min|s)\b", "N", text)


def test_a_run_waiting_for_a_message_says_on_what_until_when_and_then_what_came(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("await-payment", {"timeout": 3600})
    waiting(harness, run.run_id)
    page = http.get(f"/console/runs/{run.run_id}").text

    said = section(page, "waiting")
    assert said.startswith("Waiting for A message on paid (step 2), since ")
    assert re.search(r", until 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (59 min|1 h)", said), said
    assert f"Send it with remit send {run.run_id} paid --input JSON" in said
    for absent in ("state", "messages", "children"):
        assert f'<section id="{absent}">' not in page
    assert "<dt>Parent</dt>" not in page
    drawn = timeline_of(page)
    [bar] = waits(drawn, "message", "open")
    assert "waits for paid: waiting for a message for" in "".join(bar.itertext())
    assert "waits for paid" in names(drawn)
    assert "waiting for a message" in names(drawn)  # the legend
    assert "wait_for:paid" not in page
    words = steps_in_words(page)
    assert re.search(r"waits for paid .* waiting for a message for .* so far, times out in", words)
    assert "(a message on paid, times out 20" in words
    assert "pending until 20" in words
    # The part that refreshes says the same (but for the time gone by between the two reads).
    live = http.get(f"/console/runs/{run.run_id}/live").text
    assert unclocked(section(live, "waiting")) == unclocked(said)
    assert len(waits(timeline_of(live), "message", "open")) == 1

    harness.client.send(run.run_id, "other", ["kept"], by="user:carol")
    harness.client.send(run.run_id, "paid", PAID, by="user:carol")
    assert harness.wait(run.run_id).status == "done"
    page = http.get(f"/console/runs/{run.run_id}").text
    assert '<section id="waiting">' not in page
    listed = section(page, "messages")
    assert listed.startswith("Messages Seq Topic Status Sent by Sent Payload ")
    assert "1 other queued user:carol " in listed
    assert ' ["kept"] ' in listed
    assert "2 paid taken at step 2 user:carol " in listed
    assert listed.endswith('{"amount": "120.00", "reference": "pi_<1>"}')
    assert "pi_<1>" not in page  # escaped, as every value a person sent
    [came] = waits(timeline_of(page), "message")
    assert "open" not in (came.get("class") or "")
    assert "message 2 from user:carol:" in steps_in_words(page)


def test_a_parent_and_its_children_link_to_each_other_and_say_what_they_wait_for(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("credit-note", {"lines": 2, "hold": True})
    waiting(harness, run.run_id)
    children = harness.client.runs.children(run.run_id)
    ids = [child.run_id for child in children]
    for child in ids:
        waiting(harness, child)
    page = http.get(f"/console/runs/{run.run_id}").text

    said = section(page, "waiting")
    assert said.startswith(f"Waiting for Its child runs (step 5): {ids[0]}, {ids[1]}, since ")
    assert said.endswith("It carries on once every one has ended.")
    assert section(page, "state") == (
        "Published state The latest value of each key the run published (ctx.publish). "
        'Key Value progress {"started": 2}'
    )
    listed = section(page, "children")
    assert listed == (
        "Child runs Run Workflow Key Status Started at step "
        f"{ids[0]} refund-line line-0 waiting 2 {ids[1]} refund-line line-1 waiting 3"
    )
    for child in ids:
        assert f'<a href="/console/runs/{child}"><code>{child}</code></a>' in page
    drawn = timeline_of(page)
    for label in ("starts refund-line", "publishes progress", "waits for its children"):
        assert label in names(drawn)
    assert len(waits(drawn, "children", "open")) == 1
    words = steps_in_words(page)
    assert f"{ids[0]} (key line-0)" in words
    assert "published progress" in words
    assert f"(2 child runs: {ids[0]}, {ids[1]})" in words

    child = http.get(f"/console/runs/{ids[0]}").text
    parent = child.split("<dt>Parent</dt><dd>")[1].split("</dd>")[0]
    assert parent.startswith(f'<a href="/console/runs/{run.run_id}"><code>{run.run_id}</code></a>')
    assert text_of(parent) == (f"{run.run_id} started it at its step 2, key line-0")
    assert section(child, "waiting").startswith("Waiting for A message on go (step 1), since ")
    assert ", with no timeout." in section(child, "waiting")

    found = http.get(f"/console/runs?parent={run.run_id[:12]}").text
    assert sorted(re.findall(r'href="/console/runs/(run_[0-9a-f]+)"', found)) == sorted(ids)
    assert 'name="parent" value="' in found

    for child in ids:
        harness.client.send(child, "go", None, by="user:carol")
    assert harness.wait(run.run_id).status == "done"
    page = http.get(f"/console/runs/{run.run_id}").text
    assert '<section id="waiting">' not in page
    assert 'progress {"started": 2, "done": 2}' in section(page, "state") or (
        'progress {"done": 2, "started": 2}' in section(page, "state")
    )
    assert section(page, "children").count(" done ") == 2
    [ended] = waits(timeline_of(page), "children")
    assert "open" not in (ended.get("class") or "")
    assert "2 children ended: 2 done" in steps_in_words(page)


def test_a_viewer_sees_only_the_children_they_may_read(http: TestClient, harness: Harness) -> None:
    run = harness.start("credit-note", {"lines": 1})
    assert harness.wait(run.run_id).status == "done"
    [child] = harness.client.runs.children(run.run_id)
    sign_in(http, harness, "user:ann")
    page = http.get(f"/console/runs/{run.run_id}")
    assert page.status_code == 200
    assert '<section id="children">' not in page.text
    assert http.get(f"/console/runs?parent={run.run_id}").text.count("/console/runs/run_") == 0
    refused = http.get(f"/console/runs/{child.run_id}")
    assert refused.status_code == 403
    assert 'user:ann may not read_runs Workflow::"refund-line"' in html.unescape(refused.text)

"""The console's Changes pages, on both databases: the list of changes (status, branch, author,
head, updated) and a change's page with its checks (each ok or failed, with what it said), its
review linked to the inbox, its merge, its deploy and its activity, as the signed-in person may
read them. On a copy of `tests/apps/change_app` (ann and carol author changes, carol reviews,
dave is named by no policy), its repo on a fake forge. Driven over HTTP (starlette's TestClient
on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from remit.serve.api import create_api
from remit.testing import Harness
from tests.change_support import Shop, shop_at, start_change
from tests.console_support import sign_in

# A change's checks are processes of their own: under load they take minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ANN, CAROL, DAVE = "user:ann", "user:carol", "user:dave"
# A test of the shop's that fails: a change adding it fails its `test` check.
FAILING_TEST = "def test_the_stock_is_counted() -> None:\n    assert 1 + 1 == 3\n"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    return shop_at(tmp_path, monkeypatch)


@pytest.fixture
def harness(shop: Shop, database_url: str) -> Iterator[Harness]:
    with Harness(shop.app, database_url=database_url, actor=ANN) as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def section(html: str, name: str) -> str:
    """The HTML of `<section id="name">` on the page."""
    found = re.search(rf'<section id="{name}">.*?</section>', html, re.S)
    assert found is not None, f"no section#{name} in {html}"
    return found.group(0)


def row(html: str, row_id: str) -> str:
    found = re.search(rf'<tr id="{row_id}">.*?</tr>', html, re.S)
    assert found is not None, f"no tr#{row_id} in {html}"
    return found.group(0)


def test_the_changes_pages_follow_a_change_from_its_checks_to_its_deploy(
    shop: Shop, harness: Harness, http: TestClient
) -> None:
    failing = start_change(
        harness, shop, "stock", {"tests/test_stock.py": FAILING_TEST}, title="Count stock"
    )
    assert failing.status == "failing"
    change = start_change(harness, shop, "notes", {"NOTES.md": "notes\n"}, title="Add notes")
    assert change.status == "review"
    assert change.head is not None
    sign_in(http, harness, ANN, by=CAROL)

    listed = http.get("/console/changes")
    assert listed.status_code == 200
    assert '<a href="/console/changes" aria-current="page">Changes</a>' in listed.text
    # Newest first: each row its status, branch, title, author and head.
    assert listed.text.index(f'id="change-{change.id}"') < listed.text.index(
        f'id="change-{failing.id}"'
    )
    shown = row(listed.text, f"change-{change.id}")
    for said in (
        f'<a href="/console/changes/{change.id}"><code>{change.id}</code></a>',
        '<span class="status status-review">review</span>',
        "<code>notes</code>",
        "Add notes",
        ANN,
        f'<code title="{change.head}">{change.head[:12]}</code>',
    ):
        assert said in shown, said
    assert '<span class="status status-failing">failing</span>' in row(
        listed.text, f"change-{failing.id}"
    )
    only = http.get("/console/changes", params={"branch": "stock"}).text
    assert failing.id in only
    assert change.id not in only
    assert "No changes of other." in http.get("/console/changes?branch=other").text

    # The failing change: its `test` check failed, with pytest's words; no review is asked.
    page = http.get(f"/console/changes/{failing.id}").text
    checks = section(page, "checks")
    assert '<article class="card check" id="check-test">' in checks
    test = checks.split('id="check-test">', 1)[1].split("</article>", 1)[0]
    assert '<span class="status status-failed">failed</span>' in test
    assert "1 failed" in test.split("<pre>", 1)[1]
    assert "No review asked yet: it is asked once every check passes." in section(page, "review")

    # The change at its review: every check ok, the gate linked to the inbox.
    page = http.get(f"/console/changes/{change.id}").text
    assert f"<h1>Change <code>{change.id}</code>: Add notes</h1>" in page
    assert '<span id="change-status" class="status status-review">review</span>' in page
    assert (
        '<dd><a href="https://git.shop.test/shop/ops/pull/2" rel="noreferrer">#2</a> at forge</dd>'
        in page
    )
    assert f'<a href="/console/runs/{change.run_id}"><code>{change.run_id}</code></a>' in page
    checks = section(page, "checks")
    assert checks.count('<span class="status status-ok">ok</span>') == 3
    for name in ("test", "plan", "deploy-check"):
        assert f'id="check-{name}"' in checks
    assert escape('revision  "') in checks  # the plan's own words, in a <pre>
    [gate] = harness.approvals.list(run_id=change.run_id, status="pending")
    review = section(page, "review")
    assert f'<a href="/console/inbox#gate-{gate.id}">decide in the inbox</a>' in review
    assert "Not merged yet." in section(page, "merge")
    assert "Not deployed: a change is deployed once merged." in section(page, "deploys")
    activity = section(page, "activity")
    assert "change request #2 opened for notes" in activity
    assert "(change.checked by user:ann)" in activity

    harness.decide(gate.id, "approved", by=CAROL)
    run = harness.wait(change.run_id, timeout=600, until=("done", "failed"))
    assert run.status == "done", run.error
    merged = shop.forge.head(shop.repo, "main")
    assert merged is not None
    page = http.get(f"/console/changes/{change.id}").text
    assert '<span id="change-status" class="status status-deployed">deployed</span>' in page
    assert "by user:carol via test" in row(section(page, "review"), f"gate-{gate.id}")
    assert f'<code id="merge-commit">{merged}</code>' in section(page, "merge")
    deploys = section(page, "deploys")
    assert f'<code id="deployed">{merged}</code>' in deploys
    [deploy] = harness.client.changes.deploys()
    shown = row(deploys, f"deploy-{deploy.id}")
    assert "<td>web</td>" in shown
    assert f'<code title="{merged}">{merged[:12]}</code>' in shown
    assert '<span class="status status-healthy">healthy</span>' in shown
    assert f"web run {merged[:12]}, healthy" in section(page, "activity")


def test_a_change_is_read_as_the_policies_let_the_viewer(
    shop: Shop, harness: Harness, http: TestClient
) -> None:
    change = start_change(harness, shop, "notes", {"NOTES.md": "notes\n"})
    sign_in(http, harness, DAVE, by=CAROL)
    listed = http.get("/console/changes")
    assert listed.status_code == 200
    assert change.id not in listed.text
    assert "No changes." in listed.text
    refused = http.get(f"/console/changes/{change.id}")
    assert refused.status_code == 403
    assert "Refused by the policies" in refused.text
    assert "user:dave may not read_runs" in refused.text

    sign_in(http, harness, ANN, by=CAROL)
    missing = http.get("/console/changes/chg_000000000000")
    assert missing.status_code == 404
    assert "There is no change chg_000000000000: the Changes page lists them." in missing.text

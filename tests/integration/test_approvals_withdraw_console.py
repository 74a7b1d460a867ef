"""Withdrawing a gate in the web console: the run's page shows a Withdraw button by each
pending gate its viewer may withdraw (whoever started the run, under the desk's policies), and
no one else's; the post carries the page's CSRF token and a key made with the page, so a form
sent twice withdraws once; a post by someone who neither started the run nor is an admin is
409, naming who may, and one without its CSRF token 403, each changing nothing. Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit.testing import Harness
from tests.console_support import console_of, form_of, hidden, sign_in
from tests.integration.test_approvals_withdraw import desk_app


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    with Harness(desk_app(tmp_path), database_url=database_url, actor="user:ann") as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with console_of(harness) as client:
        yield client


def test_the_requester_withdraws_from_the_runs_page_and_no_one_else_may(
    http: TestClient, harness: Harness
) -> None:
    run = harness.start("errand", {"sku": "sku-1"})
    gate = harness.gate(run.run_id)
    page = f"/console/runs/{run.run_id}"

    # Bob decides refunds, but did not ask for this one: no button, and a post is refused.
    sign_in(http, harness, "user:bob", by="user:ann")
    shown = http.get(page).text
    assert f'id="withdraw-{gate.id}"' not in shown
    refused = http.post(
        f"/console/approvals/{gate.id}/withdraw",
        data={"csrf": hidden(shown, "csrf"), "key": "console:bob"},
        follow_redirects=False,
    )
    assert refused.status_code == 409
    assert "only they or an admin (REMIT_ADMINS) may withdraw it, not user:bob" in refused.text
    assert harness.approvals.get(gate.id).status == "pending"

    sign_in(http, harness, "user:ann", by="user:ann")
    form = form_of(http.get(page).text, f"withdraw-{gate.id}")
    assert "Withdraw</button>" in form
    data = {"csrf": hidden(form, "csrf"), "key": hidden(form, "key"), "reason": "a typo"}
    # Without its CSRF token, nothing is withdrawn.
    forged = http.post(f"/console/approvals/{gate.id}/withdraw", data={**data, "csrf": "forged"})
    assert forged.status_code == 403
    assert harness.approvals.get(gate.id).status == "pending"

    done = http.post(f"/console/approvals/{gate.id}/withdraw", data=data, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert done.headers["location"] == page
    after = http.get(page).text
    assert f"Withdrew Refund sku-1 at 1200 ({gate.id}): the run carries on" in after
    assert f'id="withdraw-{gate.id}"' not in after
    withdrawn = harness.approvals.get(gate.id)
    assert (withdrawn.status, withdrawn.decided_by, withdrawn.decided_via, withdrawn.reason) == (
        "withdrawn",
        "user:ann",
        "console",
        "a typo",
    )
    # The same form sent again withdraws nothing more.
    again = http.post(f"/console/approvals/{gate.id}/withdraw", data=data)
    assert "already withdrawn by this form" in again.text
    assert harness.wait(run.run_id).output == {
        "branch": "withdrawn",
        "by": "user:ann",
        "reason": "a typo",
    }
    assert len(harness.approvals.audit(gate.id)) == 1

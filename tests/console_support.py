"""What the console's HTTP tests share: reading a page's forms, and signing in by a link as a
browser does (starlette's TestClient keeps the cookies)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from remit import App
from remit.serve.api import create_api
from remit.testing import Harness


def policies_in(folder: Path, policies: str, principals: str | None = None) -> Path:
    """`folder/policies`, holding `policies` (Cedar) and, if given, `principals.toml`."""
    made = folder / "policies"
    made.mkdir()
    (made / "desk.cedar").write_text(policies)
    if principals is not None:
        (made / "principals.toml").write_text(principals)
    return made


@contextmanager
def console_of(harness: Harness) -> Iterator[TestClient]:
    """The HTTP API and the console over `harness`'s client, as a browser reaches them."""
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


# A harness and the console over it, as a test's fixture hands them out.
Desk = tuple[Harness, TestClient]


@contextmanager
def console_desk(app: App, database_url: str, policies: Path, *, actor: str) -> Iterator[Desk]:
    """A harness on `app` under `policies`, acting as `actor`, and the console over it."""
    with (
        Harness(app, database_url=database_url, actor=actor, policies=policies) as harness,
        console_of(harness) as http,
    ):
        yield harness, http


def form_of(html: str, form_id: str) -> str:
    """The HTML of `form#form_id` on the page."""
    found = re.search(rf'<form[^>]* id="{form_id}".*?</form>', html, re.S)
    assert found is not None, f"no form#{form_id} in {html}"
    return found.group(0)


def hidden(html: str, name: str, within: str | None = None) -> str:
    """The value of the first input named `name` (in `form#within`, if given)."""
    if within is not None:
        html = form_of(html, within)
    found = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def csrf_of(html: str) -> str:
    return hidden(html, "csrf")


def sign_in(
    http: TestClient, harness: Harness, principal: str = "user:ann", *, by: str = "user:carol"
) -> str:
    """Sign `principal` in by a link that `by` made, in a fresh cookie jar; checks that the runs
    page then shows them signed in, and returns the CSRF token their forms carry."""
    http.cookies.clear()
    _, code = harness.client.services.signins.link(principal, by=by)
    shown = http.get(f"/console/sign-in?code={code}")
    assert shown.status_code == 200
    done = http.post(
        "/console/sign-in",
        data={"code": code, "csrf": csrf_of(shown.text), "next": "/console/runs"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    assert done.headers["location"] == "/console/runs"
    page = http.get("/console/runs")
    assert page.status_code == 200
    assert f'<strong id="principal">{principal}</strong>' in page.text
    return csrf_of(page.text)

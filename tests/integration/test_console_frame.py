"""The console's frame, on both databases: signing in by link and by password, the session
cookie, the CSRF check of every form, signing out, the headers every page sends, and the runs
page with its filters and pages. Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit import load_app
from remit.console.pages import runs as runs_page
from remit.policy.signin import LONGEST_PASSWORD
from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import csrf_of, sign_in

DEMO_APP = Path(__file__).resolve().parent.parent / "apps" / "demo_app"


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    with Harness(load_app(DEMO_APP), database_url=database_url, actor="user:carol") as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def test_a_page_without_a_session_goes_to_the_sign_in_page(http: TestClient) -> None:
    home = http.get("/", follow_redirects=False)
    assert (home.status_code, home.headers["location"]) == (303, "/console/runs")
    page = http.get("/console/runs?status=failed", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/console/sign-in?next=/console/runs%3Fstatus%3Dfailed"
    shown = http.get(page.headers["location"])
    assert "remit login-link --for user:&lt;you&gt;" in shown.text
    # A form posted without a session goes, once signed in, back to the page it is on.
    posted = http.post("/console/inbox/apr_1", data={"csrf": "x"}, follow_redirects=False)
    assert (posted.status_code, posted.headers["location"]) == (
        303,
        "/console/sign-in?next=/console/inbox",
    )
    # The API beside it still wants its token, and answers JSON.
    assert http.get("/runs").status_code == 401


def test_a_link_signs_in_once_with_a_cookie_scripts_cannot_read(
    http: TestClient, harness: Harness
) -> None:
    _, code = harness.client.services.signins.link("user:ann", by="user:carol")
    shown = http.get(f"/console/sign-in?code={code}")
    # Opening the link spends nothing: its button's post does.
    assert 'type="submit" class="primary">Sign in</button>' in shown.text
    done = http.post(
        "/console/sign-in",
        data={"code": code, "csrf": csrf_of(shown.text), "next": "/console/ledger"},
        follow_redirects=False,
    )
    assert (done.status_code, done.headers["location"]) == (303, "/console/ledger")
    cookie = next(v for k, v in done.headers.multi_items() if v.startswith("remit_session="))
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Path=/" in cookie
    assert "Secure" not in cookie  # served over plain http here

    http.cookies.clear()
    again = http.get(f"/console/sign-in?code={code}")
    reused = http.post("/console/sign-in", data={"code": code, "csrf": csrf_of(again.text)})
    assert reused.status_code == 401
    assert "remit login-link" in reused.text
    assert http.get("/console/runs", follow_redirects=False).status_code == 303


def test_behind_tls_the_cookie_is_secure(harness: Harness) -> None:
    api = create_api(harness.client, allowed_hosts=["testserver"], secure_cookies=True)
    # A Secure cookie goes back only over https, as a browser sends it.
    with TestClient(api, base_url="https://testserver") as http:
        _, code = harness.client.services.signins.link("user:ann", by="user:carol")
        shown = http.get(f"/console/sign-in?code={code}")
        done = http.post(
            "/console/sign-in",
            data={"code": code, "csrf": csrf_of(shown.text)},
            follow_redirects=False,
        )
        cookie = next(v for k, v in done.headers.multi_items() if v.startswith("remit_session="))
        assert "Secure" in cookie
        # The message a signed-out page shows travels Secure too.
        page = http.get("/console/runs")
        out = http.post(
            "/console/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False
        )
        flash = next(v for k, v in out.headers.multi_items() if v.startswith("remit_flash="))
        assert "Secure" in flash
        assert "HttpOnly" in flash


def test_a_page_that_fails_is_a_page_and_the_api_beside_it_answers_json(
    http: TestClient, harness: Harness
) -> None:
    missing = http.get("/console/nowhere")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    assert "There is no page at /console/nowhere" in missing.text
    assert missing.headers["x-frame-options"] == "DENY"
    sign_in(http, harness)
    wrong = http.get("/console/sign-out")  # a form's address, asked for as a page
    assert wrong.status_code == 405
    assert wrong.headers["content-type"].startswith("text/html")
    assert '<strong id="principal">user:ann</strong>' in wrong.text  # still signed in
    assert "/console/sign-out is where a form is sent, not a page to open" in wrong.text
    api = http.get("/nowhere")
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/json"
    assert "error" in api.json()


def test_a_sign_in_goes_back_only_to_the_console(http: TestClient, harness: Harness) -> None:
    _, code = harness.client.services.signins.link("user:ann", by="user:carol")
    shown = http.get(f"/console/sign-in?code={code}&next=//evil.example/x")
    assert "evil.example" not in shown.text
    done = http.post(
        "/console/sign-in",
        data={"code": code, "csrf": csrf_of(shown.text), "next": "https://evil.example/"},
        follow_redirects=False,
    )
    assert done.headers["location"] == "/console/runs"


def test_a_sign_in_form_without_its_csrf_value_is_refused(
    http: TestClient, harness: Harness
) -> None:
    _, code = harness.client.services.signins.link("user:ann", by="user:carol")
    http.get(f"/console/sign-in?code={code}")
    refused = http.post("/console/sign-in", data={"code": code, "csrf": "made-up"})
    assert refused.status_code == 403
    assert "no valid CSRF token" in refused.text
    # The code was not spent by the refused post.
    assert http.get("/console/runs", follow_redirects=False).status_code == 303
    assert sign_in(http, harness) != ""


def test_a_password_signs_in_and_a_wrong_one_does_not(http: TestClient, harness: Harness) -> None:
    harness.client.services.signins.set_password(
        "user:ann", "correct horse battery", by="user:carol"
    )
    shown = http.get("/console/sign-in")
    wrong = http.post(
        "/console/sign-in/password",
        data={"principal": "user:ann", "password": "not it at all", "csrf": csrf_of(shown.text)},
    )
    assert wrong.status_code == 401
    shown = http.get("/console/sign-in")
    right = http.post(
        "/console/sign-in/password",
        data={
            "principal": "user:ann",
            "password": "correct horse battery",
            "csrf": csrf_of(shown.text),
        },
        follow_redirects=False,
    )
    assert right.status_code == 303
    assert '<strong id="principal">user:ann</strong>' in http.get("/console/runs").text


def test_a_password_does_not_match_a_longer_one_that_begins_with_it(harness: Harness) -> None:
    longest = "p" * LONGEST_PASSWORD
    harness.client.services.signins.set_password("user:ann", longest, by="user:carol")
    assert harness.client.services.signins.check_password("user:ann", longest)
    assert not harness.client.services.signins.check_password("user:ann", longest + "x")


def test_signing_out_ends_the_session_for_a_copied_cookie_too(
    http: TestClient, harness: Harness
) -> None:
    csrf = sign_in(http, harness)
    copied = http.cookies.get("remit_session")
    assert copied

    refused = http.post("/console/sign-out", data={})
    assert refused.status_code == 403
    assert http.get("/console/runs", follow_redirects=False).status_code == 200

    out = http.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert (out.status_code, out.headers["location"]) == (303, "/console/sign-in")
    assert "user:ann signed out." in http.get("/console/sign-in").text
    http.cookies.set("remit_session", copied)
    assert http.get("/console/runs", follow_redirects=False).status_code == 303
    # The sign-in page says why the cookie no longer works.
    assert "this session was signed out: sign in again" in http.get("/console/runs").text


def test_pages_run_only_their_own_scripts_and_may_not_be_framed(
    http: TestClient, harness: Harness
) -> None:
    sign_in(http, harness)
    page = http.get("/console/runs")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert '<script src="/console/static/htmx.min.js" defer></script>' in page.text
    script = http.get("/console/static/htmx.min.js")
    assert script.status_code == 200
    assert "htmx" in script.text[:2000]


def test_the_runs_page_filters_and_pages_by_key(
    http: TestClient, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        harness.client.runs.start(
            "refund", {"account": f"acme-{n}", "amount": 10 + n}, by="user:ann"
        )
    carol = harness.client.runs.start("refund", {"account": "globex", "amount": 5}, by="user:carol")
    sign_in(http, harness)

    every = http.get("/console/runs").text
    assert every.count('<a href="/console/runs/run_') == 4
    mine = http.get("/console/runs?started_by=user:carol").text
    assert mine.count('<a href="/console/runs/run_') == 1
    assert f"/console/runs/{carol.run_id}" in mine
    none = http.get("/console/runs?workflow=refund&status=cancelled").text
    assert "No runs match these filters." in none
    bad = http.get("/console/runs?status=nope&record=invoice")
    assert "status &#39;nope&#39; is not one of" in bad.text
    assert "is not type:id" in bad.text

    monkeypatch.setattr(runs_page, "PAGE_SIZE", 3)
    first = http.get("/console/runs").text
    assert first.count('<a href="/console/runs/run_') == 3
    older = re.search(r'<a href="(/console/runs\?before=[^"]+)" rel="next">Older</a>', first)
    assert older is not None
    second = http.get(older.group(1).replace("&amp;", "&")).text
    assert second.count('<a href="/console/runs/run_') == 1
    assert 'rel="next"' not in second
    seen = set(re.findall(r'/console/runs/(run_[0-9a-f]+)"', first + second))
    assert len(seen) == 4


def test_a_page_whose_code_fails_shows_a_500_page_and_keeps_the_details_in_the_log(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    api = create_api(harness.client, allowed_hosts=["testserver"])

    @api.get("/console/broken")
    def broken() -> None:
        raise RuntimeError("the secret detail")

    with TestClient(api, raise_server_exceptions=False) as http:
        shown = http.get("/console/broken")
    assert shown.status_code == 500
    assert shown.headers["content-type"].startswith("text/html")
    assert "The server failed" in shown.text
    assert "the server failed (RuntimeError); its log has the details" in shown.text
    assert "the secret detail" not in shown.text
    assert "the secret detail" in caplog.text

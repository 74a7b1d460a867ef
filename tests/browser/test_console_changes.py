"""The Changes pages in Chromium, with JavaScript and without, on SQLite and Postgres: `remit
serve --worker` on a copy of `tests/apps/change_app` (its repo on a fake forge), a change opened
and checked by that worker, and a person who finds it in the list and opens its page: its
checks, its review waiting in the inbox, and what happened to it so far.

With `REMIT_CONSOLE_SCREENSHOTS=1` the two pages are saved as docs/console/changes.png and
change.png (from the run with JavaScript on SQLite)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from remit import Client
from remit.changes.store import Change
from tests.browser.conftest import Shots, serve_with_worker, stop_serving
from tests.change_support import Shop, shop_at
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.forked import ForkedProcess

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


class Desk:
    """`remit serve --worker` on the shop, on a database of its own, with a client on it for
    what a test sets up behind the browser's back, and one change opened and waiting at its
    review."""

    def __init__(self, shop: Shop, database_url: str, tmp: Path, backend: str) -> None:
        self.shop = shop
        self.backend = backend
        self.tmp = tmp
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_AS": "user:ann",
            "REMIT_POLL_INTERVAL": "0.1",
        }
        for unset in ("REMIT_URL", "REMIT_TOKEN"):
            self.env.pop(unset, None)
        self.url = ""
        self.proc: ForkedProcess | None = None
        self.client = Client.connect(shop.folder, database_url, by="user:ann")

    def start(self, timeout: float = 90) -> None:
        self.proc, self.url = serve_with_worker(
            self.shop.folder, self.env, self.tmp / "serve.log", timeout
        )

    def log(self) -> str:
        path = self.tmp / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def open_change(self, branch: str, title: str, timeout: float = 600) -> Change:
        """Push a commit onto `branch`, open a change of it, and wait for its run to wait at
        its review."""
        self.shop.forge.push(self.shop.repo, branch, {"NOTES.md": f"{title}\n"}, title, "ann")
        change = self.client.changes.open(branch, title=title)
        deadline = time.monotonic() + timeout
        while (change.status, change.run_status) != ("review", "waiting"):
            assert time.monotonic() < deadline, (
                f"change {change.id} is {change.status}, never review:\n{self.log()[-4000:]}"
            )
            time.sleep(0.1)
            change = self.client.changes.get(change.id)
        return change

    def link(self, principal: str) -> str:
        _, code = self.client.services.signins.link(principal, by="user:carol")
        return f"{self.url}/console/sign-in?code={code}"

    def stop(self) -> None:
        stop_serving(self.proc)
        self.client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def desk(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Desk, Change]]:
    """The shop served with its worker on a fresh database, once per database, and a change
    waiting at its review."""
    tmp = tmp_path_factory.mktemp(f"changes-{request.param}")
    url = f"sqlite:///{tmp / 'remit.sqlite'}" if request.param == "sqlite" else None
    url = url or new_postgres_database()
    with pytest.MonkeyPatch.context() as monkeypatch:
        running = Desk(shop_at(tmp, monkeypatch), url, tmp, request.param)
        try:
            running.start()
            yield running, running.open_change("notes", "Add notes")
        finally:
            running.stop()
            if request.param == "postgres":
                drop_postgres_database(url)


def test_a_change_is_found_in_the_list_and_followed_to_its_page(
    page: Page, desk: tuple[Desk, Change], js: bool
) -> None:
    served, change = desk
    assert change.head is not None
    shots = Shots(
        os.environ.get("REMIT_CONSOLE_SCREENSHOTS") == "1" and js and served.backend == "sqlite"
    )
    page.goto(served.link("user:ann"))
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/runs$"))

    page.get_by_role("link", name="Changes", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/changes$"))
    expect(page.get_by_role("heading", name="Changes", exact=True)).to_be_visible()
    listed = page.locator(f"#change-{change.id}")
    expect(listed).to_be_visible()
    for said in ("review", "notes", "Add notes", "user:ann", change.head[:12]):
        expect(listed).to_contain_text(said)
    shots(page, "changes")

    listed.get_by_role("link", name=change.id).click()
    expect(page).to_have_url(re.compile(rf"/console/changes/{change.id}$"))
    expect(page.locator("h1")).to_have_text(f"Change {change.id}: Add notes")
    expect(page.locator("#change-status")).to_have_text("review")
    for name in ("test", "plan", "deploy-check"):
        check = page.locator(f"#check-{name}")
        expect(check.locator(".status")).to_have_text("ok")
        expect(check.locator("pre")).to_be_visible()
    expect(page.locator("#check-test pre")).to_contain_text(re.compile(r"\d+ passed"))
    expect(page.locator("#check-plan pre")).to_contain_text("Plan: 1 to create")
    review = page.locator("#review")
    decide = review.get_by_role("link", name="decide in the inbox")
    expect(decide).to_have_attribute("href", re.compile(r"^/console/inbox#gate-apr_"))
    expect(page.locator("#merge")).to_contain_text("Not merged yet.")
    expect(page.locator("#deploys")).to_contain_text("Not deployed")
    expect(page.locator("#activity")).to_contain_text("change request #1 opened for notes")
    shots(page, "change")

    # Its run is a link away, as any run.
    page.locator("dl.facts").get_by_role("link", name=change.run_id).click()
    expect(page).to_have_url(re.compile(rf"/console/runs/{change.run_id}$"))
    expect(page.locator("#status")).to_have_text("waiting")

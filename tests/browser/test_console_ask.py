"""The Ask page in Chromium, with JavaScript and without, on SQLite and Postgres: `remit serve
--worker` on the example desk (its agent on the scripted model), and carol, who asks why ann's
write-off of inv_1003 waits, sees the answer (with JavaScript, appended as the turn's events
come; without, after the page has reloaded itself), has the agent draft its approval at 400,
confirms it in the draft box, and follows the act to the write-off's run, done.

With `REMIT_CONSOLE_SCREENSHOTS=1` the chat with its draft is saved as docs/console/ask.png
(from the run with JavaScript on SQLite)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from remit import Client
from remit.agent import Chats
from tests.browser.conftest import Shots, serve_with_worker, stop_serving
from tests.chat_support import (
    ANN,
    APPROVE,
    CAROL,
    WAITS_FOR,
    WHY,
    start_write_off,
    wait_for_run,
)
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.e2e.cli_support import ACME
from tests.forked import ForkedProcess

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

# How long a turn may take to show, under a loaded machine.
TURN_MS = 60_000


class Desk:
    """`remit serve --worker` on the example desk and a database of its own, with a client on
    it for what a test sets up behind the browser's back."""

    def __init__(self, database_url: str, tmp: Path, backend: str) -> None:
        self.backend = backend
        self.tmp = tmp
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_FAKES_DIR": str(tmp / "fakes"),
            "REMIT_AS": ANN,
            "REMIT_POLL_INTERVAL": "0.1",
        }
        for unset in ("REMIT_URL", "REMIT_TOKEN"):
            self.env.pop(unset, None)
        self.url = ""
        self.proc: ForkedProcess | None = None
        self.client = Client.connect(ACME, database_url, by=ANN, environ=self.env)

    def start(self, timeout: float = 90) -> None:
        self.proc, self.url = serve_with_worker(ACME, self.env, self.tmp / "serve.log", timeout)

    def log(self) -> str:
        path = self.tmp / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def link(self, principal: str) -> str:
        _, code = self.client.services.signins.link(principal, by=CAROL)
        return f"{self.url}/console/sign-in?code={code}"

    def stop(self) -> None:
        stop_serving(self.proc)
        self.client.close()


@pytest.fixture(params=BACKENDS)
def desk(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Desk]:
    """The example desk served with its worker on a fresh database and fakes, for each test:
    the write-off a test approves credits the payments fake's invoice, which the next test's
    write-off of it could not credit again."""
    tmp = tmp_path_factory.mktemp(f"ask-{request.param}")
    url = f"sqlite:///{tmp / 'remit.sqlite'}" if request.param == "sqlite" else None
    url = url or new_postgres_database()
    running = Desk(url, tmp, request.param)
    try:
        running.start()
        yield running
    finally:
        running.stop()
        if request.param == "postgres":
            drop_postgres_database(url)


def test_ask_see_the_draft_confirm_and_see_the_run(page: Page, desk: Desk, js: bool) -> None:
    run_id, approval_id = start_write_off(desk.client)
    shots = Shots(
        os.environ.get("REMIT_CONSOLE_SCREENSHOTS") == "1" and js and desk.backend == "sqlite"
    )
    page.goto(desk.link(CAROL))
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/runs$"))

    page.get_by_role("link", name="Ask", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/ask$"))
    expect(page.get_by_role("heading", name="Ask", exact=True)).to_be_visible()

    # A new chat with the question: the agent's reads and its answer, naming the gate.
    page.get_by_label("A new chat").fill(WHY)
    page.get_by_role("button", name="New chat").click()
    expect(page).to_have_url(re.compile(r"/console/ask/chat_[0-9a-z]+$"))
    messages = page.locator("#messages")
    expect(messages.locator("li.msg-user").first).to_contain_text(WHY)
    expect(messages.locator("li.msg-tool").first).to_be_visible(timeout=TURN_MS)
    answer = messages.locator("li.msg-assistant").last
    expect(answer).to_contain_text(approval_id, timeout=TURN_MS)
    expect(answer).to_contain_text(WAITS_FOR)
    expect(page.locator("#thinking")).to_have_count(0, timeout=TURN_MS)

    # "approve it at 400": the draft box, with what it would do and the buttons.
    page.get_by_label("Ask the agent").fill(APPROVE)
    page.get_by_role("button", name="Send").click()
    draft = page.locator("#draft")
    expect(draft).to_be_visible(timeout=TURN_MS)
    expect(draft.locator("#draft-summary")).to_contain_text(approval_id)
    expect(draft.get_by_role("button", name="Confirm")).to_be_visible()
    expect(draft.get_by_role("button", name="Discard")).to_be_visible()
    # Its forms name the draft shown, so that a confirm acts on it and on no later one.
    draft_id = draft.locator("#draft-id").inner_text()
    assert draft_id.startswith("drf_")
    expect(draft.locator('#draft-confirm input[name="draft_id"]')).to_have_value(draft_id)
    expect(draft.locator('#draft-discard input[name="draft_id"]')).to_have_value(draft_id)
    shots(page, "ask")

    draft.get_by_role("button", name="Confirm").click()
    expect(page.locator("#flash")).to_contain_text("Confirmed")
    expect(page.locator("#draft")).to_have_count(0)
    act = messages.locator("li.msg-act").last
    expect(act).to_contain_text("done")
    wait_for_run(desk.client, run_id, "done")

    # The act names the write-off's run: one click away, done.
    act.get_by_role("link", name=run_id).click()
    expect(page).to_have_url(re.compile(rf"/console/runs/{run_id}$"))
    expect(page.locator("#status")).to_have_text("done")


# Counts the EventSources the page has open (ask.js's streams), across hx-boost's swaps.
COUNT_STREAMS = """
(() => {
  const Real = window.EventSource;
  if (!Real) { return; }
  window.__streams = new Set();
  function Counted(url, options) {
    const source = new Real(url, options);
    window.__streams.add(source);
    const close = source.close.bind(source);
    source.close = () => { window.__streams.delete(source); close(); };
    return source;
  }
  Counted.prototype = Real.prototype;
  Counted.CONNECTING = Real.CONNECTING;
  Counted.OPEN = Real.OPEN;
  Counted.CLOSED = Real.CLOSED;
  window.EventSource = Counted;
})();
"""


def test_leaving_a_thinking_chat_closes_its_stream(page: Page, desk: Desk, js: bool) -> None:
    """hx-boost swaps the page without unloading ask.js: the chat's stream is closed when the
    person goes to another page, and coming back follows the chat with one stream, not two."""
    if not js:
        pytest.skip("the stream is ask.js's: without JavaScript the page reloads itself")
    chats = Chats(desk.client)
    chat_id = chats.open(by=CAROL).id
    # A turn that goes on as long as the test looks (no run answers it).
    assert chats.store.update(chat_id, status="thinking")
    page.add_init_script(COUNT_STREAMS)
    page.goto(desk.link(CAROL))
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/runs$"))

    def streams() -> int:
        return int(page.evaluate("window.__streams ? window.__streams.size : -1"))

    for _ in range(2):
        page.get_by_role("link", name="Ask", exact=True).click()
        expect(page).to_have_url(re.compile(r"/console/ask$"))
        page.locator(f"#chat-{chat_id} a").click()
        expect(page).to_have_url(re.compile(rf"/console/ask/{chat_id}$"))
        expect(page.locator("#thinking")).to_be_visible()
        page.wait_for_function("window.__streams && window.__streams.size === 1")
        page.wait_for_timeout(500)
        assert streams() == 1
        # Away to the runs: the body is swapped (hx-boost), the script stays, the stream ends.
        page.get_by_role("link", name="Runs", exact=True).click()
        expect(page).to_have_url(re.compile(r"/console/runs$"))
        page.wait_for_function("window.__streams && window.__streams.size === 0")
    assert chats.store.update(chat_id, status="idle")

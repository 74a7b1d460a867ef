"""The console's Ask page, on both databases: the signed-in person's chats, one chat's messages,
the form that asks the agent (posted with the session's CSRF token, redirecting back to the
chat), the page reloading itself while the agent thinks when there is no JavaScript, the
chat's events behind the session cookie, and the draft box whose Confirm does what the agent
proposed, under the policies, if it is still the draft the page showed (its forms name it). On the example desk with its scripted model (carol a controller,
ann a clerk). Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from markupsafe import escape

from remit import Client
from remit.agent import Chats
from remit.core.schema import audit
from remit.serve.api import create_api
from remit.testing import Harness
from tests.chat_support import (
    ANN,
    APPROVE,
    BEING_CONFIRMED,
    CAROL,
    GONE_DRAFT,
    NO_DRAFT,
    STALE_DRAFT,
    TURN_SECONDS,
    WAITS_FOR,
    WHY,
    acme_desk,
    start_write_off,
    wait_for_run,
)
from tests.console_support import sign_in
from tests.e2e.cli_support import ACME

pytestmark = [pytest.mark.timeout(600)]


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    with acme_desk(database_url, tmp_path / "fakes") as running:
        yield running


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def texts(html: str) -> list[str]:
    """The text of each message of the chat on the page, in order."""
    return re.findall(r'<div class="text">(.*?)</div>', html, re.S)


def idle(harness: Harness, chat_id: str, by: str = CAROL) -> None:
    view = Chats(harness.client).wait(chat_id, timeout=TURN_SECONDS, by=by)
    assert view.chat.status == "idle", view


def test_carol_asks_sees_the_draft_and_confirms_it_in_the_console(
    harness: Harness, http: TestClient
) -> None:
    run_id, approval_id = start_write_off(harness.client)
    csrf = sign_in(http, harness, CAROL, by=CAROL)

    empty = http.get("/console/ask")
    assert empty.status_code == 200
    assert '<a href="/console/ask" aria-current="page">Ask</a>' in empty.text
    assert "No chats yet" in empty.text

    # A new chat with a question: the post redirects to the chat, whose turn goes on.
    opened = http.post("/console/ask", data={"csrf": csrf, "text": WHY}, follow_redirects=False)
    assert opened.status_code == 303
    url = opened.headers["location"]
    chat_id = url.rsplit("/", 1)[1]
    assert url == f"/console/ask/{chat_id}"
    idle(harness, chat_id)
    page = http.get(url)
    assert page.status_code == 200
    shown = texts(page.text)
    assert shown[0] == str(escape(WHY))
    assert approval_id in shown[-1]
    assert WAITS_FOR in shown[-1]
    assert 'http-equiv="refresh"' not in page.text  # idle: nothing to wait for
    assert 'id="draft"' not in page.text
    assert f'id="chat-{chat_id}" aria-current="true"' in page.text

    # The events of an idle chat: all of them after `after`, then `idle`.
    events = http.get(f"{url}/events", params={"after": 1})
    assert events.headers["content-type"].startswith("text/event-stream")
    assert events.text.count("event: message") == len(shown) - 1
    assert events.text.rstrip().split("\n\n")[-1].startswith("event: idle")

    # The agent drafts the decision; the page shows it with Confirm and Discard (a decision
    # is not tried in a sandbox: only a start is).
    asked = http.post(f"{url}/messages", data={"csrf": csrf, "text": APPROVE})
    assert asked.status_code == 200  # followed to the chat
    idle(harness, chat_id)
    page = http.get(url)
    draft = re.search(r'<div id="draft".*?</div>\s*</div>', page.text, re.S)
    assert draft is not None, page.text
    assert approval_id in draft.group(0)
    assert 'id="draft-confirm"' in draft.group(0)
    assert 'id="draft-discard"' in draft.group(0)
    assert 'id="draft-sandbox"' not in draft.group(0)
    assert harness.client.approvals.get(approval_id).status == "pending"
    # Each of the draft's forms names the draft shown.
    shown = Chats(harness.client).get(chat_id, by=CAROL).chat.draft
    assert shown is not None
    hidden = f'<input type="hidden" name="draft_id" value="{shown.id}">'
    assert draft.group(0).count(hidden) == 2  # Confirm and Discard
    assert f'data-draft="{shown.id}"' in draft.group(0)

    # A confirm without the session's CSRF token is refused, and does nothing.
    forged = http.post(f"{url}/draft/confirm", data={"csrf": "forged", "draft_id": shown.id})
    assert forged.status_code == 403
    assert harness.client.approvals.get(approval_id).status == "pending"

    # A draft settled or replaced since the page showed it (another tab, say): nothing done,
    # the chat shown again with the room's words, its draft as it is now.
    for verb in ("confirm", "discard"):
        stale = http.post(f"{url}/draft/{verb}", data={"csrf": csrf, "draft_id": GONE_DRAFT})
        assert stale.status_code == 409
        assert STALE_DRAFT in stale.text
        assert 'id="refusal"' in stale.text
        assert hidden in stale.text
    # A confirmation of the draft acting already: likewise, 409.
    store = Chats(harness.client).store
    assert store.claim(chat_id, shown.id)
    busy = http.post(f"{url}/draft/confirm", data={"csrf": csrf, "draft_id": shown.id})
    assert busy.status_code == 409
    assert BEING_CONFIRMED in busy.text
    assert store.update(chat_id, acting=None, acting_since=None)
    assert harness.client.approvals.get(approval_id).status == "pending"

    # A confirm must name the draft the page showed: a form without it does nothing.
    bare = http.post(f"{url}/draft/confirm", data={"csrf": csrf})
    assert bare.status_code == 422
    assert "This form names no draft" in bare.text
    assert harness.client.approvals.get(approval_id).status == "pending"

    done = http.post(f"{url}/draft/confirm", data={"csrf": csrf, "draft_id": shown.id})
    assert done.status_code == 200
    assert re.search(r'id="flash"[^>]*>Confirmed: Approved ', done.text)
    assert 'id="draft"' not in done.text
    assert 'class="msg-act outcome-done"' in done.text
    wait_for_run(harness.client, run_id, "done")
    assert harness.client.approvals.get(approval_id).status == "approved"

    again = http.post(f"{url}/draft/confirm", data={"csrf": csrf, "draft_id": shown.id})
    assert again.status_code == 409
    assert NO_DRAFT in again.text
    # A form with no draft's id (an older page's) acts on the chat's draft as it is: none.
    bare = http.post(f"{url}/draft/discard", data={"csrf": csrf})
    assert bare.status_code == 409
    assert NO_DRAFT in bare.text

    # An act confirmed that fails (a drafted start of a workflow the app does not have): the
    # page says it failed, not that it was confirmed.
    failing = shown.model_copy(
        update={
            "id": "drf_0123456789abcdef",
            "act": "start",
            "args": {"workflow": "no.such", "input": {}},
            "summary": "Start no.such",
            "sandbox_ok": True,
        }
    )
    assert store.update(chat_id, draft=failing.model_dump(mode="json"))
    failed = http.post(f"{url}/draft/confirm", data={"csrf": csrf, "draft_id": failing.id})
    assert failed.status_code == 200
    assert re.search(r'id="flash"[^>]*>Failed: [^<]*no\.such', failed.text), failed.text
    assert 'class="msg-act outcome-failed"' in failed.text

    # ann sees her own chats only; carol's chat is not hers to read.
    sign_in(http, harness, ANN, by=CAROL)
    assert chat_id not in http.get("/console/ask").text
    refused = http.get(url)
    assert refused.status_code == 403
    assert "Refused by the policies" in refused.text
    assert http.get(f"{url}/events").status_code == 403


def test_the_events_of_a_thinking_chat_are_read_without_an_audit_row_a_poll(
    harness: Harness, http: TestClient
) -> None:
    """sam, an admin, opens carol's chat while it thinks: the page and the stream's first read
    are recorded, once; the stream's polls are not."""
    chats = Chats(harness.client)
    chat_id = chats.open(by=CAROL).id
    assert chats.store.update(chat_id, status="thinking")
    sign_in(http, harness, "user:sam", by=CAROL)
    page = http.get(f"/console/ask/{chat_id}")
    assert page.status_code == 200
    assert 'data-thinking="true"' in page.text
    assert "only they may write to it" in page.text

    def reads() -> int:
        with harness.client.db.engine.connect() as conn:
            return len(
                conn.execute(
                    sa.select(audit.c.id).where(
                        audit.c.action == "read_chats", audit.c.target == chat_id
                    )
                ).all()
            )

    assert reads() == 1
    # The chat goes idle a moment later (its turn over): the stream, polling, then ends.
    timer = threading.Timer(1.0, chats.store.update, args=(chat_id,), kwargs={"status": "idle"})
    timer.start()
    try:
        events = http.get(f"/console/ask/{chat_id}/events")
    finally:
        timer.join()
    assert events.status_code == 200
    assert events.text.rstrip().split("\n\n")[-1].startswith("event: idle")
    assert reads() == 1


def test_while_the_agent_thinks_the_page_says_so_and_reloads_without_javascript(
    database_url: str, harness: Harness, tmp_path: Path
) -> None:
    """A console on a client with no worker: the turn is never taken up, so the chat stays
    thinking and the page is seen as it is meanwhile."""
    with (
        Client.connect(ACME, database_url, by=CAROL) as alone,
        TestClient(create_api(alone, allowed_hosts=["testserver"])) as http,
    ):
        harness.worker.stop(timeout=0)  # no one runs the turn
        csrf = sign_in(http, harness, CAROL, by=CAROL)
        opened = http.post("/console/ask", data={"csrf": csrf, "text": WHY}, follow_redirects=False)
        url = opened.headers["location"]
        page = http.get(url)
        assert page.status_code == 200
        assert '<noscript><meta http-equiv="refresh" content="2"></noscript>' in page.text
        assert 'data-thinking="true"' in page.text
        assert 'id="thinking"' in page.text
        assert re.search(r'<textarea id="ask-text"[^>]* disabled', page.text)
        assert '<script src="/console/static/ask.js"></script>' in page.text
        # A second message while the first turn goes is refused, and kept in the form.
        busy = http.post(f"{url}/messages", data={"csrf": csrf, "text": APPROVE})
        assert busy.status_code == 409
        assert "still answering" in busy.text
        assert http.get("/console/static/ask.js").status_code == 200

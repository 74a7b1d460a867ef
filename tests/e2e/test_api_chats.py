"""The HTTP API of chats with the operator agent, as a person's program sees it: `POST /chats`
opens one, `POST /chats/{id}/messages` asks (202, the turn a run), `GET /chats/{id}/events`
follows the turn as server-sent events, `GET /chats/{id}` and `/messages` read it, and
`POST /chats/{id}/draft/confirm|discard|sandbox` act on what the agent proposes (the draft the
body names, `{"draft_id": …}`, the one the person saw; else the chat's), as the token's
principal under the policies. On the example desk with its scripted model (carol a controller,
ann a clerk, dave named by no policy), both databases; and on an app with no agent, whose
chats are 404 saying so. Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit.agent import Chats
from remit.agent.models import Chat, ChatMessage, ChatView
from remit.console.chat_events import chat_stream
from remit.core.errors import ChatBusy, ChatNotFound, DecisionRefused, NoDraft, UnknownWorkflow
from remit.core.schema import audit, denials
from remit.remote import RemoteClient
from remit.remote_chats import chat_error
from remit.serve.api import create_api
from remit.serve.chat_routes import TurnView
from remit.testing import Harness
from tests.chat_support import (
    ANN,
    APPROVE,
    BEING_CONFIRMED,
    CAROL,
    DAVE,
    DRAFT_ACT,
    DRAFT_AMOUNT,
    GONE_DRAFT,
    NO_DRAFT,
    STALE_DRAFT,
    TURN_SECONDS,
    WAITS_FOR,
    WHY,
    acme_desk,
    roles,
    start_write_off,
    wait_for_run,
)
from tests.support import make_app

SAM = "user:sam"  # an admin: may read others' chats

pytestmark = [pytest.mark.timeout(600)]


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    with acme_desk(database_url, tmp_path / "fakes") as running:
        yield running


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def as_(harness: Harness, principal: str) -> dict[str, str]:
    _, token = harness.client.services.tokens.create(principal, by=CAROL)
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def refused(response: Any, status: int, error: str, code: str | None = None) -> dict[str, Any]:
    """The error body of `response`, checked to be `status`, to say `error` and, for remit's
    own errors, to name it by its `code` (a request that does not parse has none)."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == ({"error", "reasons"} if status == 422 else {"error", "reasons", "code"})
    assert error in body["error"], body
    if code is not None:
        assert body["code"] == code, body
    return body


def events(text: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """A server-sent event stream's events: (kind, data as JSON, id), comments left out."""
    found = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if fields:
            found.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return found


def ask(api: TestClient, chat_id: str, text: str, who: dict[str, str]) -> list[Any]:
    """Ask in the chat and follow its turn to the end: the stream's events."""
    before = ok(api.get(f"/chats/{chat_id}/messages", headers=who))
    after = before[-1]["seq"] if before else 0
    turn = ok(api.post(f"/chats/{chat_id}/messages", json={"text": text}, headers=who), 202)
    assert set(turn) == set(TurnView.model_fields)
    assert turn["chat"]["status"] == "thinking"
    assert turn["chat"]["turn"] == turn["run_id"]
    streamed = api.get(f"/chats/{chat_id}/events", params={"after": after}, headers=who)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("text/event-stream")
    return events(streamed.text)


def test_carol_asks_why_a_write_off_waits_and_approves_it_through_the_api(
    harness: Harness, api: TestClient
) -> None:
    carol = as_(harness, CAROL)
    run_id, approval_id = start_write_off(harness.client)

    opened = ok(api.post("/chats", json={"title": "inv_1003"}, headers=carol), 201)
    assert set(opened) == set(ChatView.model_fields)
    chat = opened["chat"]
    assert set(chat) == set(Chat.model_fields)
    assert chat["id"].startswith("chat_")
    assert (chat["owner"], chat["title"], chat["status"], chat["draft"]) == (
        CAROL,
        "inv_1003",
        "idle",
        None,
    )
    assert opened["messages"] == []
    chat_id = chat["id"]
    assert [each["id"] for each in ok(api.get("/chats", headers=carol))] == [chat_id]

    # The first turn: the agent reads and answers, naming the gate; every message is streamed
    # once, in order, its `seq` the event's id; the stream ends with `idle`.
    streamed = ask(api, chat_id, WHY, carol)
    assert streamed[-1][0] == "idle"
    assert streamed[-1][1]["status"] == "idle"
    said = [data for kind, data, _ in streamed if kind == "message"]
    assert [data["seq"] for data in said] == sorted({data["seq"] for data in said})
    assert [str(data["seq"]) for kind, data, ident in streamed if kind == "message"] == [
        ident for kind, _, ident in streamed if kind == "message"
    ]
    assert roles(said) == ["user", "tool", "tool", "tool", "assistant"]
    assert approval_id in said[-1]["text"]
    assert WAITS_FOR in said[-1]["text"]
    view = ok(api.get(f"/chats/{chat_id}", headers=carol))
    assert view["messages"] == said
    assert view["messages"][0] == {**view["messages"][0], "text": WHY, "by": CAROL}
    assert view["chat"]["draft"] is None

    # The second: a draft of the decision, for carol to confirm.
    streamed = ask(api, chat_id, APPROVE, carol)
    draft = streamed[-1][1]["draft"]
    assert draft is not None
    assert draft["act"] == DRAFT_ACT
    assert draft["args"]["approval_id"] == approval_id
    assert draft["args"]["edit"]["amount"] == DRAFT_AMOUNT
    assert approval_id in draft["summary"]
    assert harness.client.approvals.get(approval_id).status == "pending"  # nothing done yet
    assert draft["id"].startswith("drf_")
    seen = draft["id"]
    before = ok(api.get(f"/chats/{chat_id}/messages", headers=carol))

    # A draft named that is not the chat's (the one the person saw was settled or replaced):
    # 409, nothing done, nothing written, the draft kept.
    stale = {"draft_id": GONE_DRAFT}
    for verb in ("confirm", "discard", "sandbox"):
        answer = api.post(f"/chats/{chat_id}/draft/{verb}", json=stale, headers=carol)
        refused(answer, 409, STALE_DRAFT, "NoDraft")
    # A confirmation names the draft: without it, 422 (naming the field, or the body when
    # there is none), nothing done.
    confirm = f"/chats/{chat_id}/draft/confirm"
    refused(api.post(confirm, headers=carol), 422, "the body: Field required")
    for body in ({}, {"draft_id": ""}):
        refused(api.post(confirm, json=body, headers=carol), 422, "`draft_id`")
    refused(
        api.post(
            f"/chats/{chat_id}/draft/confirm", json={"draft_id": seen, "by": ANN}, headers=carol
        ),
        422,
        "`by` is not a field",
    )
    # A confirmation of the draft acting already (another tab's, say): 409, nothing done.
    store = Chats(harness.client).store
    assert store.claim(chat_id, seen)
    busy = {"draft_id": seen}
    refused(
        api.post(f"/chats/{chat_id}/draft/confirm", json=busy, headers=carol),
        409,
        BEING_CONFIRMED,
        "ChatBusy",
    )
    refused(
        api.post(f"/chats/{chat_id}/draft/discard", json=busy, headers=carol),
        409,
        BEING_CONFIRMED,
        "ChatBusy",
    )
    assert store.update(chat_id, acting=None, acting_since=None)
    assert ok(api.get(f"/chats/{chat_id}/messages", headers=carol)) == before
    assert ok(api.get(f"/chats/{chat_id}", headers=carol))["chat"]["draft"] == draft
    assert harness.client.approvals.get(approval_id).status == "pending"

    acted = ok(api.post(f"/chats/{chat_id}/draft/confirm", json={"draft_id": seen}, headers=carol))
    assert set(acted) == set(ChatMessage.model_fields)
    assert acted["role"] == "act"
    assert acted["data"]["outcome"] == "done"
    assert acted["data"]["draft_id"] == seen
    assert ok(api.get(f"/chats/{chat_id}", headers=carol))["chat"]["draft"] is None
    wait_for_run(harness.client, run_id, "done")
    assert harness.client.approvals.get(approval_id).status == "approved"
    # Nothing left to confirm: 409, nothing written; the draft confirmed, named again, is
    # settled, and not done twice.
    refused(api.post(f"/chats/{chat_id}/draft/discard", headers=carol), 409, NO_DRAFT, "NoDraft")
    refused(api.post(f"/chats/{chat_id}/draft/sandbox", headers=carol), 409, NO_DRAFT, "NoDraft")
    refused(
        api.post(f"/chats/{chat_id}/draft/confirm", json={"draft_id": seen}, headers=carol),
        409,
        NO_DRAFT,
        "NoDraft",
    )
    newer = ok(
        api.get(f"/chats/{chat_id}/messages", params={"after": acted["seq"] - 1}, headers=carol)
    )
    assert [each["seq"] for each in newer] == [acted["seq"]]


def test_a_discard_names_the_draft_and_an_empty_body_acts_on_the_chats_draft(
    harness: Harness, api: TestClient
) -> None:
    carol = as_(harness, CAROL)
    _, approval_id = start_write_off(harness.client)
    chat_id = ok(api.post("/chats", json={}, headers=carol), 201)["chat"]["id"]
    ask(api, chat_id, WHY, carol)
    first = ask(api, chat_id, APPROVE, carol)[-1][1]["draft"]
    discarded = ok(
        api.post(f"/chats/{chat_id}/draft/discard", json={"draft_id": first["id"]}, headers=carol)
    )
    assert discarded["data"]["outcome"] == "discarded"
    assert discarded["data"]["draft_id"] == first["id"]

    # Asked again: a new draft, with an id of its own; the first one, named, is refused.
    second = ask(api, chat_id, APPROVE, carol)[-1][1]["draft"]
    assert second["id"] != first["id"]
    refused(
        api.post(f"/chats/{chat_id}/draft/confirm", json={"draft_id": first["id"]}, headers=carol),
        409,
        STALE_DRAFT,
    )
    assert harness.client.approvals.get(approval_id).status == "pending"
    # No body (or an empty one): the chat's draft as it is now.
    acted = ok(api.post(f"/chats/{chat_id}/draft/discard", headers=carol))
    assert acted["data"]["draft_id"] == second["id"]
    assert harness.client.approvals.get(approval_id).status == "pending"


def test_a_remote_client_reads_an_error_by_its_code_not_its_words() -> None:
    def read(status: int, code: str | None, message: str = "words") -> Any:
        return chat_error(status, message, "/chats/c/draft/confirm", code=code)

    busy = read(409, "ChatBusy", "chat chat_1 is still answering (run run_0a1b)")
    assert isinstance(busy, ChatBusy)
    assert busy.run_id == "run_0a1b"
    # The words do not decide: a busy draft's message read without its code is not busy.
    assert read(409, None, f"chat chat_1's draft drf_1 {BEING_CONFIRMED}") is None
    assert isinstance(read(409, "NoDraft", BEING_CONFIRMED), NoDraft)
    refusal = read(409, "DecisionRefused", "decision refused, nothing was written: apr_1 no")
    assert isinstance(refusal, DecisionRefused)
    assert not refusal.by_policy
    assert str(refusal) == "decision refused, nothing was written: apr_1 no"
    assert read(403, "DecisionRefused").by_policy
    assert isinstance(read(404, "UnknownWorkflow"), UnknownWorkflow)
    assert isinstance(read(404, "ChatNotFound"), ChatNotFound)
    assert read(404, None) is None  # a 404 with no code: not taken for a missing chat


def test_remote_chats_raise_what_the_room_raises(harness: Harness, api: TestClient) -> None:
    """`RemoteClient.chats` on the API: a draft's act refused as things stand (the approval
    decided meanwhile) comes back as `DecisionRefused`, not as a missing draft; a confirmation
    must name its draft; an act that failed is its `act` message, outcome `failed`."""
    _, token = harness.client.services.tokens.create(CAROL, by=CAROL)
    remote = RemoteClient("http://testserver", token)
    remote._http.close()
    remote._http = api  # its requests to the API in this process, with the token
    api.headers["Authorization"] = f"Bearer {token}"
    chats = remote.chats
    _, approval_id = start_write_off(harness.client)
    chat_id = chats.open().id
    chats.say(chat_id, WHY)
    assert chats.wait(chat_id, timeout=TURN_SECONDS).chat.status == "idle"
    chats.say(chat_id, APPROVE)
    draft = chats.wait(chat_id, timeout=TURN_SECONDS).chat.draft
    assert draft is not None
    with pytest.raises(NoDraft, match="name the draft"):
        chats.confirm(chat_id)
    with pytest.raises(NoDraft, match=STALE_DRAFT):
        chats.confirm(chat_id, draft_id=GONE_DRAFT)
    with pytest.raises(ChatNotFound):
        chats.get("chat_000000000000")

    # Decided meanwhile, elsewhere: the room refuses the act (409) and the draft stays.
    harness.client.approvals.decide(approval_id, "approved", key="elsewhere", by=CAROL)
    with pytest.raises(DecisionRefused) as refusal:
        chats.confirm(chat_id, draft_id=draft.id)
    assert not refusal.value.by_policy
    assert approval_id in str(refusal.value)
    view = chats.get(chat_id)
    assert view.chat.draft == draft
    assert view.messages[-1].data["outcome"] == "refused"

    # A draft whose act fails (a start of a workflow the app does not have): 200, `failed`.
    failing = draft.model_copy(
        update={"act": "start", "args": {"workflow": "no.such", "input": {}}, "sandbox_ok": True}
    )
    assert Chats(harness.client).store.update(chat_id, draft=failing.model_dump(mode="json"))
    failed = chats.confirm(chat_id, draft_id=failing.id)
    assert failed.data["outcome"] == "failed"
    assert "no.such" in failed.text
    assert chats.get(chat_id).chat.draft is None


def test_a_stream_reads_without_auditing_and_ends_cleanly_when_refused(
    harness: Harness, api: TestClient
) -> None:
    """sam, an admin, follows carol's thinking chat: the route's read is audited once, the
    stream's polls never; dave, refused, gets an `error` event and the stream ends."""
    chats = Chats(harness.client)
    chat_id = chats.open(by=CAROL).id
    assert chats.store.update(chat_id, status="thinking")  # a turn going, as far as it shows

    async def stream(by: str) -> list[str]:
        return [each async for each in chat_stream(chats, chat_id, by, poll=0.01, limit=0.5)]

    def reads() -> int:
        with harness.client.db.engine.connect() as conn:
            found = conn.scalars(
                sa.select(sa.func.count())
                .select_from(audit)
                .where(audit.c.action == "read_chats", audit.c.target == chat_id)
            )
            return int(found.one())

    followed = asyncio.run(stream(SAM))
    assert len(followed) == 1  # the chat once, then nothing changes until the limit
    assert followed[0].startswith("event: chat\n")
    assert reads() == 0
    sam = as_(harness, SAM)
    for _ in range(3):
        ok(api.get(f"/chats/{chat_id}", headers=sam))
    assert reads() == 1  # once in a while, not at each look

    [ended] = asyncio.run(stream(DAVE))
    assert ended.startswith("event: error\n")
    assert "user:dave may not" in json.loads(ended.split("data: ", 1)[1])["error"]


def test_a_chat_is_its_owners_and_the_api_says_what_is_wrong(
    harness: Harness, api: TestClient
) -> None:
    carol, dave = as_(harness, CAROL), as_(harness, DAVE)
    chat_id = ok(api.post("/chats", json={}, headers=carol), 201)["chat"]["id"]

    # Streaming an idle chat ends at once: the chat, then `idle`.
    streamed = api.get(f"/chats/{chat_id}/events", headers=carol)
    assert [kind for kind, _, _ in events(streamed.text)] == ["chat", "idle"]

    refused(
        api.get("/chats/chat_000000000000", headers=carol), 404, "chat_000000000000", "ChatNotFound"
    )
    refused(
        api.get("/chats/chat_000000000000/events", headers=carol),
        404,
        "chat_000000000000",
        "ChatNotFound",
    )
    refused(api.post(f"/chats/{chat_id}/messages", json={"text": ""}, headers=carol), 422, "text")
    refused(
        api.post(f"/chats/{chat_id}/messages", json={"text": "x" * 8001}, headers=carol),
        422,
        "text",
    )
    refused(
        api.post(f"/chats/{chat_id}/messages", json={"text": "hi", "by": ANN}, headers=carol),
        422,
        "`by` is not a field of a message",
    )
    refused(api.post(f"/chats/{chat_id}/draft/confirm", headers=carol), 422, "")
    refused(api.post(f"/chats/{chat_id}/draft/confirm", json={}, headers=carol), 422, "draft_id")
    refused(api.post(f"/chats/{chat_id}/draft/discard", json={}, headers=carol), 409, NO_DRAFT)
    answer = api.post(
        f"/chats/{chat_id}/draft/confirm", json={"draft_id": GONE_DRAFT}, headers=carol
    )
    refused(answer, 409, NO_DRAFT)

    # dave, named by no policy, reads nothing of carol's chat and may not write to it; what
    # the policies refused is recorded.
    assert ok(api.get("/chats", headers=dave)) == []
    refused(api.get(f"/chats/{chat_id}", headers=dave), 403, "user:dave may not", "PolicyDenied")
    refused(api.get("/chats", params={"owner": CAROL}, headers=dave), 403, "user:dave may not")
    refused(api.post(f"/chats/{chat_id}/messages", json={"text": "hi"}, headers=dave), 403, "")
    refused(api.get(f"/chats/{chat_id}/events", headers=dave), 403, "user:dave may not")
    with harness.client.db.engine.connect() as conn:
        actions = conn.scalars(sa.select(denials.c.action).where(denials.c.principal == DAVE))
        assert "read_chats" in set(actions)
    assert ok(api.get(f"/chats/{chat_id}/messages", headers=carol)) == []


def test_an_app_with_no_agent_has_no_chats(database_url: str) -> None:
    with (
        Harness(make_app(), database_url=database_url, actor=CAROL) as harness,
        TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as api,
    ):
        token = as_(harness, CAROL)
        for method, path in (
            ("POST", "/chats"),
            ("GET", "/chats"),
            ("GET", "/chats/chat_1"),
            ("GET", "/chats/chat_1/messages"),
            ("GET", "/chats/chat_1/events"),
            ("POST", "/chats/chat_1/draft/confirm"),
        ):
            body: dict[str, Any] | None = {} if (method, path) == ("POST", "/chats") else None
            if path.endswith("/confirm"):
                body = {"draft_id": GONE_DRAFT}
            answer = api.request(method, path, json=body, headers=token)
            refused(
                answer, 404, "has no operator agent: declare one with App(agent=", "ChatNotFound"
            )
        answer = api.post("/chats/chat_1/messages", json={"text": "hi"}, headers=token)
        refused(answer, 404, "has no operator agent")

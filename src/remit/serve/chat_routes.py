"""The routes of chats with the operator agent (`remit.agent`): opening one, reading them, a
message to one (which starts its turn, a run of the built-in workflow `chat`), following its
turn as it goes (`GET /chats/{id}/events`, server-sent events), and what becomes of the act the
agent proposes (its draft): confirmed, discarded, or tried on fresh fakes first.

Each route acts as the token's principal. A chat is its owner's: another may read it only as
the policies allow (`read_chats` on the app, recorded when refused), and none but its owner may
write to it or act on its draft. An app with no operator agent has no chats: every route is 404
there, saying so (the room's `ChatNotFound`)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from remit.agent.models import Chat, ChatMessage, ChatView
from remit.agent.room import Chats
from remit.client import Client
from remit.console.chat_events import EVENT_STREAM, chat_stream, last_seq
from remit.serve.errors import error_responses
from remit.serve.models import RequestBody
from remit.serve.params import NUL_FREE, PRINCIPAL_FORM, NewestFirst
from remit.serve.requests import Who

# The longest message a person may send (the room refuses a longer one too).
MAX_TEXT = 8000

ChatId = Annotated[
    str,
    Path(max_length=64, json_schema_extra=NUL_FREE, description="The chat's id: chat_…"),
]
After = Annotated[
    int,
    Query(ge=0, description="Only the messages after this one (its `seq`); 0 for all of them."),
]


class OpenChatRequest(RequestBody):
    """A chat to open, as the token's principal, who is its owner."""

    noun: ClassVar[str] = "a chat"
    made: ClassVar[str] = "the chat is opened"

    title: str = Field(
        default="",
        max_length=200,
        json_schema_extra=NUL_FREE,
        description="What it is about, in a line (default: the first message, once sent).",
    )


class SayRequest(RequestBody):
    """A message to a chat: what the person asks or tells the agent."""

    noun: ClassVar[str] = "a message"
    made: ClassVar[str] = "the message is sent"

    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT,
        json_schema_extra=NUL_FREE,
        description="What to ask or tell the agent: why is the write-off of inv_1003 waiting?",
    )


class DraftRequest(RequestBody):
    """Which draft to act on: the one the person saw (its id). Without it, whatever draft the
    chat holds now, which may not be the one they saw."""

    noun: ClassVar[str] = "a draft's act"
    made: ClassVar[str] = "the draft is acted on"

    draft_id: str | None = Field(
        default=None,
        max_length=64,
        json_schema_extra=NUL_FREE,
        description="The draft's id (drf_…), as the chat showed it (`chat.draft.id`): another "
        "draft, or one already settled, is refused (409) and nothing is done.",
    )


class ConfirmRequest(RequestBody):
    """The draft to confirm: the one the person saw (its id), always named, for a draft is
    done only once read."""

    noun: ClassVar[str] = "a confirmation"
    made: ClassVar[str] = "the draft is confirmed"

    draft_id: str = Field(
        min_length=1,
        max_length=64,
        json_schema_extra=NUL_FREE,
        description="The draft's id (drf_…), as the chat showed it (`chat.draft.id`): another "
        "draft, or one already settled, is refused (409) and nothing is done.",
    )


class TurnView(BaseModel):
    """A turn the message started: its run, and the chat, thinking until the run ends."""

    run_id: str = Field(description="The run of the built-in workflow `chat` that is the turn.")
    chat: Chat


def chat_routes(routes: APIRouter, client: Client) -> None:
    """The routes of chats, behind the token (see the module's docstring)."""
    room = _Room(client)

    @routes.post(
        "/chats", status_code=201, responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def open_chat(body: OpenChatRequest, who: Who) -> ChatView:
        """Open a chat with the operator agent, owned by the token's principal."""
        chats = room()
        opened = chats.open(title=body.title, by=who)
        return chats.get(opened.id, by=who)

    @routes.get("/chats", responses=error_responses(401, 403, 404, 422, 503))
    def list_chats(
        who: Who,
        owner: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra={"pattern": PRINCIPAL_FORM.pattern},
                description="Whose chats (default: the token's principal's own). Another's "
                "are read as the policies allow (`read_chats`).",
            ),
        ] = None,
        limit: NewestFirst = 50,
    ) -> list[Chat]:
        """The chats, newest first: the token's principal's own, or `owner`'s as the policies
        allow (`read_chats` on the app; refused, 403, and recorded)."""
        return room().list(owner=owner, limit=limit, by=who)

    @routes.get("/chats/{chat_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def get_chat(chat_id: ChatId, who: Who) -> ChatView:
        """One chat with its messages, oldest first: its owner's, or another's as the policies
        allow (`read_chats`)."""
        return room().get(chat_id, by=who)

    @routes.post(
        "/chats/{chat_id}/messages",
        status_code=202,
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def say(chat_id: ChatId, body: SayRequest, who: Who) -> TurnView:
        """Send the chat a message, as its owner: it starts the agent's turn, a run of the
        built-in workflow `chat`, and answers at once (202) while the chat thinks. A message
        while a turn goes is refused (409, nothing written). `GET /chats/{id}/events` follows
        the turn; `GET /chats/{id}` shows it once the chat is idle again."""
        chats = room()
        run_id = chats.say(chat_id, body.text, by=who)
        return TurnView(run_id=run_id, chat=chats.chat(chat_id, by=who))

    @routes.get(
        "/chats/{chat_id}/messages", responses=error_responses(400, 401, 403, 404, 422, 503)
    )
    def list_messages(chat_id: ChatId, who: Who, after: After = 0) -> list[ChatMessage]:
        """The chat's messages after `after` (their `seq`), oldest first."""
        return room().messages(chat_id, after=after, by=who)

    @routes.get(
        "/chats/{chat_id}/events",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "Server-sent events: `message` (a ChatMessage as JSON, its `seq` "
                "the event's id) for each new message, `chat` (the Chat as JSON) when its status "
                "or draft changes, and last `idle` (the Chat) once no turn goes.",
                "content": {EVENT_STREAM: {"schema": {"type": "string"}}},
            },
            **error_responses(400, 401, 403, 404, 422, 503),
        },
    )
    async def chat_events(
        request: Request,
        chat_id: ChatId,
        who: Who,
        after: After = 0,
        last_event_id: Annotated[
            str | None,
            Header(
                alias="Last-Event-ID",
                max_length=20,
                description="Sent by a browser reconnecting: the last message it had (its "
                "`seq`), read as `after`.",
            ),
        ] = None,
    ) -> StreamingResponse:
        """Follow the chat as it goes: each new message, its status and draft as they change,
        until the chat is idle (at once, for a chat no turn goes in), and for at most 300 s. A
        reconnecting browser's `Last-Event-ID` takes up where it left off. A chat that may no
        longer be read meanwhile ends the stream with an `error` event (`{"error": why}`)."""
        chats = room()
        # Read once before streaming, and audited (another's chat read as the policies allow):
        # an unknown chat, or another's, is an error answer, not a stream that ends. The
        # stream's polls are not audited again.
        await run_in_threadpool(chats.chat, chat_id, by=who)
        since = max(after, last_seq(last_event_id))
        return StreamingResponse(
            chat_stream(chats, chat_id, who, after=since, gone=request.is_disconnected),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @routes.post(
        "/chats/{chat_id}/draft/confirm",
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def confirm(chat_id: ChatId, who: Who, body: ConfirmRequest) -> ChatMessage:
        """Do what the chat's draft proposes, as its owner and under the policies: the answer
        is the `act` message saying what became of it (`data.outcome` `done`, or `failed`
        with the reason: look at it). The body names the draft the person saw
        (`{"draft_id": "drf_…"}`, required: a draft is confirmed only once read). A refusal
        by the policies is 403 with their reason, another refusal (the approval decided
        already, say) 409, each recorded in the chat too; the draft stays. No draft, or not
        the one named (settled or replaced since): 409, nothing done. Another confirmation of
        the same draft still acting: 409 too. An error's `code` says which (`DecisionRefused`,
        `NoDraft`, `ChatBusy`...)."""
        return room().confirm(chat_id, draft_id=body.draft_id, by=who)

    @routes.post(
        "/chats/{chat_id}/draft/discard",
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def discard(chat_id: ChatId, who: Who, body: DraftRequest | None = None) -> ChatMessage:
        """Drop the chat's draft, as its owner: nothing is done. The body, optional, names the
        draft the person saw (`{"draft_id": "drf_…"}`). No draft, or not the one named: 409.
        A draft being confirmed is not discarded: 409."""
        return room().discard(chat_id, draft_id=_draft_id(body), by=who)

    @routes.post(
        "/chats/{chat_id}/draft/sandbox",
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def sandbox(chat_id: ChatId, who: Who, body: DraftRequest | None = None) -> ChatMessage:
        """Try the drafted start on fresh fakes in a throwaway database, as its owner: the
        answer is the `sandbox` message with what the run did there. The live instance is not
        touched, and the draft stays to confirm or discard. The body, optional, names the draft
        the person saw (`{"draft_id": "drf_…"}`). No draft, not the one named, or one that is
        not a start: 409."""
        return room().sandbox(chat_id, draft_id=_draft_id(body), by=who)


def _draft_id(body: DraftRequest | None) -> str | None:
    return None if body is None else body.draft_id


class _Room:
    """The app's chats (`Chats(client)`), made when first asked for."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.chats: Chats | None = None

    def __call__(self) -> Chats:
        if self.chats is None:
            self.chats = Chats(self.client)
        return self.chats

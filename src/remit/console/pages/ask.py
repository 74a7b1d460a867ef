"""The Ask page: the signed-in person's chats with the operator agent (`remit.agent`), and one
chat: its messages, a form to ask the agent, and the act it proposes (its draft) with Confirm,
Discard and, for a start, Try in sandbox.

Each form is posted with the session's CSRF token and redirects back to the chat (Post/Redirect/
Get), so the page works without JavaScript: while the agent is thinking it reloads itself every
2 s (a `<meta http-equiv="refresh">` inside `<noscript>`). With JavaScript, `static/ask.js`
follows the chat's events from `/console/ask/{id}/events` (the API's stream, behind the session
cookie rather than a token) and appends each message as it comes, then reloads the page once
the turn is over, to show the draft with its forms.

Each of the draft's forms names the draft it showed (a hidden `draft_id`, which a confirmation
requires): a draft settled or replaced meanwhile (say in another tab) is not acted on, and the
chat is shown again as it is now (409), as it is when a confirmation of the draft is already
acting. A confirm the policies refuse shows the chat again (403) with their reason; the room has
recorded the refusal in the chat, and the draft stays. A confirmed act that failed says so
("Failed: …"), not "Confirmed". An app with no operator agent says so.

The events route reads the chat once (audited, as the page is) before it streams, off the
event loop; the stream's polls are not audited (`remit.console.chat_events`)."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from remit.agent.models import ChatMessage, ChatView
from remit.agent.room import Chats
from remit.client import Client
from remit.console.chat_events import EVENT_STREAM, chat_stream, last_seq
from remit.console.errors import reasons_of, status_of
from remit.console.pages.inbox import posted
from remit.console.render import Page
from remit.console.session import Viewer
from remit.core.errors import (
    ChatBusy,
    ChatNotFound,
    DecisionRefused,
    NoDraft,
    RemitError,
    TaskRefused,
)
from remit.policy.cedar import PolicyDenied

# How many of the person's chats the page lists, newest first.
PAGE_SIZE = 30
# The longest message the form takes (the room's limit).
MAX_TEXT = 8000
# What the forms under a chat do, and what the flash says once done: a confirmation by what
# became of the act (the `act` message's outcome).
DRAFT_VERBS = {"confirm": "Confirmed", "discard": "Discarded", "sandbox": "Tried in the sandbox"}
OUTCOMES = {"done": "Confirmed", "failed": "Failed", "refused": "Refused"}


def add(router: APIRouter, client: Client, page: Page) -> None:
    chats = Chats(client)

    def chat_url(chat_id: str) -> str:
        return f"/console/ask/{quote(chat_id, safe='')}"

    def missing(request: Request, viewer: Viewer, error: ChatNotFound) -> Response:
        """No such chat, or an app with no operator agent: the room's words, 404."""
        return page.render(
            request, "error.html", viewer, status=404, title="Not found", reasons=[str(error)]
        )

    def show(
        request: Request,
        viewer: Viewer,
        chat_id: str | None,
        *,
        status: int = 200,
        refusal: list[str] | None = None,
        text: str = "",
    ) -> Response:
        """The Ask page for `viewer`, with the chat `chat_id` open (None: the list alone). An
        app with no operator agent says so, as the Changes page does of an app with no forge."""
        if chat_id is None and getattr(client.app, "agent", None) is None:
            return page.render(
                request, "ask.html", viewer, title="Ask", has_agent=False, chats=[], view=None
            )
        try:
            listed = chats.list(limit=PAGE_SIZE, by=viewer.principal)
            view: ChatView | None = None
            if chat_id is not None:
                view = chats.get(chat_id, by=viewer.principal)
        except ChatNotFound as error:
            return missing(request, viewer, error)
        return page.render(
            request,
            "ask.html",
            viewer,
            status=status,
            title="Ask" if view is None else f"Ask · {view.chat.title or view.chat.id}",
            has_agent=True,
            chats=listed,
            view=view,
            mine=view is not None and view.chat.owner == viewer.principal,
            last_seq=max((m.seq for m in view.messages), default=0) if view else 0,
            refusal=refusal or [],
            text=text,
            max_text=MAX_TEXT,
        )

    @router.get("/console/ask")
    def ask_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        return show(request, viewer, None)

    @router.get("/console/ask/{chat_id}")
    def chat_page(
        request: Request, chat_id: str, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        return show(request, viewer, chat_id)

    @router.get("/console/ask/{chat_id}/events")
    async def chat_events(
        request: Request,
        chat_id: str,
        viewer: Annotated[Viewer, Depends(page.sessions.viewer)],
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        """The chat's events as `GET /chats/{id}/events` streams them, for the page's script,
        as the signed-in person (the session's cookie goes with an EventSource; a token does
        not)."""
        after = request.query_params.get("after") or ""
        since = max(last_seq(after), last_seq(last_event_id))
        try:
            # An unknown chat, or another's: no stream. The one audited read (the stream's
            # polls are not), off the event loop.
            await run_in_threadpool(chats.chat, chat_id, by=viewer.principal)
        except ChatNotFound as error:
            return Response(str(error), status_code=404, media_type="text/plain")
        except PolicyDenied as refused:
            return Response(str(refused), status_code=403, media_type="text/plain")
        return StreamingResponse(
            chat_stream(
                chats, chat_id, viewer.principal, after=since, gone=request.is_disconnected
            ),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @router.post("/console/ask")
    def open_chat(
        request: Request,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form: Annotated[FormData, Depends(posted)],
    ) -> Response:
        """Open a chat, and send it the message typed, if any."""
        text = _text(form)
        try:
            opened = chats.open(by=viewer.principal)
        except ChatNotFound as error:
            return missing(request, viewer, error)
        if text:
            chats.say(opened.id, text, by=viewer.principal)
        return page.redirect(chat_url(opened.id))

    @router.post("/console/ask/{chat_id}/messages")
    def say(
        request: Request,
        chat_id: str,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form: Annotated[FormData, Depends(posted)],
    ) -> Response:
        """Send the chat a message: the agent's turn starts, and the page shows it thinking."""
        text = _text(form)
        if not text:
            return show(request, viewer, chat_id, status=422, refusal=["Type a message first."])
        try:
            chats.say(chat_id, text, by=viewer.principal)
        except ChatBusy:
            return show(
                request,
                viewer,
                chat_id,
                status=409,
                text=text,
                refusal=["The agent is still answering: send this once it has."],
            )
        except ChatNotFound as error:
            return missing(request, viewer, error)
        except PolicyDenied:
            raise  # another's chat: the policies' refusal, as a page
        except RemitError as refused:  # a message the room does not take (too long, say)
            return show(request, viewer, chat_id, status=422, text=text, refusal=[str(refused)])
        return page.redirect(chat_url(chat_id))

    @router.post("/console/ask/{chat_id}/draft/{verb}")
    def draft_act(
        request: Request,
        chat_id: str,
        verb: str,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form: Annotated[FormData, Depends(posted)],
    ) -> Response:
        """Confirm, discard or try in the sandbox the chat's draft (the one the page showed,
        its id the form's `draft_id`), then show the chat. A draft settled or replaced since
        the page showed it is not acted on: the chat is shown again (409), as it is now."""
        act = {"confirm": chats.confirm, "discard": chats.discard, "sandbox": chats.sandbox}
        if verb not in act:
            return show(
                request,
                viewer,
                chat_id,
                status=404,
                refusal=[
                    f"{verb!r} is not something to do with a draft: confirm, discard or sandbox"
                ],
            )
        shown = _draft_id(form)
        if verb == "confirm" and shown is None:
            # A page that did not name its draft (an older one's form): nothing is confirmed
            # unseen.
            return show(
                request,
                viewer,
                chat_id,
                status=422,
                refusal=["This form names no draft: read the draft below, then confirm it."],
            )
        try:
            done = act[verb](chat_id, draft_id=shown, by=viewer.principal)
        except (PolicyDenied, DecisionRefused, TaskRefused) as refused:
            # The room recorded the refusal in the chat; the draft stays.
            return show(
                request, viewer, chat_id, status=status_of(refused), refusal=reasons_of(refused)
            )
        except (NoDraft, ChatBusy) as stale:
            # Not the draft the page showed (settled or replaced since), or one a confirmation
            # is acting on: nothing done, the chat shown as it is now.
            return show(request, viewer, chat_id, status=409, refusal=[str(stale)])
        except ChatNotFound as error:
            return missing(request, viewer, error)
        return page.redirect(chat_url(chat_id), flash=_flash(verb, done))


def _flash(verb: str, done: ChatMessage) -> str:
    """What the page says of the draft's act: a confirmation by what became of it ("Failed:
    …" for an act that was not done), with the `act` message's words."""
    if verb != "confirm":
        return f"{DRAFT_VERBS[verb]}: {done.text}"
    outcome = str(done.data.get("outcome") or "")
    said = done.text
    for prefix in ("Done: ", "Failed: ", "Refused: "):
        said = said.removeprefix(prefix)
    return f"{OUTCOMES.get(outcome, outcome.capitalize() or 'Confirmed')}: {said}"


def _text(form: FormData) -> str:
    given = form.get("text")
    return given.strip() if isinstance(given, str) else ""


def _draft_id(form: FormData) -> str | None:
    """The id of the draft the page showed, which the draft's forms carry (None: the chat's
    draft as it is now)."""
    given = form.get("draft_id")
    return (given.strip() or None) if isinstance(given, str) else None

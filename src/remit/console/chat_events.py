"""A chat's server-sent events, as the HTTP API (`GET /chats/{id}/events`, behind a token) and
the console's Ask page (`/console/ask/{id}/events`, behind the session) stream them alike.

The stream polls the room (`Chats.chat`, then `Chats.messages`) every 0.25 s: the chat first,
so that once it reads idle every message of the turn is among those read after it. Its polls
are not written to the audit trail: the route reads the chat once, audited, before it streams.
A read refused meanwhile (the policies changed, say) ends the stream with an `error` event."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.concurrency import run_in_threadpool

from remit.agent.room import Chats
from remit.core.errors import ChatNotFound
from remit.policy.cedar import PolicyDenied

EVENT_STREAM = "text/event-stream"
# How often the stream asks the room what changed, how long it goes on at most, and how long
# it stays quiet before it sends a comment, so that a proxy does not close it as idle.
POLL_SECONDS = 0.25
STREAM_SECONDS = 300.0
KEEPALIVE_SECONDS = 15.0
# What of a chat, changed, is sent again as a `chat` event.
_WATCHED = {"status", "draft", "turn", "title"}


async def chat_stream(
    chats: Chats,
    chat_id: str,
    by: str,
    *,
    after: int = 0,
    gone: Callable[[], Awaitable[bool]] | None = None,
    poll: float = POLL_SECONDS,
    limit: float = STREAM_SECONDS,
) -> AsyncIterator[str]:
    """The chat's events: the chat (`chat`), each message after `after` (`message`, its `seq`
    the event's id, so that a reconnecting browser's `Last-Event-ID` takes up where it left
    off), the chat again whenever its status, draft, turn or title changes, and last `idle`
    (the chat) once no turn goes, at once for a chat that is idle already. A comment every
    15 s while nothing changes. It ends at `idle`, after `limit` seconds, when `gone()` says
    the browser has left, or with an `error` event (`{"error": why}`) when the chat may no
    longer be read (the policies refuse it now, or it is gone)."""
    ends = time.monotonic() + limit
    quiet_since = time.monotonic()
    shown: str | None = None
    while True:
        try:
            chat = await run_in_threadpool(chats.chat, chat_id, by=by, audited=False)
            fresh = await run_in_threadpool(
                chats.messages, chat_id, after=after, by=by, audited=False
            )
        except (PolicyDenied, ChatNotFound) as refused:
            yield event("error", json.dumps({"error": str(refused)}))
            return
        for message in fresh:
            after = max(after, message.seq)
            yield event("message", message.model_dump_json(), ident=str(message.seq))
        state = chat.model_dump_json(include=_WATCHED)
        changed = state != shown
        if changed:
            shown = state
            yield event("chat", chat.model_dump_json())
        if chat.status == "idle":
            yield event("idle", chat.model_dump_json())
            return
        now = time.monotonic()
        if fresh or changed:
            quiet_since = now
        elif now - quiet_since >= KEEPALIVE_SECONDS:
            quiet_since = now
            yield ": still thinking\n\n"
        if now >= ends or (gone is not None and await gone()):
            return
        await asyncio.sleep(poll)


def event(kind: str, data: str, *, ident: str | None = None) -> str:
    """One server-sent event: its kind, its id if it has one, and its data on one line (JSON,
    which holds no line break)."""
    head = f"event: {kind}\n" + (f"id: {ident}\n" if ident is not None else "")
    return f"{head}data: {data}\n\n"


def last_seq(last_event_id: str | None) -> int:
    """The message a reconnecting browser had last (its `Last-Event-ID`), 0 for none."""
    given = (last_event_id or "").strip()
    return int(given) if given.isdigit() and len(given) < 12 else 0

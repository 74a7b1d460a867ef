"""The cap on a request's body (`REMIT_MAX_BODY_BYTES`), kept before the body is read whole.

A body whose `Content-Length` is over the cap is refused with 413 without being kept; a body
sent in chunks is counted as it arrives and refused once it passes the cap. What arrives past
the cap is read and dropped (up to `DRAIN` bytes), so that the client, still sending, reads
the answer rather than a reset connection; none of it is kept in memory.

A JSON body within the cap is refused with 422, saying what to change, when it nests deeper
than `REMIT_MAX_JSON_DEPTH` (and the request's own levels, `AROUND`) or holds an integer of more
digits than Python reads (`limits.parse_json`), which the framework would answer with a 400
that says neither.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from remit.core import limits
from remit.core.errors import InputInvalid
from remit.core.limits import SETTINGS, size_text
from remit.serve.errors import ErrorBody, ErrorReason

# The most of an over-cap body read (and dropped) before answering anyway.
DRAIN = 64 * 1024 * 1024
# The levels of a request's own fields around the values it carries (an approval's edits are
# three down): a body is refused here only past the cap and these, and the value it carries is
# then held to the cap exactly, as from any other surface.
AROUND = 4


class BodyLimit:
    """ASGI middleware refusing with 413 a request body of more than `limit` bytes."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await _drain(receive, 0)
            await self._refuse(send, declared, exact=True)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away: let the app see it as it would have.
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if size > self.limit:
                chunks.clear()
                total = await _drain(receive, size) if more else size
                await self._refuse(send, total, exact=total < DRAIN)
                return
            chunks.append(chunk)
        whole = b"".join(chunks)
        if whole and _is_json(scope):
            try:
                limits.parse_json(whole, "the request body", around=AROUND)
            except InputInvalid as refused:
                await _answer(send, 422, str(refused), close=False)
                return
            except ValueError:  # not JSON: the framework says where, as for any other body
                pass
        body = {"type": "http.request", "body": whole, "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, send: Send, size: int, *, exact: bool) -> None:
        shown = size_text(size) if exact else f"more than {size_text(size)}"
        message = (
            f"the request body is {shown}, over the {size_text(self.limit)} limit "
            f"({SETTINGS['body_bytes']}): send less (a reference to the data instead of the "
            "data), or raise the limit"
        )
        await _answer(send, 413, message, close=True)


async def _answer(send: Send, status: int, message: str, *, close: bool) -> None:
    """An error answer in the API's form, `{"error": ..., "reasons": [...]}`."""
    body = ErrorBody(error=message, reasons=[ErrorReason(approval_id=None, reason=message)])
    payload = json.dumps(body.sent()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"connection", b"close")] if close else headers,
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _is_json(scope: Scope) -> bool:
    """Whether the framework reads the body as JSON: it says so, or says nothing."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind = bytes(value).split(b";")[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drain(receive: Receive, size: int) -> int:
    """Read and drop the rest of the body, up to `DRAIN` bytes in all; the bytes seen."""
    while size < DRAIN:
        message = await receive()
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return size


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A `receive` that gives `messages` first, then what `receive` gives."""
    queued: list[Any] = list(messages)

    async def replayed() -> Message:
        if queued:
            message: Message = queued.pop(0)
            return message
        return await receive()

    return replayed

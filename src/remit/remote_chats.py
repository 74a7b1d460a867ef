"""`RemoteChats`: a person's chats with the operator agent through `remit serve`, as
`RemoteClient.chats` (see `remit.remote`), answering as `remit.agent.Chats` does on the database
(`remit.surface.ChatsSurface`), as the principal of the API token.

An error answer about a chat is raised as the room raises it: 404 as `ChatNotFound` (no such
chat, or an app with no operator agent), a message refused while a turn goes as `ChatBusy`, a
draft asked for and missing (or not the one named: settled or replaced since) as `NoDraft`, a
draft another confirmation is acting on as `ChatBusy` (`chat_error`, called by `remit.remote`)."""

from __future__ import annotations

import builtins
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

from remit.agent.models import Chat, ChatMessage, ChatView
from remit.core.errors import ChatBusy, ChatNotFound, NoDraft, RemitError

# How often `wait` asks whether the turn has ended.
WAIT_POLL = 0.25
# A run's id, as the server's refusal of a message names the turn going.
_RUN_ID = re.compile(r"\brun_[0-9a-f]+\b")
# What the room's refusal of a draft's act says when another confirmation of it is acting
# (`ChatBusy`, not `NoDraft`: look again, it may be done).
_BEING_CONFIRMED = "is being confirmed"


class _Remote(Protocol):
    """What of `RemoteClient` the chats use: its requests, and its refusal of another `by`."""

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> Any: ...
    def _as_token(self, by: str | None) -> None: ...


class RemoteChats:
    """`chats` through the HTTP API."""

    def __init__(self, remote: _Remote) -> None:
        self._remote = remote

    def open(self, *, title: str = "", by: str | None = None) -> Chat:
        self._remote._as_token(by)
        opened = self._remote._send("POST", "/chats", json={"title": title})
        return ChatView.model_validate(opened).chat

    def list(
        self, *, owner: str | None = None, limit: int = 50, by: str | None = None
    ) -> builtins.list[Chat]:
        self._remote._as_token(by)
        params = {"limit": limit} if owner is None else {"limit": limit, "owner": owner}
        return [
            Chat.model_validate(each) for each in self._remote._send("GET", "/chats", params=params)
        ]

    def get(self, chat_id: str, *, by: str | None = None) -> ChatView:
        self._remote._as_token(by)
        return ChatView.model_validate(self._remote._send("GET", _path(chat_id)))

    def messages(
        self, chat_id: str, *, after: int = 0, by: str | None = None
    ) -> builtins.list[ChatMessage]:
        self._remote._as_token(by)
        found = self._remote._send("GET", _path(chat_id, "messages"), params={"after": after})
        return [ChatMessage.model_validate(each) for each in found]

    def say(self, chat_id: str, text: str, *, by: str | None = None) -> str:
        self._remote._as_token(by)
        turn = self._remote._send("POST", _path(chat_id, "messages"), json={"text": text})
        return str(turn["run_id"])

    def wait(self, chat_id: str, *, timeout: float = 120.0, by: str | None = None) -> ChatView:
        """The chat once no turn goes in it, or as it is after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(chat_id, by=by)
            if view.chat.status == "idle" or time.monotonic() >= deadline:
                return view
            time.sleep(WAIT_POLL)

    def confirm(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        return self._draft(chat_id, "confirm", draft_id, by)

    def discard(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        return self._draft(chat_id, "discard", draft_id, by)

    def sandbox(
        self, chat_id: str, *, draft_id: str | None = None, by: str | None = None
    ) -> ChatMessage:
        return self._draft(chat_id, "sandbox", draft_id, by)

    def _draft(self, chat_id: str, verb: str, draft_id: str | None, by: str | None) -> ChatMessage:
        """Act on the chat's draft: the one `draft_id` names (the draft the person saw), if
        given, else whatever draft the chat holds now."""
        self._remote._as_token(by)
        body = None if draft_id is None else {"draft_id": draft_id}
        return ChatMessage.model_validate(
            self._remote._send("POST", _path(chat_id, "draft", verb), json=body)
        )


def chat_error(status: int, message: str, path: str) -> RemitError | None:
    """The error the room raises for an error answer about a chat (at `path`, under
    `/chats`), or None where it is not one of its own (`remit.remote` then raises its own)."""
    if status == 404:
        return ChatNotFound(message)
    if status == 409 and path.endswith("/messages"):
        named = _RUN_ID.search(message)
        return ChatBusy(message, run_id=named.group(0) if named else "")
    if status == 409 and "/draft/" in path:
        if _BEING_CONFIRMED in message:
            named = _RUN_ID.search(message)
            return ChatBusy(message, run_id=named.group(0) if named else "")
        return NoDraft(message)
    return None


def _path(chat_id: str, *parts: str) -> str:
    return "/".join(("/chats", quote(chat_id, safe=""), *parts))

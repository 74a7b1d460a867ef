"""`RemoteChats`: a person's chats with the operator agent through `remit serve`, as
`RemoteClient.chats` (see `remit.remote`), answering as `remit.agent.Chats` does on the database
(`remit.surface.ChatsSurface`), as the principal of the API token.

An error answer about a chat is raised as the room raises it, told apart by the answer's `code`
(the name of the room's error, which the routes of chats send), not by its words: `ChatNotFound`
(no such chat, or an app with no operator agent), `ChatBusy` (a turn going, or another
confirmation of the draft acting), `NoDraft` (no draft, or not the one named: settled or
replaced since), `DecisionRefused` and `TaskRefused` (the act refused as things stand; the
draft stays), `UnknownWorkflow` (a drafted start of a workflow the app does not have). Any other
error answer is raised as `remit.remote` raises it (`chat_error`, also called by it)."""

from __future__ import annotations

import builtins
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from remit.agent.models import Chat, ChatMessage, ChatView
from remit.core.errors import (
    ChatBusy,
    ChatNotFound,
    DecisionRefused,
    NoDraft,
    RemitError,
    TaskRefused,
    UnknownWorkflow,
)

# How often `wait` asks whether the turn has ended.
WAIT_POLL = 0.5
# A run's id, as the server's refusal of a message names the turn going.
_RUN_ID = re.compile(r"\brun_[0-9a-f]+\b")


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
        opened = self._send("POST", "/chats", json={"title": title})
        return ChatView.model_validate(opened).chat

    def list(
        self, *, owner: str | None = None, limit: int = 50, by: str | None = None
    ) -> builtins.list[Chat]:
        self._remote._as_token(by)
        params = {"limit": limit} if owner is None else {"limit": limit, "owner": owner}
        return [Chat.model_validate(each) for each in self._send("GET", "/chats", params=params)]

    def get(self, chat_id: str, *, by: str | None = None) -> ChatView:
        self._remote._as_token(by)
        return ChatView.model_validate(self._send("GET", _path(chat_id)))

    def messages(
        self, chat_id: str, *, after: int = 0, by: str | None = None
    ) -> builtins.list[ChatMessage]:
        self._remote._as_token(by)
        found = self._send("GET", _path(chat_id, "messages"), params={"after": after})
        return [ChatMessage.model_validate(each) for each in found]

    def say(self, chat_id: str, text: str, *, by: str | None = None) -> str:
        self._remote._as_token(by)
        turn = self._send("POST", _path(chat_id, "messages"), json={"text": text})
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
        """Confirm the draft `draft_id` names, the one the person saw: the API confirms only
        a draft named (`POST /chats/{id}/draft/confirm` requires it)."""
        if draft_id is None:
            raise NoDraft(
                f"name the draft of chat {chat_id} to confirm (its id, drf_…, as the chat "
                "showed it): a draft is confirmed only once read"
            )
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
            self._send("POST", _path(chat_id, "draft", verb), json=body)
        )

    def _send(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        return self._remote._send(method, path, json=json, params=params)


def chat_error_of(answer: httpx.Response, path: str) -> RemitError | None:
    """`chat_error` for an error answer, read from its body (`code`, `error`, `reasons`)."""
    try:
        body = answer.json()
        code, message = body.get("code"), str(body["error"])
        reasons = [
            (str(each["approval_id"] or ""), str(each["reason"])) for each in body["reasons"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return chat_error(answer.status_code, message, path, code=code, reasons=reasons)


def chat_error(
    status: int,
    message: str,
    path: str,
    *,
    code: str | None = None,
    reasons: builtins.list[tuple[str, str]] | None = None,
) -> RemitError | None:
    """The error the room raises for an error answer about a chat (at `path`, under
    `/chats`), by the answer's `code` (the room's error's name) and with its `reasons` (approval
    id, or "", and reason); None where it is not one of the room's own, or the answer has no
    code (`remit.remote` then raises its own)."""
    given = reasons or []
    if code == "ChatNotFound":
        return ChatNotFound(message)
    if code == "ChatBusy":
        named = _RUN_ID.search(message)
        return ChatBusy(message, run_id=named.group(0) if named else "")
    if code == "NoDraft":
        return NoDraft(message)
    if code == "UnknownWorkflow":
        return UnknownWorkflow(message)
    if code == "DecisionRefused":
        refused = DecisionRefused(given, by_policy=status == 403)
        refused.args = (message,)  # as the server said it
        return refused
    if code == "TaskRefused":
        task = TaskRefused("", [reason for _, reason in given], by_policy=status == 403)
        task.args = (message,)
        return task
    return None


def _path(chat_id: str, *parts: str) -> str:
    return "/".join(("/chats", quote(chat_id, safe=""), *parts))

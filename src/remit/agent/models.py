"""What a chat with the operator agent holds, as its room gives it: the chat, its messages in
order, and the act it proposes (its draft)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

# The acts the agent may propose. None happens on its word: the person confirms each.
Act = Literal["start", "decide", "resolve", "retry", "cancel", "send"]
Role = Literal["user", "assistant", "tool", "act", "sandbox", "note"]


class Draft(BaseModel):
    """An act the agent proposes, waiting for the chat's owner to confirm or discard it.

    `id` is remit's (one draft a turn), which a confirmation names so that it confirms the draft
    the person saw; `args` are the act's arguments as the client's verb takes them; `summary`
    is the line a person reads; a start may be tried on fresh fakes first (`sandbox_ok`)."""

    id: str
    tool_call_id: str
    act: Act
    args: dict[str, Any] = Field(default_factory=dict)
    summary: str
    sandbox_ok: bool = False


class Chat(BaseModel):
    """One person's chat with the operator agent. `status` is `thinking` while a turn (a run of
    the built-in workflow `chat`, `turn`) goes, else `idle`."""

    id: str
    owner: str
    engine: str
    title: str
    draft: Draft | None = None
    # The draft being confirmed (its id), while a confirmation acts on it, and since when.
    acting: str | None = None
    acting_since: datetime | None = None
    status: Literal["idle", "thinking"] = "idle"
    turn: str | None = None
    created_at: datetime
    updated_at: datetime


class ChatMessage(BaseModel):
    """One message of a chat, in order (`seq` from 1).

    `user`: what the person asked; `assistant`: the agent's answer; `tool`: a read the agent made
    (`data`: the tool and its arguments); `act`: what became of a draft (`data.outcome`: done,
    refused, discarded or failed); `sandbox`: a drafted start tried on fresh fakes (`data`: what
    it did); `note`: a turn that ended with no answer, saying why (a budget, the model's error).
    """

    seq: int
    role: Role
    text: str
    data: dict[str, Any] = Field(default_factory=dict)
    by: str
    at: datetime


class ChatView(BaseModel):
    """A chat with its messages, oldest first."""

    chat: Chat
    messages: list[ChatMessage]

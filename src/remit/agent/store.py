"""Chats as the database keeps them (`remit_chats`, `remit_chat_messages`).

A message is written under a key (what wrote it: `<run id>:<what>` for a turn's step, the
draft's tool call for what became of it), so a step that runs again writes it once. Each write
of a message locks its chat's row first: the turn's run and the person confirming a draft then
take the next `seq` one after the other.
"""

from __future__ import annotations

import builtins
import json
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.agent.models import Chat, ChatMessage, Draft, Role
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import ChatNotFound
from remit.core.schema import chat_messages, chats

# Seconds after which a confirmation's claim on a draft is taken for dead (its process died
# mid-act); another confirmation may then act, under the same keys.
STALE_CLAIM = 120.0
# The most bytes of earlier turns' messages given to the model again: a long chat keeps its
# latest turns whole.
MOST_HISTORY = 60_000


class ChatStore:
    """The chats of one app."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def create(self, owner: str, engine: str, title: str) -> Chat:
        now = self.clock.now()
        chat_id = "chat_" + uuid.uuid4().hex[:16]
        with self.db.begin() as conn:
            conn.execute(
                chats.insert().values(
                    id=chat_id,
                    app=self.app,
                    owner=owner,
                    engine=engine,
                    title=title,
                    draft=None,
                    status="idle",
                    turn=None,
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.get(chat_id)

    def get(self, chat_id: str) -> Chat:
        row = self.db.read(
            "read a chat",
            lambda conn: conn.execute(
                sa.select(chats).where(chats.c.id == chat_id, chats.c.app == self.app)
            ).first(),
        )
        if row is None:
            raise ChatNotFound(
                f"no chat {chat_id!r} in app `{self.app}` (`remit chats` lists yours)"
            )
        return _chat(row._mapping)

    def list(self, owner: str | None, *, limit: int = 50) -> builtins.list[Chat]:
        """The chats of `owner` (None: everyone's), newest first."""
        query = sa.select(chats).where(chats.c.app == self.app)
        if owner is not None:
            query = query.where(chats.c.owner == owner)
        query = query.order_by(chats.c.updated_at.desc(), chats.c.id.desc()).limit(limit)
        rows = self.db.read("list chats", lambda conn: conn.execute(query).all())
        return [_chat(row._mapping) for row in rows]

    def messages(self, chat_id: str, *, after: int = 0) -> builtins.list[ChatMessage]:
        query = (
            sa.select(chat_messages)
            .where(chat_messages.c.chat_id == chat_id, chat_messages.c.seq > after)
            .order_by(chat_messages.c.seq)
        )
        rows = self.db.read("read a chat's messages", lambda conn: conn.execute(query).all())
        return [_message(row._mapping) for row in rows]

    def history(
        self, chat_id: str, *, through: int, most: int = MOST_HISTORY
    ) -> builtins.list[Any]:
        """The model's messages of the chat's earlier turns, in order, up to message `through`:
        each turn's as its answer (or draft) stored them, then what became of each draft; the
        latest of them, up to `most` bytes."""
        query = (
            sa.select(chat_messages.c.history)
            .where(
                chat_messages.c.chat_id == chat_id,
                chat_messages.c.seq <= through,
            )
            .order_by(chat_messages.c.seq)
        )
        rows = self.db.read("read a chat's history", lambda conn: conn.execute(query).all())
        turns = [list(row[0]) for row in rows if row[0]]
        # The latest turns, up to `most` bytes; never starting with a tool's answer
        # whose call was left out.
        kept: list[list[Any]] = []
        size = 0
        for turn in reversed(turns):
            size += len(json.dumps(turn, default=str))
            if size > most and kept:
                break
            kept.insert(0, turn)
        while len(kept) > 1 and _answers_a_call(kept[0]):
            kept.pop(0)
        return [message for turn in kept for message in turn]

    def add(
        self,
        chat_id: str,
        role: Role,
        text: str,
        *,
        by: str,
        key: str,
        data: dict[str, Any] | None = None,
        history: builtins.list[Any] | None = None,
        run_id: str | None = None,
        chat: dict[str, Any] | None = None,
        when: sa.ColumnElement[bool] | None = None,
        seq: int | None = None,
        audit: dict[str, Any] | None = None,
    ) -> ChatMessage | None:
        """Append a message under `key` and return it, or the message `key` already wrote.
        `chat`: columns of the chat's row to set in the same transaction. `when`: a condition
        on the chat's row; unmet, nothing is written and None is returned, as when `seq` is
        given and is not the next. `audit`: an audit row (actor, action, target, meta) written
        with the message, and only with a message newly written."""
        now = self.clock.now()
        with self.db.begin() as conn:
            locked = conn.execute(
                sa.select(chats.c.id)
                .where(chats.c.id == chat_id, *(() if when is None else (when,)))
                .with_for_update()
            ).first()
            written = conn.execute(
                sa.select(chat_messages).where(
                    chat_messages.c.chat_id == chat_id, chat_messages.c.key == key
                )
            ).first()
            if written is not None:
                return _message(written._mapping)
            if locked is None:
                return None
            last = conn.execute(
                sa.select(sa.func.max(chat_messages.c.seq)).where(
                    chat_messages.c.chat_id == chat_id
                )
            ).scalar()
            if seq is not None and seq != (last or 0) + 1:
                return None
            values = {
                "chat_id": chat_id,
                "seq": (last or 0) + 1,
                "role": role,
                "text": text,
                "data": data or {},
                "history": history,
                "by": by,
                "run_id": run_id,
                "key": key,
                "at": now,
            }
            conn.execute(chat_messages.insert().values(**values))
            conn.execute(
                chats.update().where(chats.c.id == chat_id).values(updated_at=now, **(chat or {}))
            )
            if audit is not None:
                audit_row(conn, at=now, **audit)
        return _message(values)

    def next_seq(self, chat_id: str) -> int:
        """The `seq` the chat's next message takes, as things stand."""
        last = self.db.read(
            "read a chat's last message",
            lambda conn: conn.execute(
                sa.select(sa.func.max(chat_messages.c.seq)).where(
                    chat_messages.c.chat_id == chat_id
                )
            ).scalar(),
        )
        return int(last or 0) + 1

    def claim(self, chat_id: str, draft_id: str) -> bool:
        """Mark the chat's draft `draft_id` as being confirmed, if it is the chat's draft and
        no confirmation holds it (or one held it for `STALE_CLAIM` seconds: its process died).
        Whether this caller holds it now."""
        now = self.clock.now()
        with self.db.begin() as conn:
            row = conn.execute(
                sa.select(chats.c.draft, chats.c.acting, chats.c.acting_since)
                .where(chats.c.id == chat_id)
                .with_for_update()
            ).first()
            if row is None or not row.draft or row.draft.get("id") != draft_id:
                return False
            held = row.acting is not None and row.acting_since is not None
            if held and (now - row.acting_since).total_seconds() < STALE_CLAIM:
                return False
            conn.execute(
                chats.update()
                .where(chats.c.id == chat_id)
                .values(acting=draft_id, acting_since=now)
            )
        return True

    def update(
        self, chat_id: str, *, when: sa.ColumnElement[bool] | None = None, **values: Any
    ) -> bool:
        """Set columns of the chat's row (where `when` holds); whether it was set."""
        query = chats.update().where(chats.c.id == chat_id)
        if when is not None:
            query = query.where(when)
        with self.db.begin() as conn:
            done = conn.execute(query.values(updated_at=self.clock.now(), **values)).rowcount
        return bool(done)


def _answers_a_call(turn: list[Any]) -> bool:
    """Whether `turn` begins with tools' answers (their calls are in the turn before)."""
    first = turn[0] if turn else {}
    parts = first.get("parts", []) if isinstance(first, dict) else []
    return any(part.get("part_kind") == "tool-return" for part in parts)


def _chat(row: Any) -> Chat:
    draft = row["draft"]
    return Chat(
        id=row["id"],
        owner=row["owner"],
        engine=row["engine"],
        title=row["title"],
        draft=Draft.model_validate(draft) if draft else None,
        acting=row["acting"],
        acting_since=row["acting_since"],
        status=row["status"],
        turn=row["turn"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _message(row: Any) -> ChatMessage:
    at: datetime = row["at"]
    return ChatMessage(
        seq=row["seq"],
        role=row["role"],
        text=row["text"],
        data=row["data"] or {},
        by=row["by"],
        at=at,
    )

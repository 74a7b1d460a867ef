"""Chats as the database keeps them (`remit_chats`, `remit_chat_messages`).

A message is written under a key (what wrote it: `<run id>:<what>` for a turn's step, the
draft's tool call for what became of it), so a step that runs again writes it once. Each write
of a message locks its chat's row first: the turn's run and the person confirming a draft then
take the next `seq` one after the other.
"""

from __future__ import annotations

import builtins
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.agent.models import Chat, ChatMessage, Draft, Role
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import ChatNotFound
from remit.core.schema import chat_messages, chats


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

    def history(self, chat_id: str, *, through: int) -> builtins.list[Any]:
        """The model's messages of the chat's earlier turns, in order, up to message `through`:
        each turn's as its answer (or draft) stored them, then what became of each draft."""
        query = (
            sa.select(chat_messages.c.history)
            .where(
                chat_messages.c.chat_id == chat_id,
                chat_messages.c.seq <= through,
            )
            .order_by(chat_messages.c.seq)
        )
        rows = self.db.read("read a chat's history", lambda conn: conn.execute(query).all())
        return [part for row in rows if row[0] for part in row[0]]

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
    ) -> ChatMessage | None:
        """Append a message under `key` and return it, or the message `key` already wrote.
        `chat`: columns of the chat's row to set in the same transaction. `when`: a condition
        on the chat's row; unmet, nothing is written and None is returned."""
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
        return _message(values)

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


def _chat(row: Any) -> Chat:
    draft = row["draft"]
    return Chat(
        id=row["id"],
        owner=row["owner"],
        engine=row["engine"],
        title=row["title"],
        draft=Draft.model_validate(draft) if draft else None,
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

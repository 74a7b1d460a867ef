"""Telling people a gate waits for them: notifiers, and the outbox that retries them.

When a gate is created, one `remit_notifications` row per notifier (channel) is written in the
same transaction. The attempt that stopped at the gate sends them at once; a worker's sweep
sends any still unsent, with backoff, until each is recorded as sent. A sender holds a row by
moving its `next_at` past its own try, so two workers do not send the same row at once; a
sender that dies mid-send leaves the row to be tried again (notification is at least once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.schema import approvals, notifications, runs
from remit.people.answers import as_json

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("remit.notify")

# How long a sender holds a row while it sends; past it, another sender may try.
_HOLD = timedelta(seconds=60)
_LONGEST_WAIT = timedelta(minutes=30)


@dataclass(frozen=True)
class ApprovalNotice:
    """What a notifier is told about a gate that waits for a decision."""

    approval_id: str
    run_id: str
    workflow: str
    key: str
    type: str
    title: str
    draft: dict[str, Any]
    assignee: str | None
    created_at: datetime
    expires_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        return as_json(self.__dict__)


class Notifier(Protocol):
    """Tells someone about a waiting gate. `name` is its channel, unique in the app.

    `send` raises to say the notice was not delivered: it is tried again later.
    """

    name: str

    def send(self, notice: ApprovalNotice) -> None: ...


class LogNotifier:
    """Writes each notice to the `remit.notify` log, at INFO: news, not a problem. A serving
    worker shows these lines unless `REMIT_LOG_LEVEL` says otherwise (`remit worker`)."""

    name = "log"

    def send(self, notice: ApprovalNotice) -> None:
        to = f" for {notice.assignee}" if notice.assignee else ""
        log.info(
            "approval %s waits%s: %s (run %s, type %s); decide with `remit approve %s` or "
            "`remit reject %s`",
            notice.approval_id,
            to,
            notice.title,
            notice.run_id,
            notice.type,
            notice.approval_id,
            notice.approval_id,
        )


class WebhookNotifier:
    """POSTs each notice as JSON to a URL.

    With a secret, the body is signed: `X-Remit-Signature: sha256=<hex>` is the HMAC-SHA256
    of `<X-Remit-Timestamp>.<body>` under the secret, so a receiver can check both who sent it
    and that it is recent. Any answer but 2xx counts as not delivered.
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        *,
        secret: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        self.url = url
        self.secret = secret
        self._client = httpx.Client(timeout=timeout, transport=transport)

    def send(self, notice: ApprovalNotice) -> None:
        body = json.dumps({"event": "approval.waiting", "approval": notice.as_json()})
        timestamp = str(int(time.time()))
        headers = {"content-type": "application/json", "x-remit-timestamp": timestamp}
        if self.secret:
            headers["x-remit-signature"] = "sha256=" + sign(self.secret, timestamp, body)
        answer = self._client.post(self.url, content=body, headers=headers)
        if not answer.is_success:
            raise RuntimeError(f"webhook {self.url} answered {answer.status_code}")


def sign(secret: str, timestamp: str, body: str) -> str:
    """The hex HMAC-SHA256 a webhook body is signed with."""
    return hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()


class Notifications:
    """Sends the notifications that are due, once each, retrying failures with backoff."""

    def __init__(
        self, db: Database, notifiers: Iterable[Notifier], *, clock: Clock | None = None
    ) -> None:
        self.db = db
        self.notifiers = {notifier.name: notifier for notifier in notifiers}
        self.clock = clock or SystemClock()

    @property
    def channels(self) -> list[str]:
        return sorted(self.notifiers)

    def send_due(self, *, approval_id: str | None = None, limit: int = 50) -> int:
        """Send what is due (only `approval_id`'s, if given). Returns how many were sent."""
        now = self.clock.now()
        query = (
            sa.select(
                notifications.c.approval_id,
                notifications.c.channel,
                notifications.c.attempts,
                notifications.c.next_at,
            )
            .where(
                notifications.c.sent_at.is_(None),
                notifications.c.next_at <= now,
                # A channel another worker is configured with is left to that worker.
                notifications.c.channel.in_(self.channels),
            )
            .order_by(notifications.c.next_at)
            .limit(limit)
        )
        if approval_id is not None:
            query = query.where(notifications.c.approval_id == approval_id)
        with self.db.engine.connect() as conn:
            due = list(conn.execute(query))
        sent = 0
        for row in due:
            notifier = self.notifiers[row.channel]
            if not self._hold(row):
                continue
            try:
                notice = self._notice(row.approval_id)
                if notice is None:
                    # Decided meanwhile: no one need be told it waits.
                    self._drop(row.approval_id, row.channel)
                    continue
                notifier.send(notice)
            except Exception as error:
                self._failed(row.approval_id, row.channel, row.attempts + 1, error)
                continue
            self._sent(row.approval_id, row.channel)
            sent += 1
        return sent

    def _hold(self, row: Any) -> bool:
        """Take the row for one try: only one sender moves `next_at` from what it read."""
        now = self.clock.now()
        statement = (
            notifications.update()
            .where(
                notifications.c.approval_id == row.approval_id,
                notifications.c.channel == row.channel,
                notifications.c.sent_at.is_(None),
                notifications.c.next_at == row.next_at,
            )
            .values(next_at=now + _HOLD, attempts=row.attempts + 1)
        )
        return self.db.execute_one(statement) == 1

    def _notice(self, approval_id: str) -> ApprovalNotice | None:
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(approvals, runs.c.workflow)
                .join(runs, runs.c.run_id == approvals.c.run_id)
                .where(approvals.c.id == approval_id)
            ).one_or_none()
        if row is None or row.status != "pending":
            return None
        return ApprovalNotice(
            approval_id=row.id,
            run_id=row.run_id,
            workflow=row.workflow,
            key=row.key,
            type=row.type,
            title=row.title,
            draft=row.draft,
            assignee=row.assignee,
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    def _drop(self, approval_id: str, channel: str) -> None:
        self._write(approval_id, channel, notifications.delete())

    def _sent(self, approval_id: str, channel: str) -> None:
        self._update(approval_id, channel, {"sent_at": self.clock.now(), "error": None})

    def _failed(self, approval_id: str, channel: str, attempts: int, error: Exception) -> None:
        wait = min(timedelta(seconds=5 * 2 ** min(attempts - 1, 16)), _LONGEST_WAIT)
        log.warning(
            "notification %s of approval %s failed (try %d): %s; next try in %ds",
            channel,
            approval_id,
            attempts,
            error,
            wait.total_seconds(),
        )
        self._update(
            approval_id,
            channel,
            {"next_at": self.clock.now() + wait, "error": f"{type(error).__name__}: {error}"},
        )

    def _update(self, approval_id: str, channel: str, values: dict[str, Any]) -> None:
        self._write(approval_id, channel, notifications.update().values(**values))

    def _write(self, approval_id: str, channel: str, statement: Any) -> None:
        """Run `statement` (an update or delete of the table) on one approval's channel row."""
        keyed = statement.where(
            notifications.c.approval_id == approval_id, notifications.c.channel == channel
        )
        self.db.retrying(
            f"notification {channel} of {approval_id}", lambda: self.db.execute_one(keyed)
        )

    def status(self, approval_id: str) -> list[dict[str, Any]]:
        """Each channel's attempts, sent time and last error for one approval."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(notifications)
                .where(notifications.c.approval_id == approval_id)
                .order_by(notifications.c.channel)
            )
            return [dict(row._mapping) for row in rows]


def default_notifiers(webhook_url: str | None, webhook_secret: str | None) -> list[Notifier]:
    """The notifiers an app gets when it names none: the log, and a webhook if a URL is set."""
    chosen: list[Notifier] = [LogNotifier()]
    if webhook_url:
        chosen.append(WebhookNotifier(webhook_url, secret=webhook_secret))
    return chosen

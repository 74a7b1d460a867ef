"""The wakeup service's own database: its accounts and the instances they registered.

It is not remit's database: the service makes its two tables itself, on SQLite or Postgres, and
keeps only the SHA-256 of every token (`core/wakeup_tokens.py`). An instance's wake is `at`; it
is waiting while `called_at` is empty. The loop claims a waiting wake that is due by setting
`next_attempt_at` to the end of a lease, so another service process on the same database leaves
it alone until the lease lapses, and records the call's outcome only on the registration it
called (the same `at` and `url`): one replaced meanwhile is called again for its new time.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from remit.core.database import Database, one_line
from remit.core.errors import DatabaseError
from remit.core.schema import UTCDateTime
from remit.core.settings import DATA_DIR
from remit.core.wakeup_tokens import mint_account_token, token_hash

DATABASE_SETTING = "REMIT_WAKEUP_DATABASE_URL"
# The longest wait between two tries of a failing instance.
MAX_BACKOFF_S = 300.0
# Any fixed 64-bit number: the Postgres advisory lock held while the tables are made.
_CREATE_LOCK = 0x72776B7570  # "rwkup"

metadata = sa.MetaData()

accounts = sa.Table(
    "wakeup_accounts",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("label", sa.String(200), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

instances = sa.Table(
    "wakeup_instances",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("account_id", sa.String(36), sa.ForeignKey(accounts.c.id), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("at", UTCDateTime),
    sa.Column("called_at", UTCDateTime),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", UTCDateTime),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Index("wakeup_instances_due", "at"),
)


def database_url(given: str | None, env: Mapping[str, str] | None = None) -> str:
    """The database to use: `given` (`--database`), else `REMIT_WAKEUP_DATABASE_URL`, else a
    SQLite file in `.remit` under the current folder (made 0700 when missing)."""
    env = os.environ if env is None else env
    chosen = given or env.get(DATABASE_SETTING) or None
    if chosen is not None:
        return chosen
    return f"sqlite:///{Path.cwd() / DATA_DIR / 'wakeup.sqlite'}"


@dataclass(frozen=True)
class Account:
    id: str
    label: str
    created_at: datetime


@dataclass(frozen=True)
class Instance:
    id: str
    account_id: str
    url: str
    at: datetime | None
    called_at: datetime | None
    attempts: int
    last_error: str | None

    def shown(self) -> dict[str, Any]:
        """The instance as `GET /wakeup/instances/{id}` answers."""
        return {
            "id": self.id,
            "url": self.url,
            "at": _iso(self.at),
            "called_at": _iso(self.called_at),
            "attempts": self.attempts,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class Due:
    """A wake the loop claimed: the registration it calls, as it was when claimed."""

    id: str
    url: str
    at: datetime
    attempts: int


class Conflict(Exception):
    """The instance token is registered by another account."""


class WakeupStore:
    """The service's tables on one database, made when the store is opened."""

    def __init__(self, url: str) -> None:
        try:
            self.db = Database(url, pool_size=16)
        except DatabaseError as error:
            raise DatabaseError(
                str(error).replace("REMIT_DATABASE_URL", f"--database or {DATABASE_SETTING}")
            ) from None
        try:
            # One process at a time makes the tables: on SQLite the transaction holds the
            # write lock, on Postgres (where DDL is transactional) an advisory lock.
            with self.db.begin() as conn:
                if not self.db.is_sqlite:
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CREATE_LOCK})
                metadata.create_all(conn, checkfirst=True)
        except sa.exc.OperationalError as error:
            raise DatabaseError(
                f"cannot open the wakeup service's database at {self.db.shown_url} "
                f"({one_line(error)}): check --database (or {DATABASE_SETTING}), and that the "
                "server is up and takes connections there"
            ) from None

    def dispose(self) -> None:
        self.db.dispose()

    # Accounts.

    def create_account(self, label: str) -> str:
        """A new account labelled `label`; its token, which is not stored and not shown again."""
        token = mint_account_token()
        with self.db.begin() as conn:
            conn.execute(
                accounts.insert().values(
                    id=str(uuid.uuid4()),
                    label=label,
                    token_hash=token_hash(token),
                    created_at=_now(),
                )
            )
        return token

    def accounts(self) -> list[Account]:
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(accounts.c.id, accounts.c.label, accounts.c.created_at).order_by(
                    accounts.c.created_at
                )
            )
            return [Account(id=r.id, label=r.label, created_at=r.created_at) for r in rows]

    def account_of(self, token: str) -> str | None:
        """The id of the account whose token `token` is, or None."""
        with self.db.engine.connect() as conn:
            return conn.execute(
                sa.select(accounts.c.id).where(accounts.c.token_hash == token_hash(token))
            ).scalar_one_or_none()

    # Instances.

    def register(self, account_id: str, url: str, instance_token: str) -> tuple[str, bool]:
        """Register the instance `instance_token` names at `url` for `account_id`: its id and
        whether it is new. Registered again by the same account, its URL becomes `url`, and a
        new URL forgets the wake it had. `Conflict` if another account registered it."""
        hashed = token_hash(instance_token)
        for _ in range(3):
            try:
                return self._register(account_id, url, hashed)
            except sa.exc.IntegrityError:
                continue  # registered at the same moment elsewhere: look again
        raise DatabaseError("the instance could not be registered: try again")

    def _register(self, account_id: str, url: str, hashed: str) -> tuple[str, bool]:
        with self.db.begin() as conn:
            found = conn.execute(
                sa.select(instances.c.id, instances.c.account_id, instances.c.url)
                .where(instances.c.token_hash == hashed)
                .with_for_update()
            ).one_or_none()
            if found is None:
                new_id = str(uuid.uuid4())
                conn.execute(
                    instances.insert().values(
                        id=new_id,
                        account_id=account_id,
                        url=url,
                        token_hash=hashed,
                        attempts=0,
                        created_at=_now(),
                    )
                )
                return new_id, True
            if found.account_id != account_id:
                raise Conflict
            if found.url != url:
                conn.execute(
                    instances.update()
                    .where(instances.c.id == found.id)
                    .values(url=url, **_NO_WAKE, at=None)
                )
            return str(found.id), False

    def instance(self, instance_id: str) -> Instance | None:
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(
                    instances.c.id,
                    instances.c.account_id,
                    instances.c.url,
                    instances.c.at,
                    instances.c.called_at,
                    instances.c.attempts,
                    instances.c.last_error,
                ).where(instances.c.id == instance_id)
            ).one_or_none()
        return None if row is None else Instance(**row._asdict())

    def delete(self, instance_id: str) -> None:
        self.db.execute_one(instances.delete().where(instances.c.id == instance_id))

    def set_wake(self, instance_token: str, at: datetime) -> bool:
        """Replace the wake of the instance `instance_token` names with one at `at`; False if
        no instance has that token."""
        return (
            self.db.execute_one(
                instances.update()
                .where(instances.c.token_hash == token_hash(instance_token))
                .values(at=at, **_NO_WAKE)
            )
            > 0
        )

    # The loop's side.

    def claim(self, now: datetime, lease: float, limit: int) -> list[Due]:
        """Up to `limit` waiting wakes due by `now`, each leased until `now + lease`.

        One statement: on Postgres the rows are locked as they are chosen and rows another
        process is claiming are skipped; on SQLite the transaction holds the write lock from
        its start. Either way no two claims take one row."""
        waiting = (
            sa.select(instances.c.id)
            .where(_due(now))
            .order_by(instances.c.at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        claim = (
            instances.update()
            .where(instances.c.id.in_(waiting.scalar_subquery()))
            .values(next_attempt_at=now + timedelta(seconds=lease))
            .returning(instances.c.id, instances.c.url, instances.c.at, instances.c.attempts)
        )
        with self.db.begin() as conn:
            rows = conn.execute(claim).all()
        return sorted(
            (Due(id=r.id, url=r.url, at=r.at, attempts=r.attempts) for r in rows),
            key=lambda due: due.at,
        )

    def called(self, due: Due, now: datetime) -> bool:
        """Record that `due`'s instance answered, if it is still the registration called."""
        return (
            self.db.execute_one(
                _same(instances.update(), due).values(
                    called_at=now, attempts=0, next_attempt_at=None, last_error=None
                )
            )
            > 0
        )

    def failed(self, due: Due, now: datetime, why: str) -> bool:
        """Record a failed call of `due`'s instance, to be tried again after a backoff that
        doubles with each failure (up to five minutes, give or take a fifth), if it is still the
        registration called."""
        delay = min(2.0 ** min(due.attempts, 20), MAX_BACKOFF_S) * random.uniform(0.8, 1.2)
        return (
            self.db.execute_one(
                _same(instances.update(), due).values(
                    attempts=instances.c.attempts + 1,
                    last_error=why[:2000],
                    next_attempt_at=now + timedelta(seconds=delay),
                )
            )
            > 0
        )

    def next_due(self, now: datetime) -> datetime | None:
        """When the next waiting wake falls due (now, if one is due): its `at`, or the end of
        its backoff or lease if that is later. None when nothing waits."""
        later = sa.case(
            (
                sa.and_(
                    instances.c.next_attempt_at.is_not(None),
                    instances.c.next_attempt_at > instances.c.at,
                ),
                instances.c.next_attempt_at,
            ),
            else_=instances.c.at,
        )
        with self.db.engine.connect() as conn:
            found = conn.execute(
                sa.select(sa.func.min(sa.type_coerce(later, UTCDateTime))).where(
                    instances.c.at.is_not(None), instances.c.called_at.is_(None)
                )
            ).scalar_one_or_none()
        assert found is None or isinstance(found, datetime)
        return found


_NO_WAKE: dict[str, Any] = {
    "called_at": None,
    "attempts": 0,
    "next_attempt_at": None,
    "last_error": None,
}


def _due(now: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        instances.c.at.is_not(None),
        instances.c.called_at.is_(None),
        instances.c.at <= now,
        sa.or_(instances.c.next_attempt_at.is_(None), instances.c.next_attempt_at <= now),
    )


def _same(update: sa.Update, due: Due) -> sa.Update:
    return update.where(
        instances.c.id == due.id, instances.c.at == due.at, instances.c.url == due.url
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")

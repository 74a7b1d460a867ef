"""API tokens: how a person or an agent proves who they are to `remit serve` (and to the command
line pointed at it with `REMIT_URL`).

A token is `rmt_<id>_<secret>`: the id names its row in `remit_tokens`, the secret is 32 random
bytes (256 bits, from `secrets`). It is shown once, when made; the row keeps only the SHA-256 of
the whole token. A slow password hash (argon2, bcrypt) is for secrets people choose, which are
few enough to guess one by one; a 256-bit random secret cannot be guessed, so one fast hash is
enough to keep a copy of the table from being usable, and checking a request costs microseconds.
The stored hash is compared with `hmac.compare_digest`, in constant time.

A token acts as the principal it was made for, under the app's policies like anyone else; it
stops working when it expires or is revoked. Making, listing and revoking tokens is the policy
action `manage_tokens`, each audited.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError, Unauthenticated
from remit.core.principals import check_actor
from remit.core.schema import tokens
from remit.policy.cedar import Principal

PREFIX = "rmt_"
_TOKEN = re.compile(r"rmt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_DURATION = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class TokenInfo:
    """A token as `remit tokens list` shows it: never its secret."""

    id: str
    principal: str
    name: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None

    def state(self, now: datetime) -> str:
        """`active`, `expired` or `revoked`."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `2w` as a duration; `RemitError` saying the form otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise RemitError(
            f"--expires {text!r} is not a duration: give a whole number and a unit, m, h, d or "
            "w (e.g. 30d, 12h)"
        )
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def digest(secret: str) -> str:
    """What is kept of a token, code or session: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def mint(prefix: str) -> tuple[str, str]:
    """A new `<prefix><id>_<secret>` (the id 12 hex digits, the secret 32 random bytes) and its
    id: what an API token, a sign-in link's code and a console session are made of."""
    ident = secrets.token_hex(6)
    return ident, f"{prefix}{ident}_{secrets.token_urlsafe(32)}"


def matches(stored: str | None, given: str) -> bool:
    """Whether `given` is the secret whose digest is `stored` (None: no row), compared in
    constant time, and a missing row compared too, so that neither the comparison nor its
    absence tells how much of a guess was right."""
    return hmac.compare_digest(stored or "0" * 64, digest(given)) and stored is not None


class Tokens:
    """An app's API tokens: make, list, revoke, and authenticate a request's."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def create(
        self,
        principal: str,
        *,
        by: str,
        name: str = "",
        expires_in: timedelta | None = None,
    ) -> tuple[TokenInfo, str]:
        """Make a token for `principal`; returns it with the token itself, which is not kept."""
        check_actor(principal, where="--for")
        Principal.parse(principal)  # user:<name> or agent:<name>, or a clear error
        if len(name) > 100:
            raise RemitError(f"--name is {len(name)} characters long: keep it to 100")
        ident, token = mint(PREFIX)
        now = self.clock.now()
        info = TokenInfo(
            id=f"tok_{ident}",
            principal=principal,
            name=name,
            created_at=now,
            created_by=by,
            expires_at=None if expires_in is None else now + expires_in,
            revoked_at=None,
            revoked_by=None,
        )
        with self.db.begin() as conn:
            conn.execute(
                tokens.insert().values(
                    id=info.id,
                    app=self.app,
                    principal=principal,
                    name=name,
                    digest=digest(token),
                    created_at=now,
                    created_by=by,
                    expires_at=info.expires_at,
                )
            )
            audit_row(
                conn,
                at=now,
                actor=by,
                action="token.created",
                target=info.id,
                meta={"for": principal, "name": name, "expires_at": _iso(info.expires_at)},
            )
        return info, token

    def list(self) -> builtins.list[TokenInfo]:
        """The app's tokens, newest first, revoked and expired ones too."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(tokens)
                .where(tokens.c.app == self.app)
                .order_by(tokens.c.created_at.desc(), tokens.c.id)
            )
            return [_info(row) for row in rows]

    def get(self, token_id: str) -> TokenInfo:
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(tokens).where(tokens.c.app == self.app, tokens.c.id == token_id)
            ).one_or_none()
        if row is None:
            raise RemitError(f"no token `{token_id}`: `remit tokens list` lists them")
        return _info(row)

    def revoke(self, token_id: str, *, by: str) -> TokenInfo:
        """Revoke a token: it authenticates nothing from now on. Revoking one already revoked
        changes nothing."""
        now = self.clock.now()
        with self.db.begin() as conn:
            changed = conn.execute(
                tokens.update()
                .where(
                    tokens.c.app == self.app,
                    tokens.c.id == token_id,
                    tokens.c.revoked_at.is_(None),
                )
                .values(revoked_at=now, revoked_by=by)
            ).rowcount
            if changed:
                audit_row(conn, at=now, actor=by, action="token.revoked", target=token_id, meta={})
        return self.get(token_id)

    def authenticate(self, token: str) -> str:
        """The principal `token` acts as; `Unauthenticated` saying why it does not."""
        found = _TOKEN.fullmatch(token)
        if found is None:
            raise Unauthenticated(
                "the token is not a remit API token (rmt_...): make one with `remit tokens "
                "create --for user:<name>`"
            )
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(tokens).where(
                    tokens.c.app == self.app, tokens.c.id == f"tok_{found.group(1)}"
                )
            ).one_or_none()
        if row is None or not matches(row.digest, token):
            raise Unauthenticated("the token is not one of this app's: check it, or make one")
        info = _info(row)
        state = info.state(self.clock.now())
        if state != "active":
            raise Unauthenticated(
                f"token {info.id} ({info.principal}) is {state}: make a new one with "
                f"`remit tokens create --for {info.principal}`"
            )
        return info.principal


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _info(row: sa.Row[object]) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        principal=row.principal,
        name=row.name,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
    )

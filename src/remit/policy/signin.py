"""How a person signs in to the web console: by a one-time link, or by a password, either
opening a session that their browser keeps in a cookie.

A link's code is `rml_<id>_<secret>` and a session's token `rms_<id>_<secret>`, each secret 32
random bytes, like an API token's (`policy/tokens.py`): only the SHA-256 of each is kept, and a
given one is compared with the stored hash in constant time. A code works once, for 15 minutes
unless made for longer; using it and checking it are one conditional update, so two browsers
opening the same link at once cannot both be signed in by it. A session lasts 12 hours, or
until its person signs out, which ends it in the database: a copied cookie stops working too.

A password is for a person who will sign in often without a link. It is kept as its argon2id
hash, with the hash's own salt and parameters (argon2-cffi's defaults), and is at least 12
characters long. Checking one for a principal that has none still spends an argon2 check, so the
time an answer takes does not tell which principals have a password.

Wrong passwords are counted by the address they come from (`check_password`): five in a row for
one principal lock sign-in by password for that principal from that address, and twenty for any
principals lock it for every principal from that address, each for 30 seconds doubled at each
further wrong one, up to 15 minutes; an IPv6 client is counted by its /64. A count is
forgotten once 15 minutes have passed since both its latest wrong password and its lock's end.
So guessing from one place slows the guesser, and never locks the person out from another. At
most `CHECKS_AT_ONCE` argon2 checks run at once in a process; `remit serve` queues the rest on
its event loop and runs each in a thread, so that the loop serves every other request.

Every link made and used, session opened and ended, and password set is an audit row.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError, Unauthenticated
from remit.core.principals import check_actor
from remit.core.schema import login_links, passwords, sessions, signin_failures
from remit.core.text import describe_seconds
from remit.policy.cedar import Principal
from remit.policy.tokens import digest, matches, mint

LINK_LIFE = timedelta(minutes=15)
SESSION_LIFE = timedelta(hours=12)
SHORTEST_PASSWORD = 12
LONGEST_PASSWORD = 1024
# Wrong passwords in a row from one address before sign-in by password from there is locked:
# for the principal guessed, and for every principal; the lock's first and longest length in
# seconds (doubled at each further wrong password). A count is forgotten `LOCK_LONGEST` after
# both its latest wrong password and the end of its lock.
FREE_FAILURES = 5
FREE_FAILURES_FROM_ADDRESS = 20
LOCK_FIRST = 30.0
LOCK_LONGEST = 900.0
# argon2 checks at once in a process: each takes 64 MiB and a core for a tenth of a second.
# (`remit serve` also waits for its turn before it takes a thread: `console/pages/signin.py`.)
CHECKS_AT_ONCE = 2
_CHECKS = threading.BoundedSemaphore(CHECKS_AT_ONCE)
# The row of an address's wrong passwords for every principal.
ANY_PRINCIPAL = ""

_LINK = re.compile(r"rml_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_SESSION = re.compile(r"rms_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_HASHER = PasswordHasher()


@functools.cache
def _no_password() -> str:
    """What a principal with no password is checked against, so that it costs what a real check
    does. Made on first use: an argon2 hash takes a tenth of a second, too long for an import."""
    return _HASHER.hash(secrets.token_urlsafe(24))


@dataclass(frozen=True)
class LinkInfo:
    """A sign-in link as its row holds it: never its code."""

    id: str
    principal: str
    created_at: datetime
    created_by: str
    expires_at: datetime


@dataclass(frozen=True)
class SessionInfo:
    """A console session as its row holds it: never its token."""

    id: str
    principal: str
    via: str
    created_at: datetime
    expires_at: datetime


def address_of(host: str) -> str:
    """What wrong passwords from `host` are counted under: the address itself, or for IPv6 its
    /64, which one client may hold whole. Longer than an address: its first 100 characters."""
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return host[:100]
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def _check_principal(principal: str, where: str) -> str:
    check_actor(principal, where=where)
    Principal.parse(principal)  # user:<name> or agent:<name>, or a clear error
    return principal


class SignIns:
    """An app's console sign-ins: links, sessions and passwords."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def link(
        self, principal: str, *, by: str, expires_in: timedelta = LINK_LIFE
    ) -> tuple[LinkInfo, str]:
        """Make a one-time sign-in link's code for `principal`; returns it with the code,
        which is not kept."""
        _check_principal(principal, "--for")
        if expires_in <= timedelta(0) or expires_in > timedelta(days=7):
            raise RemitError(
                "--expires of a sign-in link must be more than nothing and at most 7d: a link "
                "is for signing in soon (make a new one when it runs out)"
            )
        ident, code = mint("rml_")
        now = self.clock.now()
        info = LinkInfo(f"lnk_{ident}", principal, now, by, now + expires_in)
        with self.db.begin() as conn:
            conn.execute(
                login_links.insert().values(
                    id=info.id,
                    app=self.app,
                    principal=principal,
                    digest=digest(code),
                    created_at=now,
                    created_by=by,
                    expires_at=info.expires_at,
                )
            )
            audit_row(
                conn,
                at=now,
                actor=by,
                action="login_link.created",
                target=info.id,
                meta={"for": principal, "expires_at": info.expires_at.isoformat()},
            )
        return info, code

    def redeem(self, code: str) -> str:
        """The principal `code` signs in, once: the link is used up. `Unauthenticated` saying
        why not (unknown, used, expired)."""
        found = _LINK.fullmatch(code)
        if found is None:
            raise Unauthenticated(
                "that is not a sign-in code (rml_...): open the whole link you were given, or "
                "ask for a new one (`remit login-link --for user:<you>`)"
            )
        ident = f"lnk_{found.group(1)}"
        now = self.clock.now()
        with self.db.begin() as conn:
            row = conn.execute(
                sa.select(login_links).where(
                    login_links.c.app == self.app, login_links.c.id == ident
                )
            ).one_or_none()
            if row is None or not matches(row.digest, code):
                raise Unauthenticated(
                    "this sign-in link is not one of this app's: ask for a new one "
                    "(`remit login-link --for user:<you>`)"
                )
            again = f"ask for a new one (`remit login-link --for {row.principal}`)"
            if row.used_at is not None:
                raise Unauthenticated(f"this sign-in link was used already: {again}")
            if row.expires_at <= now:
                raise Unauthenticated(
                    f"this sign-in link expired at {row.expires_at:%Y-%m-%d %H:%M} UTC: {again}"
                )
            # The check and the use are one update: of two at once, one finds it used.
            used = conn.execute(
                login_links.update()
                .where(login_links.c.id == ident, login_links.c.used_at.is_(None))
                .values(used_at=now)
            ).rowcount
            if used != 1:
                raise Unauthenticated(f"this sign-in link was used already: {again}")
            audit_row(
                conn, at=now, actor=row.principal, action="login_link.used", target=ident, meta={}
            )
        return str(row.principal)

    def open_session(
        self, principal: str, *, via: str, expires_in: timedelta = SESSION_LIFE
    ) -> tuple[SessionInfo, str]:
        """Open a session for `principal`, signed in `via` a link or a password; returns it
        with its token, which is not kept."""
        _check_principal(principal, "principal")
        ident, token = mint("rms_")
        now = self.clock.now()
        info = SessionInfo(f"ses_{ident}", principal, via, now, now + expires_in)
        with self.db.begin() as conn:
            conn.execute(
                sessions.insert().values(
                    id=info.id,
                    app=self.app,
                    principal=principal,
                    digest=digest(token),
                    via=via,
                    created_at=now,
                    expires_at=info.expires_at,
                )
            )
            audit_row(
                conn,
                at=now,
                actor=principal,
                action="session.opened",
                target=info.id,
                meta={"via": via},
            )
        return info, token

    def session(self, token: str) -> str:
        """The principal of the session `token`; `Unauthenticated` if it has ended, expired, or
        is not one."""
        row = self._session_row(token)
        if row.ended_at is not None:
            raise Unauthenticated("this session was signed out: sign in again")
        if row.expires_at <= self.clock.now():
            raise Unauthenticated(
                f"this session expired at {row.expires_at:%Y-%m-%d %H:%M} UTC: sign in again"
            )
        return str(row.principal)

    def end_session(self, token: str) -> None:
        """Sign out: the session works no more. Ending one already ended changes nothing."""
        row = self._session_row(token)
        now = self.clock.now()
        with self.db.begin() as conn:
            ended = conn.execute(
                sessions.update()
                .where(sessions.c.id == row.id, sessions.c.ended_at.is_(None))
                .values(ended_at=now)
            ).rowcount
            if ended:
                audit_row(
                    conn,
                    at=now,
                    actor=row.principal,
                    action="session.ended",
                    target=row.id,
                    meta={},
                )

    def set_password(self, principal: str, password: str, *, by: str) -> None:
        """Set (or replace) `principal`'s console password."""
        _check_principal(principal, "--for")
        if len(password) < SHORTEST_PASSWORD:
            raise RemitError(
                f"the password is {len(password)} characters long: give at least "
                f"{SHORTEST_PASSWORD} (a few words will do)"
            )
        if len(password) > LONGEST_PASSWORD:
            raise RemitError(f"the password is longer than {LONGEST_PASSWORD} characters")
        hashed = _HASHER.hash(password)
        now = self.clock.now()
        values = {"hash": hashed, "set_at": now, "set_by": by, "failures": 0, "locked_until": None}
        with self.db.begin() as conn:
            conn.execute(
                self.db.insert(passwords)
                .values(app=self.app, principal=principal, **values)
                .on_conflict_do_update(index_elements=["app", "principal"], set_=values)
            )
            conn.execute(  # a new password: its principal's wrong ones no longer count
                signin_failures.delete().where(
                    signin_failures.c.app == self.app, signin_failures.c.principal == principal
                )
            )
            audit_row(
                conn,
                at=now,
                actor=by,
                action="password.set",
                target=f"password:{principal}",
                meta={"for": principal},
            )

    def check_password(self, principal: str, password: str, *, address: str = "") -> bool:
        """Whether `password` is `principal`'s console password, given from `address` (the
        client's; "" where there is none, as in-process). A hash made with weaker parameters
        than argon2-cffi's current defaults is made again with them, on the check that finds
        the password right.

        A check from an address that is locked, for this principal or for all, raises
        `Unauthenticated` with the time to wait, right password or not, and runs no argon2
        check; see the module's docstring for when an address is locked. A right password
        clears the principal's count from that address, and setting a new one clears all."""
        address = address_of(address)
        try:
            _check_principal(principal, "principal")
        except RemitError:  # no such principal can have a password: no check to spend on it
            self._refuse_locked(ANY_PRINCIPAL, address)
            self._count_failure(None, address)
            return False
        self._refuse_locked(principal, address)
        with _CHECKS:
            self._refuse_locked(principal, address)  # locked while this one waited its turn
            with self.db.engine.connect() as conn:
                stored: str | None = conn.execute(
                    sa.select(passwords.c.hash).where(
                        passwords.c.app == self.app, passwords.c.principal == principal
                    )
                ).scalar_one_or_none()
            if len(password) > LONGEST_PASSWORD:
                right = False  # no password this long is ever set
            else:
                try:
                    right = _HASHER.verify(stored or _no_password(), password)
                except (VerifyMismatchError, VerificationError, InvalidHashError):
                    right = False
            if stored is None:
                right = False
            rehashed = (
                _HASHER.hash(password)
                if right and stored is not None and _HASHER.check_needs_rehash(stored)
                else None
            )
        if not right:
            self._count_failure(principal, address)
            return False
        with self.db.begin() as conn:
            conn.execute(signin_failures.delete().where(*self._failures_of(principal, address)))
            if rehashed is not None:
                conn.execute(
                    passwords.update()
                    .where(
                        passwords.c.app == self.app,
                        passwords.c.principal == principal,
                        passwords.c.hash == stored,
                    )
                    .values(hash=rehashed)
                )
        return True

    def _failures_of(self, principal: str, address: str) -> tuple[sa.ColumnElement[bool], ...]:
        return (
            signin_failures.c.app == self.app,
            signin_failures.c.principal == principal,
            signin_failures.c.address == address,
        )

    def _refuse_locked(self, principal: str, address: str) -> None:
        """`Unauthenticated`, with the time to wait, if `address` is locked for `principal`."""
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(signin_failures.c.principal, signin_failures.c.locked_until).where(
                    signin_failures.c.app == self.app,
                    signin_failures.c.principal.in_([principal, ANY_PRINCIPAL]),
                    signin_failures.c.address == address,
                    signin_failures.c.locked_until > now,
                )
            ).all()
        if not rows:
            return
        left = max((row.locked_until - now).total_seconds() for row in rows)
        whom = (
            f"{principal}" if all(row.principal == principal for row in rows) else "any principal"
        )
        raise Unauthenticated(
            f"too many wrong passwords for {whom} from this address: try again in "
            f"{describe_seconds(math.ceil(left))}, or sign in by a link "
            f"(`remit login-link --for {principal}`)"
        )

    def _count_failure(self, principal: str | None, address: str) -> None:
        """Count a wrong password from `address`, for `principal` (None: not a principal's
        form) and for any principal; past each's free ones, lock it (30 s, doubled at each
        further one, up to 15 minutes). A count starts again once `LOCK_LONGEST` has passed
        since both its latest wrong password and the end of its lock; such rows are deleted."""
        now = self.clock.now()
        forgotten = now - timedelta(seconds=LOCK_LONGEST)
        counts = [(ANY_PRINCIPAL, FREE_FAILURES_FROM_ADDRESS)]
        if principal is not None:
            counts.insert(0, (principal, FREE_FAILURES))
        over = sa.and_(
            signin_failures.c.last_at < forgotten,
            sa.or_(
                signin_failures.c.locked_until.is_(None),
                signin_failures.c.locked_until < forgotten,
            ),
        )
        with self.db.begin() as conn:
            for whose, free in counts:
                fresh = {"failures": 1, "last_at": now, "locked_until": None}
                counted = sa.case((over, 1), else_=signin_failures.c.failures + 1)
                failures = conn.execute(
                    self.db.insert(signin_failures)
                    .values(app=self.app, principal=whose, address=address, **fresh)
                    .on_conflict_do_update(
                        index_elements=["app", "principal", "address"],
                        set_={"failures": counted, "last_at": now},
                    )
                    .returning(signin_failures.c.failures)
                ).scalar_one()
                if failures > free:
                    wait = min(LOCK_FIRST * 2 ** (failures - free - 1), LOCK_LONGEST)
                    conn.execute(
                        signin_failures.update()
                        .where(*self._failures_of(whose, address))
                        .values(locked_until=now + timedelta(seconds=wait))
                    )
            conn.execute(signin_failures.delete().where(signin_failures.c.app == self.app, over))

    def _session_row(self, token: str) -> sa.Row[object]:
        found = _SESSION.fullmatch(token)
        if found is None:
            raise Unauthenticated("the session cookie is not a remit session: sign in again")
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(sessions).where(
                    sessions.c.app == self.app, sessions.c.id == f"ses_{found.group(1)}"
                )
            ).one_or_none()
        if row is None or not matches(row.digest, token):
            raise Unauthenticated("this session is not one of this app's: sign in again")
        return row

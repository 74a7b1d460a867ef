"""Credentials an app stores in its database, encrypted with the app's secret key.

`remit secrets set NAME` stores a value; a driver reads it with `call.credential("NAME")`, as it
would an environment variable. What drivers see as their environment is a `Credentials`: the
process's environment over the app's stored secrets, so an environment variable of the same name
wins. Each value is encrypted (Fernet: AES-128-CBC with an HMAC) before it reaches the database;
no table, log line or error message holds one in the clear.

The secret key is `REMIT_SECRET_KEY` when set, otherwise the key file (`.remit/secret.key` in the
app's folder, or `REMIT_SECRET_KEY_FILE`). remit makes the key file, private to its owner, when
the first secret is set; an app that stores no secrets never needs one. A value set under one key
cannot be read under another: the error names the secret and says the key changed.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import math
import os
import re
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError, SettingsError
from remit.core.schema import secrets
from remit.core.settings import Settings

if TYPE_CHECKING:
    # cryptography is imported where a key is read or made, or a value decrypted: listing the
    # secrets, or an app that stores none, does not load it.
    from cryptography.fernet import Fernet

log = logging.getLogger("remit.secrets")

_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_MAX_NAME = 200
_MAKE_KEY = (
    'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
)
# How long a process trusts what it read for one name before reading it again.
_CACHE_SECONDS = 5.0


class SecretError(RemitError):
    """A stored secret cannot be read or written: its key is missing, unreadable or changed.

    `name` is the secret's name where one secret is concerned.
    """

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


def check_name(name: str) -> str:
    """Return `name` if it can name a secret (as an environment variable would); else raise."""
    if len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise SecretError(
            f"{shown!r} cannot name a secret: a secret's name is written like an environment "
            "variable's, in capital letters, digits and underscores, not starting with a digit, "
            f"at most {_MAX_NAME} characters, e.g. SHOP_TOKEN"
        )
    return name


def _parse_key(raw: bytes | str) -> Fernet:
    """A Fernet from a key (urlsafe base64 of 32 bytes); ValueError if it is not one."""
    from cryptography.fernet import Fernet

    try:
        return Fernet(raw.strip())
    except (ValueError, TypeError) as error:
        raise ValueError(str(error)) from None


class SecretKey:
    """Where an app's secret key comes from: a given key (`REMIT_SECRET_KEY`) or a key file.

    A given key is checked at once. The key file is read the first time a stored secret is
    decrypted, and created only when a secret is set: reading when there is no key file and no
    secret stored needs no key and writes nothing.
    """

    def __init__(self, *, file: Path, value: str | None = None) -> None:
        self.file = file
        self._lock = threading.Lock()
        self._fernet: Fernet | None = None
        self.from_env = value is not None
        if value is not None:
            try:
                self._fernet = _parse_key(value)
            except ValueError:
                raise SettingsError(
                    "REMIT_SECRET_KEY is not a secret key (the urlsafe base64 of 32 bytes, 44 "
                    f"characters): make one with {_MAKE_KEY}, or unset it to use the key file "
                    f"{file}"
                ) from None

    @classmethod
    def from_settings(cls, settings: Settings) -> SecretKey:
        return cls(file=settings.secret_key_file, value=settings.secret_key)

    @property
    def source(self) -> str:
        """Where the key comes from, for messages."""
        return "REMIT_SECRET_KEY" if self.from_env else f"the key file {self.file}"

    def fernet(self, *, create: bool, secret: str | None = None) -> Fernet | None:
        """The key, reading the key file on first use. With `create`, a missing key file is
        made; without it, None says there is none. A key file that cannot be read raises
        `SecretError` naming it and, given one, the `secret` being read or written."""
        with self._lock:
            if self._fernet is None:
                try:
                    if create:
                        self._fernet = _parse_key(create_key_file(self.file))
                    elif self.file.exists():
                        self._fernet = _parse_key(read_key_file(self.file))
                except SecretError as error:
                    if secret is None:
                        raise
                    raise SecretError(f"secret `{secret}`: {error}", name=secret) from None
            return self._fernet


def read_key_file(path: Path) -> bytes:
    """The key held in the key file at `path`, checked to be private and to hold a key."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except PermissionError as error:
        raise SecretError(
            f"cannot read the key file {path}: {error.strerror}. Run remit as the file's owner, "
            f"or set REMIT_SECRET_KEY to the key it holds"
        ) from None
    except OSError as error:
        raise SecretError(
            f"cannot read the key file {path}: {error.strerror}. Restore it, or set "
            "REMIT_SECRET_KEY to the key it held"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
        if mode & 0o077:
            raise SecretError(
                f"the key file {path} has mode {mode:04o}; it must be readable only by its "
                f"owner: chmod 600 {path}"
            )
        raw = handle.read(1024)
    try:
        _parse_key(raw)
    except ValueError:
        raise SecretError(
            f"the key file {path} does not hold a secret key (the urlsafe base64 of 32 bytes): "
            "restore it from a backup, or, if no secret was ever set with it, delete it and "
            "remit makes a new one on the next `remit secrets set`"
        ) from None
    return raw.strip()


def create_key_file(path: Path) -> bytes:
    """The key in the key file at `path`, making the file with a new key if there is none.

    Safe between processes: the key is written and synced to a private file of this process's
    own, which is then linked to `path`; linking fails if `path` exists, and the loser of a race
    reads the winner's key. `path` never exists half written.
    """
    if path.exists():
        return read_key_file(path)
    from cryptography.fernet import Fernet

    key = Fernet.generate_key()
    draft = path.with_name(f".{path.name}.{os.urandom(6).hex()}.new")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(draft, path)
        except FileExistsError:
            return read_key_file(path)
        finally:
            draft.unlink()
        _sync_folder(path.parent)
    except OSError as error:
        raise SecretError(
            f"cannot make the key file {path}: {error.strerror}. Make its folder writable, point "
            f"REMIT_SECRET_KEY_FILE elsewhere, or set REMIT_SECRET_KEY (make one with {_MAKE_KEY})"
        ) from None
    log.warning("made the secret key file %s: back it up; the secrets set with it need it", path)
    return key


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SecretInfo:
    """A stored secret as listed: its name, when it was set and by whom. Never its value."""

    name: str
    set_at: datetime
    set_by: str


class Secrets:
    """The secrets of app `app_name`, stored encrypted with `key` in the app's database."""

    def __init__(
        self, db: Database, app_name: str, key: SecretKey, *, clock: Clock | None = None
    ) -> None:
        self.db = db
        self.app_name = app_name
        self.key = key
        self.clock = clock or SystemClock()

    def set(self, name: str, value: str, *, by: str) -> SecretInfo:
        """Store `value` as secret `name`, replacing any value it had. Makes the key file if
        there is none."""
        check_name(name)
        if not value:
            raise SecretError(f"secret {name}: the value is empty; a secret needs a value")
        fernet = self.key.fernet(create=True, secret=name)
        assert fernet is not None
        ciphertext = fernet.encrypt(value.encode()).decode()
        info = SecretInfo(name, self.clock.now(), by)
        values = {"ciphertext": ciphertext, "set_at": info.set_at, "set_by": by}

        def write() -> None:
            # Two processes setting a new name at once: the loser's insert fails on the key,
            # and its second pass updates the row the winner wrote.
            for _ in range(2):
                with contextlib.suppress(sa.exc.IntegrityError), self.db.begin() as conn:
                    if not conn.execute(
                        secrets.update().where(self._row(name)).values(**values)
                    ).rowcount:
                        conn.execute(
                            secrets.insert().values(app=self.app_name, name=name, **values)
                        )
                    self._audit(conn, "secret.set", name, by, info.set_at)
                    return
            raise SecretError(f"secret {name}: could not store it; try again", name=name)

        self.db.retrying(f"app {self.app_name}: setting secret {name}", write)
        log.info("secret %s of app %s set by %s", name, self.app_name, by)
        return info

    def delete(self, name: str, *, by: str) -> bool:
        """Delete secret `name`; False if there was none."""
        check_name(name)

        def write() -> int:
            with self.db.begin() as conn:
                gone = conn.execute(secrets.delete().where(self._row(name))).rowcount
                if gone:
                    self._audit(conn, "secret.deleted", name, by, self.clock.now())
                return gone

        gone = self.db.retrying(f"app {self.app_name}: deleting secret {name}", write)
        if gone:
            log.info("secret %s of app %s deleted by %s", name, self.app_name, by)
        return gone > 0

    def _audit(self, conn: sa.Connection, action: str, name: str, by: str, at: datetime) -> None:
        """The audit row of a change to secret `name`: who and when, never the value."""
        audit_row(conn, at=at, actor=by, action=action, target=f"secret:{name}", meta={})

    def get(self, name: str) -> str | None:
        """The value of secret `name`, decrypted; None if none is stored."""
        check_name(name)
        query = sa.select(secrets.c.ciphertext).where(self._row(name))
        ciphertext = self.db.read(
            f"app {self.app_name}: secret {name}", lambda conn: conn.execute(query).scalar()
        )
        if ciphertext is None:
            return None
        fernet = self.key.fernet(create=False, secret=name)
        if fernet is None:
            raise SecretError(
                f"secret {name} of app {self.app_name} is stored, but there is no key to read "
                f"it: {self.key.source} is missing. Restore it (or set REMIT_SECRET_KEY to its "
                f"key), or set the secret again with `remit secrets set {name}`",
                name=name,
            )
        from cryptography.fernet import InvalidToken

        try:
            return fernet.decrypt(str(ciphertext).encode()).decode()
        except InvalidToken:
            raise SecretError(
                f"secret {name} of app {self.app_name} cannot be decrypted: the secret key "
                f"changed since it was set (the key now comes from {self.key.source}). Put the "
                f"old key back, or set the secret again with `remit secrets set {name}`",
                name=name,
            ) from None

    def ciphertexts(self) -> dict[str, str]:
        """Every stored secret of the app by name, still encrypted: one query, no key needed."""
        query = sa.select(secrets.c.name, secrets.c.ciphertext).where(
            secrets.c.app == self.app_name
        )
        return self.db.read(
            f"app {self.app_name}: its secrets",
            lambda conn: {row.name: str(row.ciphertext) for row in conn.execute(query)},
        )

    def decrypt(self, ciphertext: str) -> str | None:
        """The value `ciphertext` holds, or None if there is no key or it is not this key's."""
        fernet = self.key.fernet(create=False)
        if fernet is None:
            return None
        from cryptography.fernet import InvalidToken

        try:
            return fernet.decrypt(ciphertext.encode()).decode()
        except InvalidToken:
            return None

    def list(self) -> builtins.list[SecretInfo]:
        """The app's secrets by name: names, when and by whom each was set; never values."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(secrets.c.name, secrets.c.set_at, secrets.c.set_by)
                .where(secrets.c.app == self.app_name)
                .order_by(secrets.c.name)
            )
            return [SecretInfo(row.name, row.set_at, row.set_by) for row in rows]

    def _row(self, name: str) -> sa.ColumnElement[bool]:
        return sa.and_(secrets.c.app == self.app_name, secrets.c.name == name)


class Credentials(Mapping[str, str]):
    """What drivers see as their environment: `environ` over the app's stored secrets.

    A name set (not empty) in `environ` gives that value; otherwise the stored secret, decrypted
    when it is read. A process keeps what it read for a name for a few seconds, so a secret set
    or deleted reaches running workers within that time. Iterating gives the names of both. A
    stored secret that cannot be decrypted raises `SecretError` naming it.
    """

    def __init__(
        self,
        secrets: Secrets,
        environ: Mapping[str, str],
        *,
        cache_seconds: float = _CACHE_SECONDS,
    ) -> None:
        self.secrets = secrets
        self.environ = environ
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()
        # Every stored secret's ciphertext and value, as last read (see `stored_values`).
        self._values: dict[str, tuple[str, str | None]] = {}
        self._values_read_at = -math.inf

    def __getitem__(self, name: str) -> str:
        value = self.environ.get(name)
        if value:
            return value
        stored = self._stored(name)
        if stored is None:
            if value is not None:
                return value
            raise KeyError(name)
        return stored

    def _stored(self, name: str) -> str | None:
        if not _NAME.fullmatch(name) or len(name) > _MAX_NAME:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(name)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        value = self.secrets.get(name)
        with self._lock:
            self._cache[name] = (now, value)
        return value

    def stored_values(self) -> builtins.list[tuple[str, str]]:
        """Every stored secret of the app, as (name, value), for redaction. The ciphertexts are
        read again once what was read is `cache_seconds` old (one query), as a secret's value
        is, so a value set by another process is known as soon as a driver can be given it;
        only a ciphertext not seen before is decrypted. One that cannot be decrypted (the key
        changed) is left out: no one can read it in the clear. If the database cannot be read,
        the values read last are given."""
        now = time.monotonic()
        with self._lock:
            if now - self._values_read_at < self.cache_seconds:
                return [(name, value) for name, (_, value) in self._values.items() if value]
        try:
            current = self.secrets.ciphertexts()
        except sa.exc.SQLAlchemyError as error:
            log.warning("secrets of app %s: cannot read them (%s)", self.secrets.app_name, error)
            with self._lock:
                return [(name, value) for name, (_, value) in self._values.items() if value]
        with self._lock:
            known = dict(self._values)
        fresh = {
            name: known[name]
            if name in known and known[name][0] == ciphertext
            else (ciphertext, self._decrypted(ciphertext))
            for name, ciphertext in current.items()
        }
        with self._lock:
            self._values = fresh
            self._values_read_at = now
        return [(name, value) for name, (_, value) in fresh.items() if value]

    def _decrypted(self, ciphertext: str) -> str | None:
        try:
            return self.secrets.decrypt(ciphertext)
        except SecretError:
            return None  # the key file is unreadable: the call that reads the secret says so

    def __iter__(self) -> Iterator[str]:
        stored = [info.name for info in self.secrets.list()]
        yield from self.environ
        yield from (name for name in stored if name not in self.environ)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<Credentials of app {self.secrets.app_name}: values not shown>"

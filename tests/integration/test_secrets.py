"""Stored secrets: encrypted in the database, read by drivers as credentials, and never written
anywhere in the clear: not in a table (remit's or DBOS's), not in a log line."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from pydantic import BaseModel

from remit import App, CallContext, Connector, Context, Driver, Fake, implements, op, workflow
from remit.connectors.credentials import (
    Credentials,
    SecretError,
    SecretInfo,
    SecretKey,
    Secrets,
    check_name,
    create_key_file,
)
from remit.core.clock import ManualClock
from remit.core.database import Database
from remit.core.errors import SettingsError
from remit.core.settings import Settings
from remit.testing import Harness

# What a leak would look like: distinctive enough that any copy of it is found.
TOKEN = "shptok_Q7vX2mZr9LkW4pNc8TfB3hYd6SgJ"
APP = "vault-app"
T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return tmp_path / "app" / ".remit" / "secret.key"


@pytest.fixture
def store(db: Database, key_file: Path) -> Secrets:
    return Secrets(db, APP, SecretKey(file=key_file), clock=ManualClock(T0))


def test_set_list_get_and_delete(store: Secrets, db: Database) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    store.set("MAIL_KEY", "mail-value", by="user:bob")

    assert store.list() == [
        SecretInfo("MAIL_KEY", T0, "user:bob"),
        SecretInfo("SHOP_TOKEN", T0, "user:ann"),
    ]
    assert store.get("SHOP_TOKEN") == TOKEN
    assert store.get("MAIL_KEY") == "mail-value"
    assert store.get("OTHER") is None

    store.set("SHOP_TOKEN", "rotated", by="user:cy")
    assert store.get("SHOP_TOKEN") == "rotated"
    assert [s.set_by for s in store.list()] == ["user:bob", "user:cy"]

    assert store.delete("SHOP_TOKEN", by="user:ops") is True
    assert store.delete("SHOP_TOKEN", by="user:ops") is False
    assert store.get("SHOP_TOKEN") is None
    assert [s.name for s in store.list()] == ["MAIL_KEY"]
    assert TOKEN not in dump_database(db)


def test_each_app_has_its_own_secrets(store: Secrets, db: Database, key_file: Path) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    other = Secrets(db, "other-app", SecretKey(file=key_file))

    assert other.get("SHOP_TOKEN") is None
    assert other.list() == []
    assert other.delete("SHOP_TOKEN", by="user:ops") is False
    assert store.get("SHOP_TOKEN") == TOKEN


def test_reading_with_no_key_and_nothing_stored_makes_no_key_file(
    store: Secrets, key_file: Path
) -> None:
    credentials = Credentials(store, {"PATH": "/bin"})

    assert store.get("SHOP_TOKEN") is None
    assert credentials.get("SHOP_TOKEN") is None
    assert "SHOP_TOKEN" not in credentials
    assert list(credentials) == ["PATH"]
    assert not key_file.exists()
    assert not key_file.parent.exists()


def test_an_environment_variable_overrides_the_stored_secret(store: Secrets) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    store.set("MAIL_KEY", "mail-value", by="user:ann")

    overridden = Credentials(store, {"SHOP_TOKEN": "from-env", "HOME": "/home/ann"})
    assert overridden["SHOP_TOKEN"] == "from-env"
    assert overridden["MAIL_KEY"] == "mail-value"
    assert sorted(overridden) == ["HOME", "MAIL_KEY", "SHOP_TOKEN"]
    assert len(overridden) == 3
    # An empty variable overrides nothing, as a driver treats it as unset.
    assert Credentials(store, {"SHOP_TOKEN": ""})["SHOP_TOKEN"] == TOKEN
    assert Credentials(store, {})["SHOP_TOKEN"] == TOKEN
    with pytest.raises(KeyError):
        Credentials(store, {})["shop_token"]
    assert TOKEN not in repr(overridden)


def test_credentials_read_a_new_value_once_their_cache_expires(store: Secrets) -> None:
    # Long enough that the write between the two reads, on a loaded machine, ends within it.
    credentials = Credentials(store, {}, cache_seconds=2.0)
    assert credentials.get("SHOP_TOKEN") is None

    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    assert credentials.get("SHOP_TOKEN") is None  # still the cached answer
    time.sleep(2.05)
    assert credentials.get("SHOP_TOKEN") == TOKEN


def test_a_value_set_under_another_key_names_the_secret_and_the_changed_key(
    store: Secrets, db: Database, key_file: Path
) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    with db.engine.connect() as conn:
        ciphertext = conn.execute(sa.text("SELECT ciphertext FROM remit_secrets")).scalar()
    assert isinstance(ciphertext, str)
    assert TOKEN not in ciphertext

    other_key = Secrets(db, APP, SecretKey(file=key_file, value=Fernet.generate_key().decode()))
    with pytest.raises(SecretError, match="the secret key changed") as raised:
        other_key.get("SHOP_TOKEN")
    message = str(raised.value)
    assert "SHOP_TOKEN" in message
    assert "REMIT_SECRET_KEY" in message
    assert "remit secrets set SHOP_TOKEN" in message
    assert ciphertext not in message
    assert raised.value.name == "SHOP_TOKEN"


def test_a_stored_secret_whose_key_file_is_gone_says_so(store: Secrets, key_file: Path) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.unlink()

    with pytest.raises(SecretError, match="no key to read it") as raised:
        Secrets(store.db, APP, SecretKey(file=key_file)).get("SHOP_TOKEN")
    assert str(key_file) in str(raised.value)
    assert not key_file.exists()


def test_a_key_from_the_environment_is_used_and_no_key_file_is_made(
    db: Database, key_file: Path
) -> None:
    key = Fernet.generate_key().decode()
    settings = Settings.from_env(key_file.parent.parent, environ={"REMIT_SECRET_KEY": key})
    assert settings.secret_key_file == key_file.resolve()
    assert key not in repr(settings)

    store = Secrets(db, APP, SecretKey.from_settings(settings))
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")

    assert not key_file.exists()
    assert Secrets(db, APP, SecretKey(file=key_file, value=key)).get("SHOP_TOKEN") == TOKEN


@pytest.mark.parametrize(
    "raw",
    ["not-a-key", "c2hvcnQ=", Fernet.generate_key().decode()[:-4]],
    ids=["not-base64", "too-short", "cut-short"],
)
def test_a_malformed_environment_key_is_refused_with_how_to_make_one(
    raw: str, key_file: Path
) -> None:
    with pytest.raises(SettingsError, match="REMIT_SECRET_KEY is not a secret key") as raised:
        SecretKey(file=key_file, value=raw)
    message = str(raised.value)
    assert "Fernet.generate_key().decode()" in message
    assert raw not in message


@pytest.mark.parametrize(
    "name", ["shop_token", "1TOKEN", "SHOP-TOKEN", "SHOP TOKEN", "", "A" * 201, "TOKEN\n"]
)
def test_a_bad_name_is_refused_saying_what_a_name_looks_like(store: Secrets, name: str) -> None:
    with pytest.raises(SecretError, match="capital letters, digits and underscores"):
        store.set(name, TOKEN, by="user:ann")
    with pytest.raises(SecretError, match="cannot name a secret"):
        store.get(name)
    assert store.list() == []


def test_good_names() -> None:
    for name in ("SHOP_TOKEN", "_PRIVATE", "A", "K2", "A" * 200):
        assert check_name(name) == name


def test_an_empty_value_is_refused(store: Secrets, key_file: Path) -> None:
    with pytest.raises(SecretError, match="the value is empty"):
        store.set("SHOP_TOKEN", "", by="user:ann")
    assert store.list() == []


def test_the_key_file_is_made_on_the_first_set_private_and_kept(
    store: Secrets, key_file: Path
) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")

    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_bytes()
    Fernet(key.strip())  # a valid key
    store.set("MAIL_KEY", "mail-value", by="user:ann")
    fresh = Secrets(store.db, APP, SecretKey(file=key_file))
    fresh.set("THIRD", "third-value", by="user:ann")
    assert key_file.read_bytes() == key
    assert fresh.get("SHOP_TOKEN") == TOKEN
    assert [p.name for p in key_file.parent.iterdir()] == ["secret.key"]


def test_a_key_file_others_may_read_is_refused(store: Secrets, key_file: Path) -> None:
    store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.chmod(0o644)

    for attempt in (
        lambda: Secrets(store.db, APP, SecretKey(file=key_file)).get("SHOP_TOKEN"),
        lambda: Secrets(store.db, APP, SecretKey(file=key_file)).set("B", "b", by="user:ann"),
    ):
        with pytest.raises(SecretError, match="has mode 0644") as raised:
            attempt()
        assert f"chmod 600 {key_file}" in str(raised.value)


def test_a_key_file_that_holds_no_key_is_refused_without_showing_it(
    store: Secrets, key_file: Path
) -> None:
    key_file.parent.mkdir(parents=True)
    key_file.write_text("hunter2-not-a-key\n")
    key_file.chmod(0o600)

    with pytest.raises(SecretError, match="does not hold a secret key") as raised:
        store.set("SHOP_TOKEN", TOKEN, by="user:ann")
    assert str(key_file) in str(raised.value)
    assert "hunter2" not in str(raised.value)
    assert store.list() == []


_RACER = """
import sys, time
from pathlib import Path
from remit.connectors.credentials import create_key_file
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
print(create_key_file(Path(sys.argv[1])).decode())
"""


def test_processes_making_the_key_file_at_once_end_with_one_key(tmp_path: Path) -> None:
    key_file = tmp_path / "app" / ".remit" / "secret.key"
    go = tmp_path / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(key_file), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    time.sleep(1.0)  # every racer is waiting for the start
    go.touch()
    keys = []
    for racer in racers:
        stdout, stderr = racer.communicate(timeout=60)
        assert racer.returncode == 0, stderr
        keys.append(stdout.strip())

    assert len(set(keys)) == 1
    assert key_file.read_text().strip() == keys[0]
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in key_file.parent.iterdir()) == ["secret.key"]
    assert create_key_file(key_file).decode() == keys[0]


# A connector whose live driver needs the token: it answers with the token's hash, so the test
# can see that the right value arrived without the value being anywhere it could leak from.


class Check(BaseModel):
    account: str


class Checked(BaseModel):
    account: str
    token_sha256: str


class Use(BaseModel):
    account: str


class Used(BaseModel):
    account: str


check_token = op("vault.tokens.check", effect="read", input=Check, output=Checked)
use_token = op("vault.tokens.use", effect="write", input=Use, output=Used)


class VaultDriver(Driver):
    """The live vault: every op reads `SHOP_TOKEN` from its credentials."""

    credentials = ("SHOP_TOKEN",)

    def __init__(self) -> None:
        self.seen: list[str] = []

    @implements(check_token)
    def check(self, input: Check, call: CallContext) -> Checked:
        token = call.credential("SHOP_TOKEN")
        self.seen.append(hashlib.sha256(token.encode()).hexdigest())
        return Checked(account=input.account, token_sha256=self.seen[-1])

    @implements(use_token)
    def use(self, input: Use, call: CallContext) -> Used:
        call.credential("SHOP_TOKEN")
        return Used(account=input.account)


class UnlistedVaultDriver(VaultDriver):
    """A driver that reads the token without listing it, so remit cannot check it first."""

    credentials = ()


class FakeVault(Fake):
    @implements(check_token)
    def check(self, input: Check, call: CallContext) -> Checked:
        return Checked(account=input.account, token_sha256="fake")

    @implements(use_token)
    def use(self, input: Use, call: CallContext) -> Used:
        return Used(account=input.account)


vault = Connector("vault", ops=[check_token, use_token], driver=VaultDriver, fake=FakeVault)


@workflow(name="check-token", input=Check, uses=[check_token])
def check_flow(ctx: Context, input: Check) -> Checked:
    return ctx.call(check_token, account=input.account)


@workflow(name="use-token", input=Use, uses=[use_token])
def use_flow(ctx: Context, input: Use) -> Used:
    return ctx.call(use_token, account=input.account)


def vault_app() -> App:
    return App(name=APP, workflows=[check_flow, use_flow], connectors=[vault])


class Lines(logging.Handler):
    """Every log record, formatted with its arguments and any traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines() -> Iterator[Lines]:
    """Every log line at DEBUG and above, from remit, DBOS and everything else."""
    handler = Lines()
    loggers = [logging.getLogger(), logging.getLogger("dbos")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def dump_database(db: Database) -> str:
    """Every row of every table in the database, remit's and DBOS's, as text."""
    inspector = sa.inspect(db.engine)
    schemas = [None] if db.is_sqlite else inspector.get_schema_names()
    parts: list[str] = []
    with db.engine.connect() as conn:
        for schema in schemas:
            if schema in ("information_schema", "pg_catalog", "pg_toast"):
                continue
            tables = sa.MetaData()
            tables.reflect(conn, schema=schema)
            for table in tables.sorted_tables:
                parts.append(f"== {table.fullname}")
                for row in conn.execute(sa.select(table)):
                    parts.append(" | ".join(_text(value) for value in row))
    return "\n".join(parts)


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def test_a_driver_reads_a_stored_secret_and_it_is_nowhere_in_the_database_or_logs(
    database_url: str,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    log_lines: Lines,
) -> None:
    monkeypatch.chdir(tmp_path)  # the harness's app folder: where its key file goes
    driver = VaultDriver()
    harness = Harness(vault_app(), database_url=database_url, implementations={"vault": driver})
    secrets = Secrets(db, APP, SecretKey.from_settings(harness.worker.settings))
    secrets.set("SHOP_TOKEN", TOKEN, by="user:ann")
    with harness:
        run = harness.run("check-token", {"account": "acct-1"})
    assert run.status == "done", run.error

    expected = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert driver.seen == [expected]  # the driver got the value
    assert run.output == {"account": "acct-1", "token_sha256": expected}
    assert (tmp_path / ".remit" / "secret.key").stat().st_mode & 0o777 == 0o600

    dump = dump_database(db)
    assert "workflow_status\n" in dump  # DBOS's tables are in the dump, not only remit's
    assert "SHOP_TOKEN" in dump  # the secret's row is there, encrypted
    assert expected in dump  # and the run's output
    assert dump.count(TOKEN) == 0
    logged = "\n".join(log_lines.lines)
    assert "secret SHOP_TOKEN of app vault-app set by user:ann" in logged  # lines were caught
    assert logged.count(TOKEN) == 0


def test_the_environment_a_test_gives_the_worker_overrides_a_stored_secret(
    database_url: str, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    driver = VaultDriver()
    harness = Harness(
        vault_app(),
        database_url=database_url,
        implementations={"vault": driver},
        environ={"SHOP_TOKEN": "from-the-environment"},
    )
    Secrets(db, APP, SecretKey.from_settings(harness.worker.settings)).set(
        "SHOP_TOKEN", TOKEN, by="user:ann"
    )
    with harness:
        run = harness.run("check-token", {"account": "acct-1"})
    assert run.status == "done", run.error
    assert driver.seen == [hashlib.sha256(b"from-the-environment").hexdigest()]


def test_a_driver_with_no_stored_secret_and_no_variable_fails_naming_it(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Harness(
        vault_app(), database_url=database_url, implementations={"vault": VaultDriver()}
    ) as harness:
        run = harness.run("check-token", {"account": "acct-1"})
    assert run.status == "failed"
    assert "SHOP_TOKEN" in (run.error or "")
    assert not (tmp_path / ".remit").exists()  # nothing stored: no key was needed


@pytest.mark.parametrize("driver_class", [VaultDriver, UnlistedVaultDriver])
def test_a_secret_set_under_an_old_key_fails_the_call_as_a_credential_not_uncertain(
    database_url: str,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    driver_class: type[VaultDriver],
) -> None:
    monkeypatch.chdir(tmp_path)
    harness = Harness(
        vault_app(), database_url=database_url, implementations={"vault": driver_class()}
    )
    key_file = harness.worker.settings.secret_key_file
    Secrets(db, APP, SecretKey(file=key_file)).set("SHOP_TOKEN", TOKEN, by="user:ann")
    key_file.write_bytes(Fernet.generate_key() + b"\n")  # the key is replaced
    with harness:
        run = harness.run("use-token", {"account": "acct-1"})
        ledger = harness.ledger(run.run_id)
    assert run.status == "failed"
    assert "cannot read the credential `SHOP_TOKEN`" in (run.error or "")
    assert "the secret key changed" in (run.error or "")
    assert [row.status for row in ledger] == ["failed"]
    assert os.stat(key_file).st_mode & 0o777 == 0o600

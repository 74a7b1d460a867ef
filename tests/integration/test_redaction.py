"""Secrets stay secret: a credential a driver puts in its error or output, or a workflow in a
step's value, its error or its own return value, is redacted before anything is stored or
logged. After the runs no table (remit's or DBOS's) and no log line holds the value, and the
marker naming the secret stands where the value was."""

from __future__ import annotations

import base64
import binascii
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from pydantic import BaseModel, Field

from remit import (
    App,
    AsyncContext,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    StepFailed,
    implements,
    op,
    workflow,
)
from remit.connectors.credentials import Credentials, SecretKey, Secrets
from remit.connectors.redaction import call_secrets
from remit.core.database import Database
from remit.testing import Harness

APP = "redact-app"
# A stored secret (`remit secrets set MAIL_TOKEN`), and a credential given in the environment.
STORED = "mailtok_R7vQ2xZp9LkW4nBc"
ENV = "envtok_H3sD8fJ1aQ6mVy0T"
# A secret stored while the worker runs, which the driver knows some other way.
ROTATED = "rottok_W5eT9uK2cN7bXq4L"
MARK_STORED = "[redacted:MAIL_TOKEN]"
MARK_ENV = "[redacted:ENV_TOKEN]"


class Ask(BaseModel):
    to: str


class Said(BaseModel):
    note: str
    headers: dict[str, str]


class Strict(BaseModel):
    token: str = Field(pattern=r"^mailtok_")


fail_driver = op("mailer.tokens.refuse", effect="read", input=Ask, output=Said)
fail_bug = op("mailer.tokens.crash", effect="read", input=Ask, output=Said)
echo = op("mailer.tokens.echo", effect="read", input=Ask, output=Said)
strict = op("mailer.tokens.strict", effect="read", input=Ask, output=Strict)
send = op("mailer.messages.send", effect="write", input=Ask, output=Said)
rotated = op("mailer.tokens.rotated", effect="read", input=Ask, output=Said)


class LeakyMailer(Driver):
    """A driver that puts its credentials where remit stores things."""

    credentials = ("MAIL_TOKEN", "ENV_TOKEN")

    @staticmethod
    def _both(call: CallContext) -> str:
        return f"{call.credential('MAIL_TOKEN')} / {call.credential('ENV_TOKEN')}"

    @implements(fail_driver)
    def refuse(self, input: Ask, call: CallContext) -> Said:
        raise DriverError(
            f"the mailer refused {self._both(call)}",
            retryable=False,
            status=401,
            vendor_code=call.credential("MAIL_TOKEN"),
        )

    @implements(fail_bug)
    def crash(self, input: Ask, call: CallContext) -> Said:
        raise ValueError(f"could not parse the answer to {self._both(call)}")

    @implements(echo)
    def echo(self, input: Ask, call: CallContext) -> Said:
        # A log line of its own, which the log filter redacts.
        logging.getLogger("remit.drivers.mailer").info("sending with %s", self._both(call))
        return Said(
            note=f"sent to {input.to} with {self._both(call)}",
            headers={call.credential("ENV_TOKEN"): f"Bearer {call.credential('MAIL_TOKEN')}"},
        )

    @implements(strict)
    def strict(self, input: Ask, call: CallContext) -> Strict:
        return Strict(token=call.credential("MAIL_TOKEN"))

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Said:
        raise ValueError(f"the connection dropped mid-send with {self._both(call)}")

    @implements(rotated)
    def rotated(self, input: Ask, call: CallContext) -> Said:
        return Said(note=f"known some other way: {ROTATED}", headers={})


class FakeMailer(Fake):
    @implements(fail_driver)
    def refuse(self, input: Ask, call: CallContext) -> Said:
        return Said(note="", headers={})

    @implements(fail_bug)
    def crash(self, input: Ask, call: CallContext) -> Said:
        return Said(note="", headers={})

    @implements(echo)
    def echo(self, input: Ask, call: CallContext) -> Said:
        return Said(note="", headers={})

    @implements(strict)
    def strict(self, input: Ask, call: CallContext) -> Strict:
        return Strict(token="mailtok_fake")

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Said:
        return Said(note="", headers={})

    @implements(rotated)
    def rotated(self, input: Ask, call: CallContext) -> Said:
        return Said(note="", headers={})


mailer = Connector(
    "mailer",
    ops=[fail_driver, fail_bug, echo, strict, send, rotated],
    driver=LeakyMailer,
    fake=FakeMailer,
)


@workflow(name="leak-error", input=Ask, uses=[fail_driver])
def leak_error(ctx: Context, input: Ask) -> Said:
    return ctx.call(fail_driver, to=input.to)


@workflow(name="leak-bug", input=Ask, uses=[fail_bug])
def leak_bug(ctx: Context, input: Ask) -> Said:
    return ctx.call(fail_bug, to=input.to)


@workflow(name="leak-output", input=Ask, uses=[echo])
def leak_output(ctx: Context, input: Ask) -> dict[str, str]:
    said = ctx.call(echo, to=input.to)
    # The workflow's later steps see the redacted output.
    return {"note": said.note, "echoed": ctx.step("echo", lambda: said.note)}


@workflow(name="leak-strict", input=Ask, uses=[strict])
def leak_strict(ctx: Context, input: Ask) -> Strict:
    return ctx.call(strict, to=input.to)


@workflow(name="leak-write", input=Ask, uses=[send])
def leak_write(ctx: Context, input: Ask) -> Said:
    return ctx.call(send, to=input.to)


@workflow(name="leak-rotated", input=Ask, uses=[rotated])
def leak_rotated(ctx: Context, input: Ask) -> Said:
    return ctx.call(rotated, to=input.to)


def _boom() -> None:
    raise ValueError(f"the step saw {STORED} and {ENV}")


@workflow(name="leak-step", input=Ask)
def leak_step(ctx: Context, input: Ask) -> dict[str, str]:
    value = ctx.step("read", lambda: {"read": STORED, ENV: "as a key"})
    try:
        ctx.step("boom", _boom)
    except StepFailed as error:
        return {"value": str(value), "error": str(error), "cause": str(error.__cause__)}
    return {}


@workflow(name="leak-raise", input=Ask)
def leak_raise(ctx: Context, input: Ask) -> None:
    raise ValueError(f"the workflow saw {STORED} and {ENV}")


@workflow(name="leak-return", input=Ask)
def leak_return(ctx: Context, input: Ask) -> dict[str, str]:
    return {"seen": f"{STORED} {ENV}"}


@workflow(name="leak-async", input=Ask)
async def leak_async(ctx: AsyncContext, input: Ask) -> None:
    await ctx.step("boom", _boom)


def leaky_app() -> App:
    return App(
        name=APP,
        workflows=[
            leak_error,
            leak_bug,
            leak_output,
            leak_strict,
            leak_write,
            leak_rotated,
            leak_step,
            leak_raise,
            leak_return,
            leak_async,
        ],
        connectors=[mailer],
    )


def dump_database(db: Database) -> str:
    """Every column of every row of every table, remit's and DBOS's (on Postgres every schema,
    `dbos` too), as text; a value that decodes as base64 (a pickle) is given decoded too."""
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


_BASE64 = re.compile(r"[A-Za-z0-9+/=]{16,}")


def _text(value: object) -> str:
    text = (
        bytes(value).decode("utf-8", "replace")
        if isinstance(value, bytes | bytearray | memoryview)
        else str(value)
    )
    decoded = []
    for chunk in _BASE64.findall(text):
        try:
            decoded.append(base64.b64decode(chunk, validate=True).decode("utf-8", "replace"))
        except (binascii.Error, ValueError):
            continue
    return " ".join([text, *decoded])


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of remit's and DBOS's at DEBUG (DBOS's logger does not propagate)."""
    caplog.set_level(logging.DEBUG, logger="remit")
    caplog.set_level(logging.DEBUG, logger="dbos")
    dbos_logger = logging.getLogger("dbos")
    dbos_logger.addHandler(caplog.handler)
    yield caplog
    dbos_logger.removeHandler(caplog.handler)


def _lines(caplog: pytest.LogCaptureFixture) -> str:
    """Each record as a handler writes it: its message with its arguments and traceback."""
    formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def test_no_credential_a_run_leaks_is_stored_or_logged(
    database_url: str,
    db: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    logged: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    harness = Harness(
        leaky_app(),
        database_url=database_url,
        implementations={"mailer": LeakyMailer()},
        environ={"ENV_TOKEN": ENV},
    )
    secrets = Secrets(db, APP, SecretKey.from_settings(harness.worker.settings))
    secrets.set("MAIL_TOKEN", STORED, by="user:ann")
    with harness:
        runs = {
            name: harness.run(name, {"to": "ann@example.com"})
            for name in (
                "leak-error",
                "leak-bug",
                "leak-output",
                "leak-strict",
                "leak-step",
                "leak-raise",
                "leak-return",
                "leak-async",
            )
        }
        ledger = {}
        write = harness.start("leak-write", {"to": "ann@example.com"})
        task = harness.task(write.run_id)
        ledger["leak-write"] = harness.ledger(write.run_id)
        # Set while the worker runs, as `remit secrets set` in another process does: known
        # once what the worker read of the secrets is as old as a secret's value may be.
        secrets.set("ROTATED_TOKEN", ROTATED, by="user:ann")
        credentials = harness.worker.runtime.caller.environ
        assert isinstance(credentials, Credentials)
        time.sleep(credentials.cache_seconds)
        runs["leak-rotated"] = harness.run("leak-rotated", {"to": "ann@example.com"})
        ledger.update({name: harness.ledger(run.run_id) for name, run in runs.items()})

    both = f"{MARK_STORED} / {MARK_ENV}"
    # A DriverError: its message and its fields.
    assert runs["leak-error"].status == "failed"
    assert f"the mailer refused {both}" in (runs["leak-error"].error or "")
    [refused] = ledger["leak-error"]
    assert refused.error == f"the mailer refused {both}"
    assert refused.error_info is not None
    assert (refused.error_info["vendor_code"], refused.error_info["status"]) == (MARK_STORED, 401)
    # A plain ValueError.
    assert runs["leak-bug"].status == "failed"
    assert f"raised ValueError: could not parse the answer to {both}" in (
        runs["leak-bug"].error or ""
    )
    # An output: its fields, a key, and what later steps and the run's output saw.
    assert runs["leak-output"].status == "done", runs["leak-output"].error
    assert runs["leak-output"].output == {
        "note": f"sent to ann@example.com with {both}",
        "echoed": f"sent to ann@example.com with {both}",
    }
    assert ledger["leak-output"][0].output["headers"] == {MARK_ENV: f"Bearer {MARK_STORED}"}
    # An output that, redacted, no longer parses fails the call, saying why.
    assert runs["leak-strict"].status == "failed"
    assert "answered output holding the value of the secret MAIL_TOKEN" in (
        runs["leak-strict"].error or ""
    )
    assert "return no credential in it" in (runs["leak-strict"].error or "")
    # A write whose outcome is unknown: its row, and its task's reason in the activity.
    assert task.op_id == "mailer.messages.send"
    assert f"mid-send with {both}" in (ledger["leak-write"][0].error or "")
    # A step's value and its error, a workflow's error and its return value, sync and async.
    assert runs["leak-step"].output == {
        "value": str({"read": MARK_STORED, MARK_ENV: "as a key"}),
        "error": f"step `boom` failed: ValueError: the step saw {MARK_STORED} and {MARK_ENV}",
        "cause": f"the step saw {MARK_STORED} and {MARK_ENV}",
    }
    assert runs["leak-raise"].status == "failed"
    assert runs["leak-raise"].error == f"ValueError: the workflow saw {MARK_STORED} and {MARK_ENV}"
    assert runs["leak-return"].output == {"seen": f"{MARK_STORED} {MARK_ENV}"}
    assert runs["leak-async"].status == "failed"
    assert f"the step saw {MARK_STORED} and {MARK_ENV}" in (runs["leak-async"].error or "")
    # A secret stored while the worker ran is known at the next call.
    assert runs["leak-rotated"].output == {
        "note": "known some other way: [redacted:ROTATED_TOKEN]",
        "headers": {},
    }

    dump = dump_database(db)
    assert "workflow_status" in dump
    assert "operation_outputs" in dump
    for value in (STORED, ENV, ROTATED):
        assert value not in dump
    assert dump.count(MARK_STORED) >= 10
    assert dump.count(MARK_ENV) >= 10
    assert dump.count(f"mid-send with {both}") >= 2
    lines = _lines(logged)
    assert "secret MAIL_TOKEN of app redact-app set by user:ann" in lines  # lines were caught
    assert "ValueError" in lines
    assert f"sending with {both}" in lines
    for value in (STORED, ENV, ROTATED):
        assert value not in lines
        assert value not in logged.text


class CountingSecrets(Secrets):
    """The app's secrets, counting how many values it decrypts."""

    decrypted = 0

    def decrypt(self, ciphertext: str) -> str | None:
        self.decrypted += 1
        return super().decrypt(ciphertext)


def test_the_known_values_follow_another_process_decrypting_only_what_changed(
    db: Database, tmp_path: Path
) -> None:
    key_file = tmp_path / ".remit" / "secret.key"
    worker = CountingSecrets(db, APP, SecretKey(file=key_file))
    other_process = Secrets(db, APP, SecretKey(file=key_file))
    credentials = Credentials(worker, {"ENV_TOKEN": ENV}, cache_seconds=0)
    assert credentials.stored_values() == []
    assert not key_file.exists()  # nothing stored: no key needed

    other_process.set("MAIL_TOKEN", STORED, by="user:ann")
    other_process.set("ROTATED_TOKEN", ROTATED, by="user:ann")
    assert sorted(credentials.stored_values()) == [
        ("MAIL_TOKEN", STORED),
        ("ROTATED_TOKEN", ROTATED),
    ]
    assert worker.decrypted == 2
    assert len(credentials.stored_values()) == 2
    assert worker.decrypted == 2  # nothing changed: nothing decrypted again

    other_process.set("MAIL_TOKEN", "mailtok_rotated_value", by="user:ann")
    other_process.delete("ROTATED_TOKEN", by="user:ann")
    assert credentials.stored_values() == [("MAIL_TOKEN", "mailtok_rotated_value")]
    assert worker.decrypted == 3

    other_key = SecretKey(file=key_file, value=Fernet.generate_key().decode())
    Secrets(db, APP, other_key).set("OLD_KEY_TOKEN", "set-under-another-key", by="user:ann")
    # A value no one can decrypt is left out; the others are still known.
    assert credentials.stored_values() == [("MAIL_TOKEN", "mailtok_rotated_value")]
    secrets = call_secrets(credentials, ["ENV_TOKEN", "OLD_KEY_TOKEN"])
    assert secrets.text(f"{ENV} mailtok_rotated_value") == f"{MARK_ENV} {MARK_STORED}"

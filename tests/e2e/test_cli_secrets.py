"""`remit secrets` as a user runs it: the value goes in on stdin and comes out only to the
driver that needs it; no command prints it, and no table or log line holds it."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from remit.core.database import Database
from tests.e2e.cli_support import Cli
from tests.forked import run_remit
from tests.integration.test_secrets import dump_database

TOKEN = "shptok_e2e_Hn4Rw8ZcQ2xVb7LmT5kP9sJd"

# An app whose live driver needs SHOP_TOKEN and answers with its hash.
VAULT_APP = """
import hashlib

from pydantic import BaseModel

from remit import App, CallContext, Connector, Context, Driver, Fake, implements, op, workflow


class Check(BaseModel):
    account: str


class Checked(BaseModel):
    account: str
    token_sha256: str


check_token = op("vault.tokens.check", effect="read", input=Check, output=Checked)


class VaultDriver(Driver):
    credentials = ("SHOP_TOKEN",)

    @implements(check_token)
    def check(self, input: Check, call: CallContext) -> Checked:
        token = call.credential("SHOP_TOKEN")
        return Checked(account=input.account, token_sha256=hashlib.sha256(token.encode()).hexdigest())


class FakeVault(Fake):
    @implements(check_token)
    def check(self, input: Check, call: CallContext) -> Checked:
        return Checked(account=input.account, token_sha256="fake")


vault = Connector("vault", ops=[check_token], driver=VaultDriver, fake=FakeVault)


@workflow(name="check-token", input=Check, uses=[check_token])
def check_flow(ctx: Context, input: Check) -> Checked:
    return ctx.call(check_token, account=input.account)


app = App(name="vault-app", workflows=[check_flow], connectors=[vault])
"""


@pytest.fixture
def vault_app(tmp_path: Path) -> Path:
    folder = tmp_path / "vault_app"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(VAULT_APP)
    return folder


class Remit:
    """`remit` commands on the vault app, live drivers, logging everything; every word they
    print is kept in `printed`."""

    def __init__(self, cli: Cli, app: Path) -> None:
        self.app = app
        self.env = {**cli.env, "REMIT_FAKES": "0", "REMIT_LOG_LEVEL": "DEBUG"}
        self.env.pop("SHOP_TOKEN", None)
        self.env.pop("REMIT_SECRET_KEY", None)
        self.env.pop("REMIT_SECRET_KEY_FILE", None)
        self.printed: list[str] = []

    def __call__(
        self, *args: str, stdin: str = "", env: dict[str, str] | None = None, code: int = 0
    ) -> subprocess.CompletedProcess[str]:
        done = run_remit(
            ["--app", str(self.app), *args], env={**self.env, **(env or {})}, input=stdin
        )
        self.printed += [done.stdout, done.stderr]
        assert done.returncode == code, done.stdout + done.stderr
        return done


def test_a_secret_set_on_stdin_reaches_the_driver_and_nothing_prints_or_stores_it(
    cli: Cli, vault_app: Path
) -> None:
    remit = Remit(cli, vault_app)
    key_file = vault_app / ".remit" / "secret.key"
    assert "no secrets stored for vault-app" in remit("secrets", "list").stdout
    assert not key_file.exists()

    done = remit("secrets", "set", "SHOP_TOKEN", stdin=TOKEN + "\n")
    assert "secret SHOP_TOKEN set for vault-app" in done.stdout
    assert key_file.stat().st_mode & 0o777 == 0o600
    remit("secrets", "set", "MAIL_KEY", "--as", "user:bob", stdin="mail-value")

    listed = remit("secrets", "list").stdout
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert sorted(rows) == ["MAIL_KEY", "SHOP_TOKEN"]
    assert "user:ann" in rows["SHOP_TOKEN"]
    assert "user:bob" in rows["MAIL_KEY"]
    assert "overrides it" not in listed
    overridden = remit("secrets", "list", env={"SHOP_TOKEN": "from-env"}).stdout
    assert "overrides it" in next(line for line in overridden.splitlines() if "SHOP_TOKEN" in line)
    assert "overrides it" not in next(
        line for line in overridden.splitlines() if "MAIL_KEY" in line
    )

    ran = remit("run", "check-token", "--input", '{"account": "acct-1"}')
    expected = hashlib.sha256(TOKEN.encode()).hexdigest()  # the driver got the value
    assert expected in ran.stdout + ran.stderr
    assert "DEBUG" in ran.stderr  # the run logged everything it could

    db = Database(cli.env["REMIT_DATABASE_URL"])
    try:
        dump = dump_database(db)
    finally:
        db.dispose()
    assert "SHOP_TOKEN" in dump
    assert expected in dump
    assert dump.count(TOKEN) == 0
    assert "\n".join(remit.printed).count(TOKEN) == 0
    assert TOKEN not in key_file.read_text()

    assert "secret SHOP_TOKEN deleted" in remit("secrets", "delete", "SHOP_TOKEN").stdout
    gone = remit("secrets", "delete", "SHOP_TOKEN", code=1)
    assert "no secret named SHOP_TOKEN is stored for vault-app" in gone.stderr
    assert "SHOP_TOKEN" not in remit("secrets", "list").stdout


def test_the_environment_overrides_a_stored_secret_for_the_driver(
    cli: Cli, vault_app: Path
) -> None:
    remit = Remit(cli, vault_app)
    remit("secrets", "set", "SHOP_TOKEN", stdin=TOKEN)

    ran = remit("run", "check-token", "--input", '{"account": "a"}', env={"SHOP_TOKEN": "from-env"})

    assert hashlib.sha256(b"from-env").hexdigest() in ran.stdout
    assert hashlib.sha256(TOKEN.encode()).hexdigest() not in ran.stdout


def test_refusals_exit_1_say_why_and_store_nothing(cli: Cli, vault_app: Path) -> None:
    remit = Remit(cli, vault_app)

    bad_name = remit("secrets", "set", "shop_token", stdin=TOKEN, code=1)
    assert "capital letters, digits and underscores" in bad_name.stderr
    empty = remit("secrets", "set", "SHOP_TOKEN", stdin="\n", code=1)
    assert "no value for SHOP_TOKEN" in empty.stderr
    bad_key = remit(
        "secrets", "set", "SHOP_TOKEN", stdin=TOKEN, env={"REMIT_SECRET_KEY": "nope"}, code=1
    )
    assert "REMIT_SECRET_KEY is not a secret key" in bad_key.stderr
    assert "Fernet.generate_key()" in bad_key.stderr
    unknown = remit("secrets", "delete", "NEVER_SET", code=1)
    assert "no secret named NEVER_SET" in unknown.stderr

    assert "no secrets stored for vault-app" in remit("secrets", "list").stdout
    assert not (vault_app / ".remit" / "secret.key").exists()
    assert "\n".join(remit.printed).count(TOKEN) == 0


def test_a_changed_key_fails_the_run_naming_the_secret(cli: Cli, vault_app: Path) -> None:
    remit = Remit(cli, vault_app)
    remit("secrets", "set", "SHOP_TOKEN", stdin=TOKEN)
    other_key = Fernet.generate_key().decode()

    failed = remit(
        "run",
        "check-token",
        "--input",
        '{"account": "a"}',
        env={"REMIT_SECRET_KEY": other_key},
        code=1,
    )

    shown = failed.stdout + failed.stderr
    assert "SHOP_TOKEN" in shown
    assert "the secret key changed" in shown
    assert "\n".join(remit.printed).count(TOKEN) == 0

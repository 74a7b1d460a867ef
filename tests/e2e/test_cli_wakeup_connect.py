"""`remit wakeup connect URL` as a user runs it, against a real wakeup service: it makes and
stores the instance's token, registers the instance (a direct call, in the ledger), and running
it again is the same registration."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.core.schema import secrets
from tests.e2e.cli_support import Cli
from tests.instances import WakeupService

INSTANCE_URL = "http://127.0.0.1:9/desk"
REGISTERED = re.compile(r"instance (\S+) registered with ")

INSTANCE_APP = """
from pydantic import BaseModel

from remit import App, Context, workflow


class Nothing(BaseModel):
    pass


@workflow(name="idle", input=Nothing)
def idle(ctx: Context, input: Nothing) -> None:
    return None


app = App(name="instance", workflows=[idle])
"""


@pytest.fixture
def instance_app(tmp_path: Path) -> Path:
    folder = tmp_path / "instance_app"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "app.py").write_text(textwrap.dedent(INSTANCE_APP))
    return folder


def _live(cli: Cli, service: WakeupService) -> None:
    """The live driver: the instance talks to the real service, under an account of it."""
    del cli.env["REMIT_FAKES"]
    cli.env["REMIT_WAKEUP_URL"] = service.url
    cli.env["REMIT_WAKEUP_ACCOUNT_TOKEN"] = service.account()


def test_connect_stores_the_token_and_registers_the_instance_once(
    cli: Cli, wakeup_service: WakeupService, instance_app: Path
) -> None:
    _live(cli, wakeup_service)

    first = cli("wakeup", "connect", INSTANCE_URL, app=instance_app)
    assert "made this instance's token, stored as the secret REMIT_WAKEUP_TOKEN" in first.stdout
    found = REGISTERED.search(first.stdout)
    assert found is not None, first.stdout
    instance = found.group(1)
    assert f"{INSTANCE_URL}/wake" in first.stdout  # what to do next
    listed = cli("secrets", "list", app=instance_app).stdout
    assert "REMIT_WAKEUP_TOKEN" in listed
    assert "user:ann" in listed

    second = cli("wakeup", "connect", INSTANCE_URL, app=instance_app)
    assert "made this instance's token" not in second.stdout
    again = REGISTERED.search(second.stdout)
    assert again is not None, second.stdout
    assert again.group(1) == instance

    held = cli(
        "call", "wakeup.instances.get", "--input", json.dumps({"id": instance}), app=instance_app
    )
    shown = json.loads(held.stdout)
    assert (shown["id"], shown["url"], shown["found"]) == (instance, INSTANCE_URL, True)

    ledger = cli("ledger", app=instance_app).stdout
    creates = [line for line in ledger.splitlines() if "wakeup.instances.create" in line]
    assert len(creates) == 2, ledger
    assert all("user:ann" in line and "ok" in line for line in creates), ledger
    with cli.db.engine.connect() as conn:
        stored = conn.execute(sa.select(secrets.c.name, secrets.c.set_by)).all()
    assert [tuple(row) for row in stored] == [("REMIT_WAKEUP_TOKEN", "user:ann")]  # made once


def test_connect_without_the_service_url_is_one_line(cli: Cli, instance_app: Path) -> None:
    cli.env.pop("REMIT_WAKEUP_URL", None)
    cli.env["REMIT_WAKEUP_ACCOUNT_TOKEN"] = "rwa_anything"
    refused = cli("wakeup", "connect", INSTANCE_URL, app=instance_app, check=False)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: REMIT_WAKEUP_URL is not set")


def test_connect_without_the_account_token_is_one_line(cli: Cli, instance_app: Path) -> None:
    cli.env["REMIT_WAKEUP_URL"] = "http://127.0.0.1:9"
    cli.env.pop("REMIT_WAKEUP_ACCOUNT_TOKEN", None)
    refused = cli("wakeup", "connect", INSTANCE_URL, app=instance_app, check=False)
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: REMIT_WAKEUP_ACCOUNT_TOKEN is not set")


def test_a_refusal_names_the_permit_to_add_and_that_permit_lets_it_connect(
    cli: Cli, wakeup_service: WakeupService, instance_app: Path
) -> None:
    _live(cli, wakeup_service)  # under policies that permit nothing yet
    policies = instance_app / "policies"
    policies.mkdir()
    (policies / "instance.cedar").write_text("// Who may do what.\n")

    told = []
    for _ in range(2):
        refused = cli("wakeup", "connect", INSTANCE_URL, app=instance_app, check=False)
        assert refused.returncode == 1
        [error] = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        permit = error.rsplit(": ", 1)[1]
        told.append((error, permit))
        with (policies / "instance.cedar").open("a") as file:
            file.write(permit + "\n")
    (secret, secret_permit), (call, call_permit) = told
    assert secret.startswith(
        'error: user:ann may not set_secret Secret::"REMIT_WAKEUP_TOKEN": no policy permits it. '
        "Connecting this instance needs it: add this permit to a .cedar file in the app's "
        "policies/ folder (or name a group user:ann is in): "
    )
    assert secret_permit == (
        'permit (principal == User::"ann", action == Action::"set_secret", '
        'resource == Secret::"REMIT_WAKEUP_TOKEN");'
    )
    assert 'user:ann may not call Op::"wakeup.instances.create"' in call
    assert call_permit == (
        'permit (principal == User::"ann", action == Action::"call", '
        'resource == Op::"wakeup.instances.create");'
    )

    connected = cli("wakeup", "connect", INSTANCE_URL, app=instance_app)
    assert REGISTERED.search(connected.stdout) is not None, connected.stdout

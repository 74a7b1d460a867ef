"""`remit wakeup serve` and `remit wakeup accounts`: running the wakeup service, and the
accounts that register instances with it. The service has a database of its own
(`--database`, else REMIT_WAKEUP_DATABASE_URL, else .remit/wakeup.sqlite here)."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from remit.cli.base import (
    AsJson,
    BehindProxy,
    PlainTable,
    TlsCert,
    TlsKey,
    command_group,
    err,
    moment,
    out,
    print_json,
)
from remit.cli.wakeup import wakeup_cli

if TYPE_CHECKING:
    from remit.wakeup.store import WakeupStore

accounts_cli = command_group(
    "The accounts that register instances with this wakeup service: make, list.",
    no_args_is_help=True,
)
wakeup_cli.add_typer(accounts_cli, name="accounts")

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database",
        help="The service's database URL (default REMIT_WAKEUP_DATABASE_URL, else "
        "sqlite:///<here>/.remit/wakeup.sqlite).",
    ),
]


def _store(database: str | None) -> "WakeupStore":
    from remit.wakeup.store import WakeupStore, database_url

    return WakeupStore(database_url(database))


@accounts_cli.command("create")
def create_account(
    label: Annotated[str, typer.Argument(help="Who the account is for, e.g. acme-prod.")],
    database: DatabaseOption = None,
) -> None:
    """Make an account and print its token, once: only its hash is kept. The instances' side
    sets it as REMIT_WAKEUP_ACCOUNT_TOKEN."""
    from remit.core.errors import RemitError

    if not label.strip() or len(label) > 200:
        raise RemitError("give the account a label of 1 to 200 characters, e.g. acme-prod")
    store = _store(database)
    try:
        token = store.create_account(label.strip())
    finally:
        store.dispose()
    err.print(f"account {label.strip()}: its token is shown this once; only its hash is kept:")
    print(token)


@accounts_cli.command("list")
def list_accounts(database: DatabaseOption = None, as_json: AsJson = False) -> None:
    """List the accounts: id, label and when each was made (never a token)."""
    store = _store(database)
    try:
        found = store.accounts()
    finally:
        store.dispose()
    if as_json:
        print_json(found)
        return
    if not found:
        out.print("no accounts: make one with `remit wakeup accounts create LABEL`")
        return
    table = PlainTable("account", "label", "created", box=None)
    for each in found:
        table.add_row(each.id, each.label, moment(each.created_at))
    out.print(table)


@wakeup_cli.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port (0: a free one).")] = 8710,
    database: DatabaseOption = None,
    allow_private: Annotated[
        bool,
        typer.Option(
            "--allow-private",
            help="Call instances on private and loopback addresses too (development and "
            "tests only: anyone with an account could then reach this machine's network).",
        ),
    ] = False,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    behind_proxy: BehindProxy = False,
    lease: Annotated[float | None, typer.Option("--lease", hidden=True, min=0.1)] = None,
) -> None:
    """Run the wakeup service until SIGTERM or Ctrl-C: it calls each registered instance's
    GET {url}/wake at the time the instance set.

    A call claimed by a service process that dies is made again once its 30-second lease
    lapses; REMIT_WAKEUP_LEASE (seconds) shortens the lease, for tests.
    """
    from remit.core import telemetry
    from remit.core.errors import SettingsError
    from remit.core.settings import Settings
    from remit.serve.server import check_exposure
    from remit.serve.server import serve as serve_http
    from remit.wakeup.api import wakeup_api
    from remit.wakeup.loop import DEFAULT_LEASE_S, LEASE_SETTING, WakeLoop

    telemetry.configure_logging(Settings.from_env(Path(".")))
    tls = check_exposure(host, cert=tls_cert, key=tls_key, behind_proxy=behind_proxy)
    if lease is None:
        raw = os.environ.get(LEASE_SETTING) or None
        try:
            lease = DEFAULT_LEASE_S if raw is None else float(raw)
        except ValueError:
            lease = -1.0
        if not lease > 0:
            raise SettingsError(f"{LEASE_SETTING}={raw} must be a number of seconds above 0")
    store = _store(database)
    loop = WakeLoop(store, allow_private=allow_private, lease=lease)
    api = wakeup_api(store, poke=loop.poke, allow_private=allow_private)
    scheme = "https" if tls else "http"
    loop.start()
    try:
        serve_http(
            api,
            host=host,
            port=port,
            drain_timeout=10.0,
            tls=tls,
            listening=lambda url: err.print(
                f"wakeup service listening on {scheme}{url.removeprefix('http')}", soft_wrap=True
            ),
        )
    finally:
        loop.stop()
        store.dispose()
    err.print("wakeup service stopped")

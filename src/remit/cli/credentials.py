"""`remit secrets`: the credentials an app stores, encrypted, in its database.

A value is read from stdin (typed with no echo at a terminal) and never printed: `list` shows
names, when each was set and by whom, and whether an environment variable overrides it here.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import getpass
import os
import sys
from typing import Annotated

import typer

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    command_group,
    moment,
    out,
    print_json,
)

secrets_cli = command_group(
    "Credentials stored encrypted in the app's database, which drivers read as "
    "environment variables.",
    no_args_is_help=True,
)
cli.add_typer(secrets_cli, name="secrets")


def _read_value(name: str) -> str:
    """The value from stdin: typed with no echo at a terminal, else all of stdin less one
    trailing newline."""
    from remit.core.errors import RemitError

    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {name} (not shown): ")
    else:
        raw = sys.stdin.buffer.read()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RemitError(
                f"the value piped in for {name} is not UTF-8 text: store binary values encoded "
                "(base64, say) and decode them in the driver"
            ) from None
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    if not value:
        raise RemitError(
            f"no value for {name}: type it at the prompt, or pipe it in, e.g. "
            f"`remit secrets set {name} < token.txt`"
        )
    return value


@secrets_cli.command("set")
def set_secret(
    name: Annotated[str, typer.Argument(help="The secret's name, e.g. SHOP_TOKEN.")],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Store a secret, reading its value from stdin (no echo at a terminal)."""
    from remit.connectors.credentials import check_name

    check_name(name)
    value = _read_value(name)
    with client_of(app_dir) as remit:
        app_name = remit.app_name
        remit.secrets.set(name, value, by=as_)
    note = (
        " (the environment variable of that name overrides it here)" if os.environ.get(name) else ""
    )
    out.print(f"secret {name} set for {app_name}{note}")


@secrets_cli.command("list")
def list_secrets(as_json: AsJson = False, app_dir: AppDir = None) -> None:
    """List the app's secrets: names, when and by whom each was set. Never values."""
    with client_of(app_dir) as remit:
        app_name = remit.app_name
        stored = remit.secrets.list()
    if as_json:
        from remit.serve.models import SecretView

        print_json([SecretView.model_validate(each, from_attributes=True) for each in stored])
        return
    if not stored:
        out.print(f"no secrets stored for {app_name}")
        return
    table = PlainTable("name", "set at (UTC)", "set by", "environment", box=None)
    for each in stored:
        env = "overrides it" if os.environ.get(each.name) else "-"
        table.add_row(each.name, moment(each.set_at), each.set_by, env)
    out.print(table)


@secrets_cli.command("delete")
def delete_secret(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Delete a secret."""
    from remit.connectors.credentials import check_name
    from remit.core.errors import RemitError

    check_name(name)
    with client_of(app_dir) as remit:
        app_name = remit.app_name
        deleted = remit.secrets.delete(name, by=as_)
    if not deleted:
        raise RemitError(
            f"no secret named {name} is stored for {app_name}: `remit secrets list` shows them"
        )
    out.print(f"secret {name} deleted from {app_name}")

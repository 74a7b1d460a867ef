"""`remit tokens`: API tokens for `remit serve`, each acting as one principal.

A token is printed once, when it is made, and never again: only its hash is kept. Making,
listing and revoking tokens is the policy action `manage_tokens`.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from datetime import UTC, datetime
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
    err,
    moment,
    out,
    print_json,
    whole_ids,
)

tokens_cli = command_group(
    "API tokens for the HTTP API and the command line through it: make, list, revoke.",
    no_args_is_help=True,
)
cli.add_typer(tokens_cli, name="tokens")


@tokens_cli.command("create")
def create(
    for_: Annotated[
        str, typer.Option("--for", help="Who the token acts as: user:<name> or agent:<name>.")
    ],
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="How long it works: 30d, 12h, 90m, 2w (default: always)."),
    ] = None,
    name: Annotated[
        str, typer.Option("--name", help="What it is for, e.g. laptop or ar-bot.")
    ] = "",
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Make a token and print it, once: store it where it is used (REMIT_TOKEN)."""
    from remit.policy.tokens import parse_duration

    expires_in = None if expires is None else parse_duration(expires)
    with client_of(app_dir) as remit:
        info, token = remit.tokens.create(for_, name=name, expires_in=expires_in, by=as_)
    until = "never expires" if info.expires_at is None else f"expires {moment(info.expires_at)}"
    err.print(
        f"token {info.id} acts as {info.principal} and {until}. It is shown this once; only its "
        "hash is kept:"
    )
    print(token)


@tokens_cli.command("list")
def list_tokens(as_json: AsJson = False, as_: ActAs = None, app_dir: AppDir = None) -> None:
    """List the app's tokens, newest first: who each acts as, and whether it still works."""
    with client_of(app_dir) as remit:
        found = remit.tokens.list(by=as_)
    now = datetime.now(UTC)
    if as_json:
        from remit.serve.models import TokenView

        print_json([TokenView.of(each, now) for each in found])
        return
    if not found:
        out.print("no tokens: make one with `remit tokens create --for user:<name>`")
        return
    table = PlainTable("token", "acts as", "name", "state", "created", "by", "expires", box=None)
    for each in found:
        table.add_row(
            each.id,
            each.principal,
            each.name or "-",
            each.state(now),
            moment(each.created_at),
            each.created_by,
            moment(each.expires_at),
        )
    out.print(whole_ids(table, 0))


@tokens_cli.command("revoke")
def revoke(
    token_id: Annotated[
        str, typer.Argument(help="The token's id (tok_...), from `remit tokens list`.")
    ],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Revoke a token: it authenticates nothing from now on."""
    with client_of(app_dir) as remit:
        info = remit.tokens.revoke(token_id, by=as_)
    out.print(f"token {info.id} ({info.principal}) revoked by {info.revoked_by}")

"""`remit login-link` and `remit passwords set`: how a person gets into the web console.

A link works once, for 15 minutes unless `--expires` says otherwise; send it to its person.
Making links and setting passwords is the policy action `manage_tokens`, as for API tokens.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import sys
from typing import Annotated

import typer

from remit.cli.base import ActAs, AppDir, cli, client_of, command_group, err, moment, remote_of

passwords_cli = command_group(
    "Console passwords, for people who sign in without a link.", no_args_is_help=True
)
cli.add_typer(passwords_cli, name="passwords")

For = Annotated[str, typer.Option("--for", help="Who signs in: user:<name> or agent:<name>.")]


@cli.command("login-link")
def login_link(
    for_: For,
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires", help="How long the link works: 15m (default), 1h, 2d; at most 7d."
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="The console's address as its person reaches it (default: REMIT_URL, else "
            "http://REMIT_HTTP_HOST:REMIT_HTTP_PORT).",
        ),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Print a one-time link that signs a person in to the web console."""
    from remit.core.errors import RemitError
    from remit.policy.tokens import parse_duration

    expires_in = None if expires is None else parse_duration(expires)
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise RemitError(
            f"--base-url {base_url!r} is not an http:// or https:// address: give the console's "
            "address as its person opens it, e.g. https://desk.example.com"
        )
    with client_of(app_dir) as remit:
        info, code = remit.sessions.link(for_, expires_in=expires_in, by=as_)
        settings = remit.settings
        # A server listening on every address is reached on this machine at 127.0.0.1.
        host = "127.0.0.1" if settings.http_host in ("0.0.0.0", "::", "") else settings.http_host
        base = base_url or remote_of()[0] or f"http://{host}:{settings.http_port}"
    err.print(
        f"a sign-in link for {info.principal}: it works once, until {moment(info.expires_at)}. "
        "Send it to them alone:"
    )
    print(f"{base.rstrip('/')}/console/sign-in?code={code}")


@passwords_cli.command("set")
def set_password(for_: For, as_: ActAs = None, app_dir: AppDir = None) -> None:
    """Set a person's console password: asked for twice at a terminal, else read from stdin."""
    if sys.stdin.isatty():
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    with client_of(app_dir) as remit:
        remit.sessions.set_password(for_, password, by=as_)
    err.print(f"{for_} may now sign in to the console with that password")

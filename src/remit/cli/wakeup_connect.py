"""`remit wakeup connect URL`: register this instance with the wakeup service, so a worker that
stops when idle can ask to be woken at its next deadline.

It makes the instance's token (the secret `REMIT_WAKEUP_TOKEN`) when there is none, then calls
`wakeup.instances.create` as the person running it, so the ledger shows the registration. Run
again, it finds the same token and the service answers with the same instance.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.markup import escape

from remit.cli.base import ActAs, AppDir, err, local_client, out
from remit.cli.wakeup import wakeup_cli


@wakeup_cli.command("connect")
def connect(
    url: Annotated[
        str,
        typer.Argument(
            help="This instance's public URL, where the service calls /wake, e.g. "
            "https://remit.example.com."
        ),
    ],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Register this instance with the wakeup service at REMIT_WAKEUP_URL, under the account
    of REMIT_WAKEUP_ACCOUNT_TOKEN. Makes and stores the instance's token (the secret
    REMIT_WAKEUP_TOKEN) if there is none; running it again is the same registration."""
    from remit.connectors.wakeup import ACCOUNT_TOKEN, SERVICE_URL, check_url, create_instance
    from remit.core.errors import RemitError
    from remit.core.wakeup_tokens import INSTANCE_TOKEN_SECRET, mint_instance_token

    try:
        check_url(url, what="URL")
    except ValueError as error:
        raise RemitError(str(error)) from None
    with local_client(app_dir, command="wakeup connect") as remit:
        service = remit.settings.wakeup_url
        if service is None:
            raise RemitError(
                f"{SERVICE_URL} is not set: set it to the wakeup service's address (e.g. "
                f"https://wakeup.example.com), then run `remit wakeup connect {url}` again"
            )
        if remit.settings.wakeup_account_token is None:
            raise RemitError(
                f"{ACCOUNT_TOKEN} is not set: set it to your account's token at {service} "
                "(`remit wakeup accounts create LABEL` there prints one), then run this again"
            )
        stored = {info.name for info in remit.secrets.list()}
        made = INSTANCE_TOKEN_SECRET not in stored and not os.environ.get(INSTANCE_TOKEN_SECRET)
        with _permit_told():
            if made:
                remit.secrets.set(INSTANCE_TOKEN_SECRET, mint_instance_token(), by=as_)
            result = remit.calls.call(create_instance.id, {"url": url}, by=as_)
    if result.status == "held":
        out.print(
            f"{result.op} held for approval: run {result.run_id} waits; once it is approved, "
            "the instance is registered"
        )
        return
    if result.status == "failed":
        err.print(escape(f"{result.op} failed (key {result.idempotency_key}): {result.error}"))
        raise typer.Exit(1)
    instance = result.output["id"]
    if made:
        out.print(f"made this instance's token, stored as the secret {INSTANCE_TOKEN_SECRET}")
    out.print(escape(f"instance {instance} registered with {service} at {url}"))
    out.print(
        escape(
            f"next: keep {url} reachable from the service (it calls {url.rstrip('/')}/wake), and "
            f"run the worker with {SERVICE_URL} set: before it stops when idle, it registers "
            "its next deadline there"
        )
    )


@contextlib.contextmanager
def _permit_told() -> Iterator[None]:
    """Say, when no policy permits a step of connecting, the Cedar permit that would: the
    token's secret (`set_secret`) and the registering call (`call`) are both the policies'."""
    from remit.core.errors import RemitError
    from remit.policy.cedar import RESOURCE_TYPES, PolicyDenied, Principal

    try:
        yield
    except PolicyDenied as error:
        if not str(error).endswith("no policy permits it"):
            raise  # a forbid refused it: no permit would help
        who = Principal.parse(error.principal)
        kind = RESOURCE_TYPES[error.action]  # type: ignore[index]
        permit = (
            f'permit (principal == {who.kind}::"{who.name}", action == Action::"{error.action}", '
            f'resource == {kind}::"{error.resource}");'
        )
        raise RemitError(
            f"{error}. Connecting this instance needs it: add this permit to a .cedar file in "
            f"the app's policies/ folder (or name a group {who.text} is in): {permit}"
        ) from None

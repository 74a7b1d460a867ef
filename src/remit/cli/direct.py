"""Direct calls and the policies over them: `remit call`, `remit data`, `remit policies` and
`remit denials`."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    command_group,
    err,
    json_input,
    load,
    near,
    out,
    print_json,
)

if TYPE_CHECKING:
    from remit.execution.direct import CallResult


def print_call(result: "CallResult") -> None:
    """What a direct call came to; exits 1 unless it was made, or held for an approval."""
    again = " (replayed: this key was called before)" if result.replayed else ""
    if result.status == "held":
        why = f" ({result.note})" if result.note else ""
        out.print(f"{result.op} held for approval{why}{again}: run {result.run_id} waits")
        out.print(f"  decide it: remit approvals --run {result.run_id}, then remit approve ID")
        return
    if result.status == "failed":
        err.print(escape(f"{result.op} failed (key {result.idempotency_key}): {result.error}"))
        raise typer.Exit(1)
    out.print(json.dumps(result.output, indent=2, sort_keys=True))
    err.print(f"{result.op} ok (key {result.idempotency_key}){again}")


@cli.command("call")
def call_op(
    op: Annotated[str, typer.Argument(help="The op's id, <vendor>.<resource>.<op>.")],
    input: Annotated[
        str, typer.Option("--input", help="The op's input as JSON (@FILE reads a file, - stdin).")
    ] = "{}",
    as_: ActAs = None,
    key: Annotated[
        str | None,
        typer.Option(help="Makes the call idempotent: the same key again calls nothing again."),
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Call an op directly, outside any workflow, as the app's policies allow.

    The call is recorded in the ledger. A policy may hold it for an approval: it then becomes
    a run of the built-in `call` workflow, which makes the call once someone approves it.
    """
    from remit.core.errors import RemitError

    payload = json_input(input, "--input", app_dir, cap="op_bytes")
    if not isinstance(payload, dict):
        raise RemitError(
            f"--input must be a JSON object of the op's fields, not {near(json.dumps(payload))}"
        )
    with client_of(app_dir) as remit:
        result = remit.calls.call(op, payload, by=as_, key=key)
        fake_here = _on_a_fake_of_its_own(remit, op)
    print_call(result)
    if fake_here is not None and result.status == "ok":
        err.print(
            f"[yellow]note:[/] {escape(op)} wrote to {escape(fake_here)}'s fake in this command "
            "(REMIT_FAKES=1), which ends with it: a worker has a fake of its own and will not "
            "see this write. To act on the fakes the instance's workers use, call it through "
            "`remit serve` (--url, as `remit demo` does)"
        )


def _on_a_fake_of_its_own(remit: object, op_id: str) -> str | None:
    """The vendor whose fake a write called in this process holds, where that is so: a local
    client on fakes calling a connector's write (a collection is in the database, which every
    process shares). None otherwise."""
    from remit.client import Client
    from remit.connectors.data import VENDOR as DATA_VENDOR

    if not isinstance(remit, Client) or not remit.settings.fakes:
        return None
    op = remit.app.ops.get(op_id)
    if op is None or op.effect != "write" or op.vendor == DATA_VENDOR:
        return None
    return op.vendor


VERBS = ("get", "put", "list", "delete")


@cli.command()
def data(
    collection: Annotated[str, typer.Argument(help="The collection's name.")],
    verb: Annotated[str, typer.Argument(help="get, put, list or delete.")],
    key: Annotated[str | None, typer.Argument(help="The record's key (get, delete).")] = None,
    input: Annotated[
        str | None,
        typer.Option("--input", help="The record to put, as JSON (@FILE reads a file, - stdin)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="list: how many records.")] = 100,
    after: Annotated[
        str | None, typer.Option(help="list: start after this key (the last page's next).")
    ] = None,
    as_: ActAs = None,
    call_key: Annotated[
        str | None,
        typer.Option("--key", help="Makes a put or delete idempotent, as for `remit call`."),
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Get, put, list or delete a collection's records: the op data.<collection>.<verb>,
    called directly as the app's policies allow."""
    from remit.core.errors import RemitError

    if verb not in VERBS:
        raise RemitError(f"{verb!r} is not one of {', '.join(VERBS)}: remit data NAME get KEY")
    # The collection's declaration (its key field) is the app's code, read here either way.
    app, _ = load(app_dir)
    with client_of(app_dir) as remit:
        declared = app.collections.get(collection)
        if declared is None:
            known = ", ".join(sorted(app.collections)) or "none"
            raise RemitError(f"app `{app.name}` has no collection `{collection}` (it has: {known})")
        payload: dict[str, Any]
        if verb in ("get", "delete"):
            if key is None:
                raise RemitError(f"remit data {collection} {verb} needs the record's key")
            payload = {declared.key: key}
        elif verb == "put":
            record = json_input(input, "--input", app_dir, cap="op_bytes") if input else None
            if not isinstance(record, dict):
                raise RemitError(f"remit data {collection} put needs --input with a JSON object")
            payload = record
        else:
            payload = {"limit": limit, "after": after}
        result = remit.calls.call(f"data.{collection}.{verb}", payload, by=as_, key=call_key)
    print_call(result)


policies_cli = command_group("Show and check the app's Cedar policies.", no_args_is_help=False)
cli.add_typer(policies_cli, name="policies")


@policies_cli.callback(invoke_without_command=True)
def policies(ctx: typer.Context, app_dir: AppDir = None) -> None:
    """Show the policy files and whether they load; exits 1 when they refuse everything."""
    if ctx.invoked_subcommand is not None:
        return
    app, _ = load(app_dir)
    policy = app.policy
    if not policy.enabled:
        out.print(f"app {app.name} has no policies/ folder: every action is allowed, none checked")
        return
    out.print(f"policies of {app.name} in {policy.folder}:")
    for name in policy.files:
        out.print(f"  {name}")
    if policy.left_out:
        out.print(f"  not in any context (typed two ways): {', '.join(policy.left_out)}")
    if policy.problem is not None:
        err.print(escape(f"broken, so every action is refused: {policy.problem}"))
        raise typer.Exit(1)
    out.print("  they parse and validate against the app's schema (`remit policies schema`)")


@policies_cli.command("schema")
def schema(app_dir: AppDir = None) -> None:
    """Print the Cedar schema (JSON) remit derives from the app, which policies validate
    against."""
    from remit.core.errors import RemitError

    app, _ = load(app_dir)
    if not app.policy.enabled:
        raise RemitError(f"app {app.name} has no policies/ folder: add one to use policies")
    out.print_json(json.dumps(app.policy.schema))


@policies_cli.command("explain")
def explain(
    action: Annotated[
        str,
        typer.Argument(
            help="An action the policies know: start, call, decide, read_runs, ... (README, Policies)."
        ),
    ],
    resource: Annotated[
        str,
        typer.Argument(
            help="A workflow, op or approval type's name (refund), or its Cedar entity "
            '(ApprovalType::"refund").'
        ),
    ],
    context: Annotated[
        str,
        typer.Option(
            help="The context as JSON, e.g. '{\"input\": {}}' (@FILE reads a file, - stdin)."
        ),
    ] = "{}",
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Ask the policies whether someone may take an action, without taking it or recording
    anything; exits 1 when refused."""
    from remit.core.errors import RemitError
    from remit.policy.cedar import ACTIONS

    app, settings = load(app_dir)
    if action not in ACTIONS:
        raise RemitError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    values = json_input(context, "--context", app_dir, cap="input_bytes")
    if not isinstance(values, dict):
        raise RemitError("--context must be a JSON object")
    named = _resource_named(action, resource)
    verdict = app.policy.check(as_ or settings.actor, action, named, values)
    held = " (held for an approval)" if verdict.held else ""
    line = f"{'allowed' if verdict.allowed else 'denied'}{held}: {verdict.reason}"
    if not verdict.allowed:
        err.print(escape(line))
        raise typer.Exit(1)
    out.print(escape(line))


# Cedar's entity form, `Type::"name"`, its name a JSON string.
_ENTITY = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)::("(?:[^"\\]|\\.)*")')


def _resource_named(action: str, given: str) -> str:
    """The name of the resource `given` names for `action`: given bare (`refund`), or as
    Cedar's entity (`ApprovalType::"refund"`) of the type the action acts on."""
    from remit.core.errors import RemitError
    from remit.policy.cedar import RESOURCE_TYPES

    found = _ENTITY.fullmatch(given.strip())
    if found is None:
        return given
    kind = RESOURCE_TYPES[action]  # type: ignore[index]
    try:
        name = json.loads(found.group(2))
    except ValueError:
        raise RemitError(
            f'{given!r} is not a Cedar entity: write it as {kind}::"<name>", or give the bare name'
        ) from None
    if found.group(1) != kind:
        raise RemitError(
            f"`{action}` acts on {kind} entities, not on a {found.group(1)}: give "
            f'{kind}::"{name}", or the bare name {name}'
        )
    return str(name)


@cli.command()
def denials(
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List the actions the app's policies refused, newest first."""
    with client_of(app_dir) as remit:
        rows = remit.ops.denials(limit=limit)
    if as_json:
        from remit.serve.models import DenialView

        print_json([DenialView.model_validate(row, from_attributes=True) for row in rows])
        return
    table = PlainTable(show_edge=False, pad_edge=False)
    for column in ("at", "who", "action", "resource", "why"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.at.strftime("%Y-%m-%d %H:%M:%S"),
            row.principal,
            row.action,
            row.resource,
            row.reason,
        )
    out.print(table if rows else "no denials")

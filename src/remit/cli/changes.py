"""`remit change open`, `remit changes`, `remit change show` and `remit deploys`: changes to
the operations repo, each a branch moving through checks, review, merge and deploy as one run
of the built-in workflow `change`, and what the hosts were deployed with."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

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
    styled,
    whole_ids,
)
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.changes.store import Change, Deploy
    from remit.people.activity import Activity

change_cli = command_group(
    "Open a change to the operations repo, or show one: its checks, review, merge and deploy.",
    no_args_is_help=True,
)
cli.add_typer(change_cli, name="change")

# A change's status in its colour: moving on, waiting on someone, done, or gone wrong.
_COLOURS = {
    "opened": "cyan",
    "checking": "cyan",
    "review": "cyan",
    "merged": "green",
    "deploying": "cyan",
    "deployed": "green",
    "failing": "red",
    "rejected": "red",
    "unhealthy": "red",
    "failed": "red",
    "rolled_back": "yellow",
    "withdrawn": "yellow",
    "closed": "yellow",
}
# How much of a commit a table shows.
SHORT_SHA = 12


def _status(status: str) -> Text:
    return styled(status, _COLOURS.get(status))


def _short(sha: str | None) -> str:
    return "-" if not sha else sha[:SHORT_SHA]


@change_cli.command("open")
def open_change(
    branch: Annotated[str, typer.Argument(help="The branch of the operations repo: fix-dns.")],
    title: Annotated[
        str, typer.Option("--title", help="What it changes, in a line (default: the branch).")
    ] = "",
    base: Annotated[str, typer.Option("--base", help="The branch it is merged into.")] = "main",
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="Makes it idempotent: the same open again under the key prints the first "
            "one's change and opens nothing.",
        ),
    ] = None,
    as_: ActAs = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the change as one JSON object, as the API does.")
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Open a change of a branch: its run opens the change request at the forge, checks the
    branch, asks for review, merges and deploys. Whoever opens it is its author, who may not
    approve it. No worker needs to run in this process."""
    with client_of(app_dir) as remit:
        opened = remit.changes.open(branch, title=title, base=base, by=as_, key=key)
    if as_json:
        from remit.serve.change_routes import ChangeView

        print_json(ChangeView.of(opened))
        return
    out.print(
        Text(
            printable(f"change {opened.id} of {opened.branch} into {opened.base}: {opened.status}")
        ),
        soft_wrap=True,
    )
    out.print(
        Text(f"  run {opened.run_id}; `remit change show {opened.id}` follows it"), soft_wrap=True
    )


@cli.command("changes")
def list_changes(
    branch: Annotated[
        str | None, typer.Option("--branch", help="Only this branch's changes.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List the changes to the operations repo, newest first."""
    with client_of(app_dir) as remit:
        found = remit.changes.list(branch=branch, limit=limit)
    if as_json:
        from remit.serve.change_routes import ChangeView

        print_json([ChangeView.of(each) for each in found])
        return
    if not found:
        out.print("no changes" if branch is None else f"no changes of {printable(branch)}")
        return
    table = PlainTable(
        "change", "branch", "status", "head", "author", "number", "updated", box=None
    )
    for each in found:
        table.add_row(
            each.id,
            each.branch,
            _status(each.status),
            _short(each.head),
            each.author,
            "-" if each.number is None else f"#{each.number}",
            moment(each.updated_at),
        )
    out.print(whole_ids(table, 0))


@change_cli.command("show")
def show_change(
    change_id: Annotated[str, typer.Argument(help="The change's id: chg_….")],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print it as one JSON object: GET /changes/{id}'s fields with its `activity`.",
        ),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Show a change: where it stands, its change request, its checks with what each said, its
    merge and deploy, its run, and what happened to it, oldest first."""
    with client_of(app_dir) as remit:
        found = remit.changes.get(change_id)
        activity = remit.records.activity("change", found.id)
    if as_json:
        from remit.serve.change_routes import ChangeView
        from remit.serve.models import ActivityView

        print_json(
            {
                **ChangeView.of(found).model_dump(mode="json"),
                "activity": [ActivityView.model_validate(each.as_json()) for each in activity],
            }
        )
        return
    for line in _change_lines(found):
        out.print(line, soft_wrap=True)
    for line in _check_lines(found.checks):
        out.print(line, soft_wrap=True)
    out.print(Text("activity"))
    if not activity:
        out.print(Text("  nothing yet"))
        return
    out.print(_activity_table(activity))


def _change_lines(change: "Change") -> list[Text]:
    facts = [
        ("title", change.title),
        ("author", change.author),
        ("run", f"{change.run_id} ({change.run_status or 'unknown'})"),
        (
            "request",
            "-" if change.number is None else f"#{change.number} {change.url or ''}".strip(),
        ),
        ("head", change.head or "-"),
        ("merged", change.merge_commit or "-"),
        ("deployed", change.deployed or "-"),
        ("opened", moment(change.created_at)),
        ("updated", moment(change.updated_at)),
    ]
    head = Text.assemble(
        printable(f"change {change.id}  {change.branch} into {change.base}  "),
        _status(change.status),
    )
    return [head, *(Text(printable(f"  {name:<9} {value}")) for name, value in facts)]


def _check_lines(checks: dict[str, Any] | None) -> list[Text]:
    """Each check of the last head checked: ok or failed, and what it said, indented."""
    results = (checks or {}).get("results") or {}
    if not results:
        return [Text("checks  none yet")]
    lines = [Text(f"checks of {_short((checks or {}).get('head'))}")]
    for name, result in results.items():
        ok = bool(result.get("ok"))
        said = "ok" if ok else "failed"
        lines.append(Text.assemble(f"  {printable(str(name))}  ", (said, "green" if ok else "red")))
        summary = str(result.get("summary") or "").rstrip()
        lines.extend(Text(f"    {printable(line)}") for line in summary.splitlines())
    return lines


def _activity_table(found: list["Activity"]) -> PlainTable:
    table = PlainTable("#", "time", "kind", "actor", "what", box=None)
    for each in found:
        table.add_row(str(each.id), moment(each.at), each.kind, each.actor, each.summary)
    return table


@cli.command("deploys")
def list_deploys(
    host: Annotated[
        str | None, typer.Option("--host", help="Only this host's deploys (its name: web).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List what the hosts were deployed with, newest first, and whether each was healthy
    after: by a change, its rollback, or a push to the base branch."""
    with client_of(app_dir) as remit:
        found = remit.changes.deploys(host=host, limit=limit)
    if as_json:
        from remit.serve.change_routes import DeployView

        print_json([DeployView.of(each) for each in found])
        return
    if not found:
        out.print("no deploys" if host is None else f"no deploys of {printable(host)}")
        return
    out.print(_deploys_table(found))


def _deploys_table(found: list["Deploy"]) -> PlainTable:
    table = PlainTable(
        "host", "revision", "kind", "health", "change", "run", "at", "detail", box=None
    )
    for each in found:
        table.add_row(
            each.host,
            _short(each.revision),
            each.kind,
            styled("healthy", "green") if each.healthy else styled("unhealthy", "red"),
            each.change_id or "-",
            each.run_id,
            moment(each.at),
            each.detail,
        )
    whole_ids(table, 4, 5)
    return table

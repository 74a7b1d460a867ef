"""`remit approvals`, `approve`, `reject` and `approvals withdraw`: the commands of
`client.approvals`."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    command_group,
    ids_or_rows,
    json_input,
    moment,
    near,
    out,
    print_json,
    run_id_of,
    status_text,
    whole_ids,
)

if TYPE_CHECKING:
    pass

approvals_cli = command_group(
    "The gates runs wait at: list them, or withdraw one you asked for.",
    invoke_without_command=True,
)
cli.add_typer(approvals_cli, name="approvals")


@approvals_cli.callback()
def approvals(
    ctx: typer.Context,
    pending: Annotated[
        bool, typer.Option("--pending", help="Only approvals still pending.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only their ids.")] = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's approvals.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 100,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List approvals, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    ids_or_rows(quiet, as_json)
    with client_of(app_dir) as remit:
        if run is not None:
            run = run_id_of(remit, run)
        found = remit.approvals.list(status="pending" if pending else None, run_id=run, limit=limit)
    if as_json:
        from remit.serve.models import ApprovalView

        print_json([ApprovalView.of(each) for each in found])
        return
    if quiet:
        for each in found:
            out.print(each.id)
        return
    if not found:
        out.print("no pending approvals" if pending else "no approvals")
        return
    table = PlainTable(
        "approval",
        "run",
        "type",
        "title",
        "status",
        "assignee",
        "created",
        "expires",
        "decided by",
        box=None,
    )
    for each in found:
        table.add_row(
            each.id,
            each.run_id,
            each.type,
            each.title,
            status_text(each.status),
            each.assignee or "-",
            moment(each.created_at),
            moment(each.expires_at),
            f"{each.decided_by} via {each.decided_via}" if each.decided_by else "-",
        )
    out.print(whole_ids(table, 0, 1))


DecisionKey = Annotated[
    str | None,
    typer.Option(
        "--key",
        help="The decision key: the same key again replays the first decision (default: new).",
    ),
]
Reason = Annotated[str | None, typer.Option("--reason", help="Why, kept with the decision.")]


@cli.command()
def approve(
    approval_ids: Annotated[
        list[str], typer.Argument(help="The approvals' ids (or unambiguous prefixes).")
    ],
    edit: Annotated[
        str | None,
        typer.Option(
            "--edit",
            help="Fields to change in the draft, as JSON: '{\"amount\": 120}' (@FILE reads a "
            "file, - stdin).",
        ),
    ] = None,
    reason: Reason = None,
    key: DecisionKey = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Approve pending approvals (one with edits to its draft) and resume their runs: all of
    them, or none when any is refused (every reason is listed)."""
    from remit.core.errors import RemitError

    edits = None
    if edit is not None:
        fields = json_input(edit, "--edit", app_dir, cap="draft_bytes")
        if not isinstance(fields, dict):
            raise RemitError(
                "--edit must be a JSON object of fields, e.g. '{\"amount\": 120}', not "
                f"{near(json.dumps(fields))}"
            )
        if len(approval_ids) > 1:
            raise RemitError(
                f"--edit changes one draft, and {len(approval_ids)} approvals were named: approve "
                "the one to edit on its own"
            )
        edits = fields
    _decide(approval_ids, "approved", edits=edits, reason=reason, key=key, as_=as_, app_dir=app_dir)


@cli.command()
def reject(
    approval_ids: Annotated[
        list[str], typer.Argument(help="The approvals' ids (or unambiguous prefixes).")
    ],
    reason: Reason = None,
    key: DecisionKey = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Reject pending approvals and resume their runs: all of them, or none when any is
    refused (every reason is listed)."""
    _decide(approval_ids, "rejected", edits=None, reason=reason, key=key, as_=as_, app_dir=app_dir)


def _decide(
    given: list[str],
    decision: str,
    *,
    edits: dict[str, Any] | None,
    reason: str | None,
    key: str | None,
    as_: str | None,
    app_dir: Path | None,
) -> None:
    with client_of(app_dir) as remit:
        ids = [remit.find_id("approval", each) for each in given]
        result = remit.approvals.decide(
            ids,
            decision,
            key=key or f"cli:{uuid.uuid4().hex}",
            edits=None if edits is None else {ids[0]: edits},
            reason=reason,
            by=as_,
            via="cli",
        )
        decided = [(each, remit.approvals.get(each.approval_id)) for each in result.decided]
    again = " (replayed: this key had already decided it)" if result.replayed else ""
    for each, approval in decided:
        out.print(
            f"{approval.id} {status_text(each.status).markup} by {approval.decided_by}{again}"
        )
        if approval.edited_draft_json is not None:
            out.print(f"  draft  {json.dumps(approval.edited_draft_json)}")
        if each.resumed_workflow_id:
            out.print(f"  run {each.run_id} resumes on attempt {each.resumed_workflow_id}")


@approvals_cli.command()
def withdraw(
    approval_id: Annotated[
        str, typer.Argument(help="The approval's id (or an unambiguous prefix).")
    ],
    reason: Reason = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="The withdrawal's key: the same key again replays the first (default: new).",
        ),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Withdraw a pending approval you asked for (as the policies allow) and resume its run,
    which reads the gate as withdrawn: no one may decide it after."""
    with client_of(app_dir) as remit:
        found = remit.find_id("approval", approval_id)
        result = remit.approvals.withdraw(
            found, key=key or f"cli:{uuid.uuid4().hex}", reason=reason, by=as_, via="cli"
        )
        approval = remit.approvals.get(found)
    (each,) = result.decided
    again = " (replayed: this key had already withdrawn it)" if result.replayed else ""
    out.print(f"{approval.id} {status_text(each.status).markup} by {approval.decided_by}{again}")
    if each.resumed_workflow_id:
        out.print(f"  run {each.run_id} resumes on attempt {each.resumed_workflow_id}")

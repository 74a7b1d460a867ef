"""`remit`: the command line. Every command takes `--app PATH` (default: the current folder)."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.text import Text

from remit.cli import (  # noqa: F401
    activity,
    apps,
    budgets,
    credentials,
    demo,
    deploy,
    direct,
    init,
    processes,
    resources,
    scenarios,
    signin,
    telegram,
    tokens,
    wakeup,
    wakeup_connect,
    wakeup_service,
)
from remit.cli import tasks as task_commands
from remit.cli.base import (
    NOT_WOKEN,
    SHOWN,
    ActAs,
    AppDir,
    PlainTable,
    cli,
    click_command,
    client_of,
    err,
    here_only,
    json_input,
    load,
    moment,
    near,
    out,
    run_id_of,
    shortened,
    styled,
    whole_ids,
)
from remit.cli.base import exit_now as _exit_now
from remit.cli.serving import serve_run

# Imported for what they do on import: register their commands on `cli`.
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.client import Step
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.serve.worker import Worker


@cli.command()
def start(
    name: Annotated[str, typer.Argument(help="The workflow's name.")],
    input: Annotated[
        str, typer.Option("--input", help="The run's input as JSON (@FILE reads a file, - stdin).")
    ] = "{}",
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Start a run and print its id. No worker needs to run in this process."""
    payload = json_input(input, "--input", app_dir, cap="input_bytes")
    with client_of(app_dir) as remit:
        run = remit.start_row(name, payload, by=as_)
    out.print(run.run_id)


@cli.command()
def run(
    name: Annotated[str, typer.Argument(help="The workflow's name.")],
    input: Annotated[
        str, typer.Option("--input", help="The run's input as JSON (@FILE reads a file, - stdin).")
    ] = "{}",
    as_: ActAs = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the run to finish.")] = 300.0,
    app_dir: AppDir = None,
) -> None:
    """Start a run and serve it in this process until it finishes, then show it.

    This process is a worker while it waits: it serves the app's queues, so it may also take
    other queued runs, which it lets finish (up to REMIT_DRAIN_TIMEOUT) before it exits. When
    the run waits at an approval, it says how to decide it and goes on serving: decide it from
    another terminal (`remit approve ID`) and the run carries on here.
    """
    here_only("run")  # a worker here, on the database: through REMIT_URL, `remit start` it
    payload = json_input(input, "--input", app_dir, cap="input_bytes")
    app, settings = load(app_dir)
    wf = app.workflow(name)

    def started(run: "Run") -> None:
        err.print(f"started {run.run_id} ({wf.name}) on {'fakes' if settings.fakes else 'drivers'}")

    def done(running: "Worker", run: "Run") -> None:
        _show(run, running.remit.steps(run.run_id), running.remit.ledger(run.run_id))

    current = serve_run(
        app,
        settings,
        name,
        payload,
        by=as_ or settings.actor,
        timeout=timeout,
        started=started,
        done=done,
    )
    _exit_now(0 if current.status == "done" else 1)


@cli.command()
def reconcile(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what a pass would do, and do nothing.")
    ] = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Run one reconciler pass now and print what it did (workers run one every minute)."""
    from remit.budgets.model import usd

    with client_of(app_dir) as remit:
        report = remit.reconcile(dry_run=dry_run, by=as_)
    verb = "would do" if dry_run else "did"
    if not report.actions:
        out.print(f"nothing to do{' (dry run)' if dry_run else ''}")
    else:
        table = PlainTable("step", "run", "attempt", "status", "why", box=None)
        for action in report.actions:
            table.add_row(
                action.kind,
                action.run_id,
                action.workflow_id,
                _status(action.status),
                action.reason,
            )
        count = len(report.actions)
        out.print(f"the pass {verb} {count} {'action' if count == 1 else 'actions'}:")
        out.print(table)
    for found in report.drift:
        out.print(
            f"[yellow]drift:[/] budget {found.scope} {found.period}: the counter says "
            f"{usd(found.spent_usd)} spent, the ledger {usd(found.ledger_usd)} (off by "
            f"{usd(found.drift_usd)}). Not corrected: find out why before trusting either"
        )
    for problem in report.errors:
        err.print(f"[red]failed:[/] {problem}")
    if report.errors:
        _exit_now(1)


@cli.command()
def pause(
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Pause the app: its queues stop dequeuing; running runs park at their next step."""
    with client_of(app_dir) as remit:
        count = len(remit.pause(by=as_))
        settings = remit.settings
    out.print(
        f"paused: {count} {'queue' if count == 1 else 'queues'} stopped; running runs park at "
        f"their next step (within REMIT_SWEEP_INTERVAL, {settings.sweep_interval:g}s)"
    )


@cli.command()
def resume(
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Resume a paused app: its queues dequeue again and its parked runs carry on."""
    with client_of(app_dir) as remit:
        _, resumed = remit.resume(by=as_)
    count = len(resumed)
    out.print(f"resumed: {count} parked {'run carries' if count == 1 else 'runs carry'} on")
    for run_id in resumed:
        out.print(f"  {run_id}")


@cli.command()
def deadlines(
    limit: Annotated[int, typer.Option(min=1, help="How many, earliest first.")] = 20,
    app_dir: AppDir = None,
) -> None:
    """List what is due without anyone asking: sleeping runs' wake-ups, approvals' expiries."""
    with client_of(app_dir) as remit:
        found = remit.deadlines(limit=limit)
    if not found:
        out.print("no deadlines")
        return
    table = PlainTable("at", "in", "kind", "run", "what", box=None)
    now = datetime.now(UTC)
    for each in found:
        table.add_row(moment(each.at), _until(each.at - now), each.kind, each.run_id, each.target)
    out.print(table)


def _until(left: timedelta) -> str:
    seconds = int(left.total_seconds())
    if seconds <= 0:
        return "due"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@cli.command()
def runs(
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only their ids (nothing when none).")
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """List runs, newest first."""
    from remit.core.errors import RemitError
    from remit.core.runs import STATUSES

    if status is not None and status not in STATUSES:
        raise RemitError(
            f"--status {status!r} is not a run status: use one of {', '.join(STATUSES)}"
        )
    with client_of(app_dir) as remit:
        found = remit.runs(status=status, workflow=workflow, limit=limit)
    if quiet:
        for each in found:
            out.print(each.run_id)
        return
    table = PlainTable(
        "run", "workflow", "status", "attempt", "started by", "created", "finished", box=None
    )
    for each in found:
        table.add_row(
            each.run_id,
            each.workflow,
            _status(each.status),
            str(each.attempt),
            each.started_by,
            moment(each.created_at),
            moment(each.finished_at),
        )
    out.print(whole_ids(table, 0) if found else "no runs")


@cli.command()
def show(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    full: Annotated[
        bool,
        typer.Option("--full", help=f"Show long values whole (else cut at {SHOWN} characters)."),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Show a run: status, attempts, each step with its timing and output, and its ledger."""
    with client_of(app_dir) as remit:
        run_id = run_id_of(remit, run_id)
        _show(remit.get_run(run_id), remit.steps(run_id), remit.ledger(run_id), full=full)
        task_commands.show_open(remit, run_id)


@cli.command()
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Cancel a run that has not finished."""
    with client_of(app_dir) as remit:
        run_id = run_id_of(remit, run_id)
        before = remit.get_run(run_id)
        after = remit.cancel(run_id, by=as_)
    if before.finished:
        out.print(f"{run_id} had already finished: {before.status}")
    else:
        out.print(f"{run_id} {after.status}")


@cli.command()
def ledger(
    run: Annotated[str | None, typer.Option("--run", help="Only this run's calls.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, help="How many, newest first (without --run).")
    ] = 200,
    app_dir: AppDir = None,
) -> None:
    """List op calls from the ledger."""
    with client_of(app_dir) as remit:
        if run is not None:
            run = run_id_of(remit, run)
            remit.get_run(run)  # an unknown run is an error, not an empty ledger
        rows = remit.ledger(run, limit=limit)
    out.print(_ledger_table(rows, with_run=run is None) if rows else "no calls")


@cli.command()
def workers(app_dir: AppDir = None) -> None:
    """List the app's workers: live, dead, stopped, or taken over by another."""
    from remit.ops.registry import state

    with client_of(app_dir) as remit:
        settings = remit.settings
        rows = remit.workers()
    if not rows:
        out.print("no workers")
        return
    now = datetime.now(UTC)
    dead_after = timedelta(seconds=settings.dead_after)
    table = PlainTable(
        "worker", "state", "host", "pid", "version", "started", "heartbeat", box=None
    )
    for row in rows:
        shown = state(row, now=now, dead_after=dead_after)
        label = f"taken over by {row.taken_over_by}" if shown == "taken over" else shown
        age = int((now - row.heartbeat_at).total_seconds())
        table.add_row(
            row.executor_id,
            _status(label),
            row.host,
            str(row.pid),
            row.version,
            moment(row.started_at),
            f"{age}s ago",
        )
    out.print(table)


@cli.command()
def approvals(
    pending: Annotated[
        bool, typer.Option("--pending", help="Only approvals still pending.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only their ids.")] = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's approvals.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 100,
    app_dir: AppDir = None,
) -> None:
    """List approvals, newest first."""
    with client_of(app_dir) as remit:
        if run is not None:
            run = run_id_of(remit, run)
        found = remit.list_approvals(status="pending" if pending else None, run_id=run, limit=limit)
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
            _status(each.status),
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
        result = remit.decide(
            ids,
            decision,
            key=key or f"cli:{uuid.uuid4().hex}",
            edits=None if edits is None else {ids[0]: edits},
            reason=reason,
            by=as_,
            via="cli",
        )
        decided = [(each, remit.get_approval(each.approval_id)) for each in result.decided]
    again = " (replayed: this key had already decided it)" if result.replayed else ""
    for each, approval in decided:
        out.print(f"{approval.id} {_status(each.status).markup} by {approval.decided_by}{again}")
        if approval.edited_draft_json is not None:
            out.print(f"  draft  {json.dumps(approval.edited_draft_json)}")
        if each.resumed_workflow_id:
            out.print(f"  run {each.run_id} resumes on attempt {each.resumed_workflow_id}")


def _show(
    run: "Run", checkpointed: list["Step"], rows: list["LedgerRow"], *, full: bool = False
) -> None:
    """A run, each attempt's steps as DBOS checkpointed them, and its ledger rows: each long
    value cut short unless `full`."""
    out.print(
        Text.assemble((run.run_id, "bold"), f"  {printable(run.workflow)}  ", _status(run.status))
    )
    out.print(
        Text(
            printable(
                f"  attempt {run.attempt} · version {run.version or '-'} · started by "
                f"{run.started_by} · created {moment(run.created_at)} · finished "
                f"{moment(run.finished_at)}"
            )
        )
    )
    # One line each, however long, as the terminal wraps it: Rich does not measure it.
    out.print(Text(f"  input  {shortened(json.dumps(run.input), full=full)}"), soft_wrap=True)
    if run.output is not None:
        output = shortened(json.dumps(run.output), full=full)
        out.print(Text(f"  output {output}"), soft_wrap=True)
    if run.error:
        out.print(styled(f"  error  {shortened(run.error, full=full)}", "red"), soft_wrap=True)
    steps = PlainTable(
        "attempt", "#", "step", "ms", "output", box=None, title="steps", title_justify="left"
    )
    for step in checkpointed:
        started, finished = step.started_ms, step.finished_ms
        took = "-" if started is None or finished is None else str(finished - started)
        if step.copied:
            took = "copied"  # a resumed attempt's fork copied it: it did not run again
        came_to, failure = step.summary(width=sys.maxsize)
        result: str | Text = "null" if came_to is None else shortened(came_to, full=full)
        if failure is not None:
            result = styled(shortened(failure, full=full), "red")
        steps.add_row(str(step.attempt), str(step.function_id), step.name, took, result)
    out.print(steps)
    out.print(_ledger_table(rows, with_run=False, full=full) if rows else "  no op calls")
    for line in _in_flight(rows):
        out.print(line)


def _in_flight(rows: list["LedgerRow"]) -> list[str]:
    """A line for each call that has started and not answered: which op, and for how long."""
    from datetime import UTC, datetime

    from remit.core.text import describe_seconds

    now = datetime.now(UTC)
    return [
        f"  [yellow]in flight[/]  `{escape(row.op_id)}` (attempt {row.attempt}, key "
        f"{escape(row.idempotency_key)}) has been called for "
        f"{describe_seconds(max(0.0, (now - row.started_at).total_seconds()))} with no answer yet"
        for row in rows
        if row.status == "started"
    ]


def _ledger_table(rows: list["LedgerRow"], *, with_run: bool, full: bool = False) -> PlainTable:
    from remit.budgets.model import usd

    table = PlainTable(box=None, title="ledger", title_justify="left")
    columns = ["run"] if with_run else []
    for column in [
        *columns,
        "attempt",
        "op",
        "effect",
        "key",
        "status",
        "tries",
        "ms",
        "cost",
        "actor",
        "error",
    ]:
        table.add_column(column)
    for row in rows:
        took = "-"
        if row.finished_at is not None:
            took = str(int((row.finished_at - row.started_at).total_seconds() * 1000))
        cells: list[str | Text] = [row.run_id] if with_run else []
        effect = row.effect + (" (idempotent)" if row.effect == "write" and row.idempotent else "")
        cells += [
            str(row.attempt),
            row.op_id,
            effect,
            shortened(row.idempotency_key, full=full),
            _status(row.status),
            str(row.tries),
            took,
            "-" if row.cost is None else usd(row.cost),
            row.actor,
            shortened(row.error or "", full=full),
        ]
        # The outcomes before this one, each on a line of its own under the op it was of.
        for tried in row.earlier:
            before: list[str | Text] = [tried.run_id] if with_run else []
            table.add_row(
                *before,
                str(tried.attempt),
                f"  earlier, at {moment(tried.at)}",
                "",
                "",
                _status(tried.status),
                str(tried.try_number),
                "-",
                "-",
                tried.actor,
                shortened(tried.error or "", full=full),
            )
        table.add_row(*cells)
    return table


_COLOURS = {
    "done": "green",
    "approved": "green",
    "rejected": "red",
    "expired": "yellow",
    "waiting": "cyan",
    "pending": "cyan",
    "ok": "green",
    "live": "green",
    "failed": "red",
    "dead": "red",
    "uncertain": "magenta",
    "cancelled": "yellow",
}


def _status(status: str) -> "Text":
    colour = _COLOURS.get(status)
    return styled(status, colour)


def main() -> None:
    """The `remit` command."""
    try:
        click_command()()
    except SystemExit as done:
        if done.code in (0, None) and NOT_WOKEN:
            _fail(NOT_WOKEN[-1])
        raise
    except Exception as error:
        message = _refusal(error)
        if message is None:
            raise
        _fail(message)


def _fail(message: str) -> NoReturn:
    # One line, however long: a script greps it, a terminal wraps it.
    err.print(f"[red]error:[/] {escape(printable(message))}", soft_wrap=True)
    sys.exit(1)


def _refusal(error: Exception) -> str | None:
    """What to tell a user whose command was refused: a `RemitError`'s message, or what the
    database refused to store (a value it has no type for). None for anything else, a
    defect, which is raised with its traceback."""
    # Imported only when something went wrong: `remit --help` does without them.
    from remit.core.errors import RemitError

    if isinstance(error, RemitError):
        return str(error)
    refused = [
        getattr(sys.modules.get(name), "DataError", None) for name in ("sqlalchemy.exc", "psycopg")
    ]
    if any(isinstance(error, kind) for kind in refused if isinstance(kind, type)):
        cause = getattr(error, "orig", None) or error
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return (
            f"the database refused a value it cannot store ({near(first)}): change that "
            "value and try again"
        )
    return None

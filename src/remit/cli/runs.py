"""`remit start`, `run`, `runs`, `show`, `cancel` and `ledger`: the commands of `client.runs`, and
a run's ledger as `show` prints it (`remit send` and `state` are in `cli/messages.py`)."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.text import Text

from remit.cli import tasks as task_commands
from remit.cli.base import (
    SHOWN,
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    err,
    here_only,
    ids_or_rows,
    json_input,
    load,
    moment,
    out,
    print_json,
    run_id_of,
    shortened,
    status_text,
    styled,
    whole_ids,
)
from remit.cli.base import exit_now as _exit_now
from remit.cli.messages import Around
from remit.cli.serving import serve_run
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.ops.runs import Step
    from remit.serve.worker import Worker


@cli.command()
def start(
    name: Annotated[str, typer.Argument(help="The workflow's name.")],
    input: Annotated[
        str, typer.Option("--input", help="The run's input as JSON (@FILE reads a file, - stdin).")
    ] = "{}",
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            help="Makes it idempotent: the same start again under the key prints the first "
            "one's run and starts nothing.",
        ),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Start a run and print its id. No worker needs to run in this process."""
    payload = json_input(input, "--input", app_dir, cap="input_bytes")
    with client_of(app_dir) as remit:
        run = remit.runs.start_row(name, payload, by=as_, key=key)
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
        remit = running.remit
        steps, rows = remit.runs.steps(run.run_id), remit.calls.ledger(run.run_id)
        _show(run, steps, rows, around=Around(remit, run.run_id))

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
def runs(
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    record: Annotated[
        str | None,
        typer.Option(
            "--record", help="Only runs about this record, as TYPE:ID (invoice:inv_1003)."
        ),
    ] = None,
    started_by: Annotated[
        str | None,
        typer.Option("--started-by", help="Only runs this principal started (user:ann)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only runs started then or later: an ISO date or time (UTC unless it names a "
            "zone), or how long ago (30m, 2h, 3d, 1w).",
        ),
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option("--parent", help="Only the runs this run started as its children."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 50,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only their ids (nothing when none).")
    ] = False,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List runs, newest first."""
    from remit.core.errors import RemitError
    from remit.core.filters import record_filter, since_filter
    from remit.core.runs import STATUSES

    ids_or_rows(quiet, as_json)
    if status is not None and status not in STATUSES:
        raise RemitError(
            f"--status {status!r} is not a run status: use one of {', '.join(STATUSES)}"
        )
    about = None if record is None else record_filter(record)
    after = None if since is None else since_filter(since, now=datetime.now(UTC))
    with client_of(app_dir) as remit:
        if parent is not None:
            parent = run_id_of(remit, parent)
            remit.runs.get(parent)  # an unknown run is an error, not an empty list
        found = remit.runs.list(
            status=status,
            workflow=workflow,
            record=about,
            started_by=started_by,
            since=after,
            parent=parent,
            limit=limit,
        )
    if as_json:
        from remit.serve.models import RunView

        print_json([RunView.of(each) for each in found])
        return
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
            status_text(each.status),
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
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print it as one JSON object: the run's fields (with its `parent` and what it "
            "is `waiting` for), its `steps`, `ledger`, published `state`, `messages` and "
            "`children`, as the HTTP API gives them.",
        ),
    ] = False,
    app_dir: AppDir = None,
) -> None:
    """Show a run: status, attempts, each step with its timing and output, and its ledger; the
    run that started it, what it waits for and published, its messages and its children."""
    with client_of(app_dir) as remit:
        run_id = run_id_of(remit, run_id)
        run, steps, rows = (
            remit.runs.get(run_id),
            remit.runs.steps(run_id),
            remit.calls.ledger(run_id),
        )
        around = Around(remit, run_id)
        if as_json:
            from remit.serve.message_routes import RunDetail
            from remit.serve.models import LedgerEntry, StepView

            detail = RunDetail.of_run(run, parent=around.parent, waiting=around.waiting)
            print_json(
                {
                    **detail.model_dump(mode="json"),
                    "steps": [StepView.of(step) for step in steps],
                    "ledger": [LedgerEntry.of(row) for row in rows],
                    **around.as_json(),
                }
            )
            return
        _show(run, steps, rows, full=full, around=around)
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
        before = remit.runs.get(run_id)
        after = remit.runs.cancel(run_id, by=as_)
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
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List op calls from the ledger."""
    with client_of(app_dir) as remit:
        if run is not None:
            run = run_id_of(remit, run)
            remit.runs.get(run)  # an unknown run is an error, not an empty ledger
        rows = remit.calls.ledger(run, limit=limit)
    if as_json:
        from remit.serve.models import LedgerEntry

        print_json([LedgerEntry.of(row) for row in rows])
        return
    out.print(_ledger_table(rows, with_run=run is None) if rows else "no calls")


def _show(
    run: "Run",
    checkpointed: list["Step"],
    rows: list["LedgerRow"],
    *,
    full: bool = False,
    around: Around | None = None,
) -> None:
    """A run, each attempt's steps as DBOS checkpointed them, and its ledger rows: each long
    value cut short unless `full`; with `around`, its parent, waits, published state, messages
    and children too."""
    out.print(
        Text.assemble(
            (run.run_id, "bold"), f"  {printable(run.workflow)}  ", status_text(run.status)
        )
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
    if around is not None:
        around.head(full=full)
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
    if around is not None:
        around.tables(full=full)


def _in_flight(rows: list["LedgerRow"]) -> list[str]:
    """A line for each call that has started and not answered: which op, and for how long."""

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
        # On a narrow terminal a cell wraps onto more lines, never cut short with `…`.
        table.add_column(column, overflow="fold")
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
            status_text(row.status),
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
                status_text(tried.status),
                str(tried.try_number),
                "-",
                "-",
                tried.actor,
                shortened(tried.error or "", full=full),
            )
        table.add_row(*cells)
    # The run and the key whole, however narrow the terminal: a key is read to find its call.
    whole_ids(table, *((0, 4) if with_run else (3,)))
    return table

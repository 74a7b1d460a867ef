"""`remit reconcile`, `pause`, `resume`, `deadlines` and `workers`: the commands of `client.ops`."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    err,
    moment,
    out,
    print_json,
    status_text,
)
from remit.cli.base import exit_now as _exit_now

if TYPE_CHECKING:
    pass


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
        report = remit.ops.reconcile(dry_run=dry_run, by=as_)
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
                status_text(action.status),
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
        count = len(remit.ops.pause(by=as_))
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
        _, resumed = remit.ops.resume(by=as_)
    count = len(resumed)
    out.print(f"resumed: {count} parked {'run carries' if count == 1 else 'runs carry'} on")
    for run_id in resumed:
        out.print(f"  {run_id}")


@cli.command()
def deadlines(
    limit: Annotated[int, typer.Option(min=1, help="How many, earliest first.")] = 20,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List what is due without anyone asking: sleeping runs' wake-ups, approvals' expiries,
    the timeouts of waits for messages, schedules' next instants."""
    with client_of(app_dir) as remit:
        found = remit.ops.deadlines(limit=limit)
    if as_json:
        from remit.serve.models import DeadlineView

        print_json([DeadlineView.model_validate(each, from_attributes=True) for each in found])
        return
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
def workers(as_json: AsJson = False, app_dir: AppDir = None) -> None:
    """List the app's workers: live, dead, stopped, or taken over by another."""
    from remit.ops.registry import state

    with client_of(app_dir) as remit:
        settings = remit.settings
        rows = remit.ops.workers()
    now = datetime.now(UTC)
    dead_after = timedelta(seconds=settings.dead_after)
    if as_json:
        from remit.serve.models import WorkerView

        print_json([WorkerView.of(row, now=now, dead_after=dead_after) for row in rows])
        return
    if not rows:
        out.print("no workers")
        return
    table = PlainTable(
        "worker", "state", "host", "pid", "version", "started", "heartbeat", box=None
    )
    for row in rows:
        shown = state(row, now=now, dead_after=dead_after)
        label = f"taken over by {row.taken_over_by}" if shown == "taken over" else shown
        age = int((now - row.heartbeat_at).total_seconds())
        table.add_row(
            row.executor_id,
            status_text(label),
            row.host,
            str(row.pid),
            row.version,
            moment(row.started_at),
            f"{age}s ago",
        )
    out.print(table)

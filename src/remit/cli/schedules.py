"""`remit schedules`: the app's scheduled workflows, and pausing and resuming one (the commands
of `client.schedules`).

A paused schedule fires nothing until it is resumed; the instants it missed meanwhile are then
fired or skipped as its `backfill` says, as after downtime (see `remit/ops/schedules.py`).
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import TYPE_CHECKING, Annotated

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
    whole_ids,
)

if TYPE_CHECKING:
    from remit.ops.schedules import ScheduleState
    from remit.surface import Surface

schedules_cli = command_group(
    "The app's schedules: list them, pause one, resume one.", invoke_without_command=True
)
cli.add_typer(schedules_cli, name="schedules")

Name = Annotated[str, typer.Argument(help="The scheduled workflow's name.")]


@schedules_cli.callback()
def show(ctx: typer.Context, as_json: AsJson = False, app_dir: AppDir = None) -> None:
    """List the scheduled workflows: each one's cron and time zone, its next instant, the
    latest instant that has a run, and whether it is paused."""
    if ctx.invoked_subcommand is not None:
        return
    with client_of(app_dir) as remit:
        app_name = remit.app_name
        found = remit.schedules.list()
    if as_json:
        from remit.serve.schedule_routes import ScheduleView

        print_json([ScheduleView.of(each) for each in found])
        return
    if not found:
        out.print(f"app {app_name} schedules no workflow: give one trigger=schedule(...)")
        return
    table = PlainTable(
        "workflow", "cron", "tz", "backfill", "next", "last fired", "paused", box=None
    )
    for each in found:
        table.add_row(
            each.workflow,
            each.cron,
            each.tz,
            each.backfill,
            "-" if each.paused else moment(each.next_at),
            moment(each.last_fired_at),
            _paused(each),
        )
    out.print(whole_ids(table, 0))


@schedules_cli.command("pause")
def pause(workflow: Name, as_: ActAs = None, app_dir: AppDir = None) -> None:
    """Pause a schedule: it fires nothing until it is resumed."""
    with client_of(app_dir) as remit:
        before = _before(remit, workflow)
        after = remit.schedules.pause(workflow, by=as_)  # refuses a name that is no schedule
    if before is not None and before.paused:
        out.print(f"schedule {workflow} was already paused ({_paused(before)})")
        return
    out.print(
        f"schedule {workflow} {_paused(after)}: it fires nothing until `remit schedules "
        f"resume {workflow}`"
    )


@schedules_cli.command("resume")
def resume(workflow: Name, as_: ActAs = None, app_dir: AppDir = None) -> None:
    """Resume a paused schedule: the instants it missed are fired or skipped as its backfill
    says, at the next sweep."""
    with client_of(app_dir) as remit:
        before = _before(remit, workflow)
        after = remit.schedules.resume(workflow, by=as_)  # refuses a name that is no schedule
    if before is not None and not before.paused:
        out.print(f"schedule {workflow} was not paused: next instant {moment(after.next_at)}")
        return
    out.print(
        f"schedule {workflow} resumed: the instants it missed are {_MISSED[after.backfill]} "
        f"(backfill={after.backfill}); next instant {moment(after.next_at)}"
    )


# What a resumed schedule does with the instants it missed, by its backfill.
_MISSED = {
    "none": "skipped, but one up to 5 minutes late fires",
    "latest": "skipped but the latest, which fires once",
    "all": "fired, oldest first (at most the 100 latest)",
}


def _before(remit: "Surface", workflow: str) -> "ScheduleState | None":
    """The schedule as it is before it is changed; None when there is none of that name."""
    return next((each for each in remit.schedules.list() if each.workflow == workflow), None)


def _paused(state: "ScheduleState") -> str:
    if not state.paused:
        return "-"
    return f"paused {moment(state.paused_at)} by {state.paused_by}"

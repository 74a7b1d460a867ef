"""`remit wakeup`: the wakeup service that starts a stopped instance again on time, and an
instance's side of it."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import TYPE_CHECKING

from remit.cli.base import AppDir, cli, command_group, local_client, moment, out

if TYPE_CHECKING:
    from remit.client import Client
    from remit.ops.idle import WakeupRow

wakeup_cli = command_group(
    "Scale to zero: run the wakeup service, connect an instance to one, see its state.",
    no_args_is_help=True,
)
cli.add_typer(wakeup_cli, name="wakeup")


@wakeup_cli.command("status")
def status(app_dir: AppDir = None) -> None:
    """This instance's side of its wakeup: whether its worker runs, the deadline it registered,
    its last registration error, why its last idle check found it busy, and what is due next."""
    from remit.ops.deadlines import next_deadline
    from remit.ops.idle import WakeupState
    from remit.ops.reconciler import Timeouts

    with local_client(app_dir, command="wakeup status") as remit:
        settings = remit.settings
        row = WakeupState(remit.db, remit.app.name).get()
        timeouts = Timeouts.of(remit.app, settings.op_timeout).workflows
        due = next_deadline(remit.db, timeouts=timeouts, app=remit.app.name)
        stored = {info.name for info in remit.services.secrets.list()}
        lines = _registering(remit, stored)
        lines.append(("worker", "never stopped when idle" if row is None else _worker(remit, row)))
        if row is not None:
            lines += [
                ("executor", row.executor_id or "-"),
                ("started", moment(row.started_at)),
                ("stopped", moment(row.stopped_at)),
                (
                    "registered",
                    "-"
                    if row.registered_at is None
                    else f"a wake for the deadline at {moment(row.at)}, a little ahead of it "
                    f"(registered {moment(row.registered_at)})",
                ),
                (
                    "last error",
                    "-" if row.last_error is None else f"{row.last_error} ({moment(row.error_at)})",
                ),
                (
                    "last check",
                    f"{moment(row.checked_at)}: "
                    + ("idle" if row.busy is None else f"busy, {row.busy}"),
                ),
            ]
        lines.append(
            ("next deadline", "none" if due is None else f"{moment(due.at)}, {due.describe()}")
        )
        for name, value in lines:
            out.print(f"{name + ':':<16}{value}", markup=False, highlight=False, soft_wrap=True)


def _registering(remit: "Client", stored: set[str]) -> list[tuple[str, str]]:
    """The lines on where the worker registers its wakes: the wakeup the data files declare,
    if any; and remit's wakeup service with the instance's token, unless the declared wakeup is
    a vendor's own clock, which needs neither."""
    from remit.core.wakeup_tokens import INSTANCE_TOKEN_SECRET
    from remit.resources.wakeups import declarations_of, declared_wakeup, needs_wakeup_service

    declarations = declarations_of(remit.app)
    wakeup = declared_wakeup(declarations)
    lines: list[tuple[str, str]] = []
    if wakeup is not None:
        lines.append(
            (
                "wakeup",
                f"`{wakeup.name}` ({wakeup.type.id}), declared in the data files: a worker "
                f"stopping when idle registers its next deadline through {wakeup.register}",
            )
        )
        if not needs_wakeup_service(declarations):
            lines.append(("service", f"none needed: {wakeup.type.id} is its vendor's own clock"))
            return lines
    lines += [
        ("service", remit.settings.wakeup_url or "- (set REMIT_WAKEUP_URL)"),
        (
            "instance token",
            "stored" if INSTANCE_TOKEN_SECRET in stored else "- (run `remit wakeup connect URL`)",
        ),
    ]
    return lines


def _worker(remit: "Client", row: "WakeupRow") -> str:
    """The worker as the wakeup row says it is, checked against its heartbeat: one that says
    it runs but whose heartbeat stopped (it exited, or hangs) is gone."""
    from datetime import UTC, datetime, timedelta

    from remit.core.text import describe_seconds
    from remit.ops.idle import STOPPED
    from remit.ops.registry import state

    if row.state == STOPPED:
        return row.state
    found = [each for each in remit.ops.workers() if each.executor_id == row.executor_id]
    if not found:
        return f"{row.state} (no heartbeat of executor {row.executor_id or '-'} is recorded)"
    worker, now = found[0], datetime.now(UTC)
    dead_after = remit.settings.dead_after
    seen = state(worker, now=now, dead_after=timedelta(seconds=dead_after))
    ago = describe_seconds(max(0, int((now - worker.heartbeat_at).total_seconds())))
    heartbeat = f"last heartbeat {ago} ago, at {moment(worker.heartbeat_at)}"
    if seen == "live":
        return f"{row.state} ({heartbeat})"
    if seen == "stopped":
        return f"gone: it stopped at {moment(worker.stopped_at)} ({heartbeat})"
    if seen == "taken over":
        return f"gone: taken over by {worker.taken_over_by} ({heartbeat})"
    return (
        f"gone: its {heartbeat}, past REMIT_DEAD_AFTER ({dead_after:g}s): it exited or hangs "
        "without saying so"
    )

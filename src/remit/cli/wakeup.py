"""`remit wakeup`: the wakeup service that starts a stopped instance again on time, and an
instance's side of it."""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from remit.cli.base import AppDir, cli, command_group, local_client, moment, out

wakeup_cli = command_group(
    "Scale to zero: run the wakeup service, connect an instance to one, see its state.",
    no_args_is_help=True,
)
cli.add_typer(wakeup_cli, name="wakeup")


@wakeup_cli.command("status")
def status(app_dir: AppDir = None) -> None:
    """This instance's side of its wakeup: whether its worker runs, the deadline it registered,
    its last registration error, why its last idle check found it busy, and what is due next."""
    from remit.core.wakeup_tokens import INSTANCE_TOKEN_SECRET
    from remit.ops.deadlines import next_deadline
    from remit.ops.idle import WakeupState
    from remit.ops.reconciler import Timeouts

    with local_client(app_dir, command="wakeup status") as remit:
        settings = remit.settings
        row = WakeupState(remit.db, remit.app.name).get()
        timeouts = Timeouts.of(remit.app, settings.op_timeout).workflows
        due = next_deadline(remit.db, timeouts=timeouts, app=remit.app.name)
        stored = {info.name for info in remit.services.secrets.list()}
        lines = [
            ("service", settings.wakeup_url or "- (set REMIT_WAKEUP_URL)"),
            (
                "instance token",
                "stored"
                if INSTANCE_TOKEN_SECRET in stored
                else "- (run `remit wakeup connect URL`)",
            ),
            ("worker", "never stopped when idle" if row is None else row.state),
        ]
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

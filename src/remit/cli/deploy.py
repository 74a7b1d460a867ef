"""`remit deploy check` and `remit retry`: shipping new code under runs that are still going.

`remit deploy check`, run with the new code in the app folder, replays every unfinished run
against it (`deploy.py`) and exits 1 if any would fail, so CI can gate a deploy on it.
`remit retry RUN` carries a failed or cancelled run on, on the code workers run now
(`retries.py`).
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

from typing import Annotated

import typer
from rich.markup import escape

from remit.cli.base import ActAs, AppDir, cli, client_of, command_group, err, local_client, out

deploy_cli = command_group(
    "Check new code against the runs still going before shipping it.", no_args_is_help=True
)
cli.add_typer(deploy_cli, name="deploy")


@deploy_cli.command("check")
def check(
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Only this run (repeat for more).")
    ] = None,
    app_dir: AppDir = None,
) -> None:
    """Replay every unfinished run against the code in the app folder, executing nothing.

    Prints each run that would fail when it resumes, with why, and how many would carry on.
    Exits 1 if any would fail.
    """
    with local_client(app_dir, command="deploy check") as remit:
        run = None if run is None else [remit.find_id("run", r) for r in run]
        report = remit.ops.deploy_check(run)
    for failing in report.failing:
        out.print(
            f"[red]would fail[/] {failing.run_id} ({failing.workflow}, {failing.status}, resumes "
            f"at step {failing.resume_at}): {escape(failing.failure or '')}",
            soft_wrap=True,
        )
    total = len(report.checked)
    out.print(
        f"version {report.version}: {report.carrying_on} of {total} unfinished "
        f"run{'s' if total != 1 else ''} would carry on, {len(report.failing)} would fail"
    )
    if not report.ok:
        raise typer.Exit(1)


@cli.command()
def retry(
    run_id: Annotated[str, typer.Argument(help="The failed or cancelled run.")],
    from_step: Annotated[
        int | None,
        typer.Option(
            "--from-step",
            help="Carry on from this step (default: after the last finished one); the steps "
            "before it are copied.",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Makes it idempotent: the same key again replays the first."),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Retry a failed or cancelled run: its next attempt, on the code workers run now."""
    with client_of(app_dir) as remit:
        run_id = remit.find_id("run", run_id)
        done = remit.runs.retry(run_id, from_step=from_step, key=key, by=as_)
    if done.replayed:
        err.print(f"key {key!r} was used before: this is that retry's result")
    out.print(
        f"{run_id} retried: attempt {done.attempt} ({done.workflow_id}) carries on from step "
        f"{done.from_step}, queued"
    )

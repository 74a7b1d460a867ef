"""Serving one run in the command's own process until it ends (`remit run`, `remit apply`,
`remit drift`): the process is a worker while it waits, and says how to decide each gate or
answer each task the run waits at."""

# No `from __future__ import annotations`: Typer reads annotations in this package.

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from remit.cli import tasks as task_commands
from remit.cli.base import err
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.app import App
    from remit.core.runs import Run
    from remit.core.settings import Settings
    from remit.people.approvals import Approval
    from remit.serve.worker import Worker


def tell_waiting(pending: list["Approval"], told: set[str]) -> None:
    """Say once, on stderr, how to decide each approval a run waits at."""
    for approval in pending:
        if approval.id in told:
            continue
        told.add(approval.id)
        err.print(
            f"{approval.run_id} waits at approval [bold]{approval.id}[/] "
            f"({escape(printable(approval.title))}): "
            f"decide it with `remit approve {approval.id}` or `remit reject {approval.id}`"
        )


def serve_run(
    app: "App",
    settings: "Settings",
    name: str,
    payload: Any,
    *,
    by: str,
    timeout: float,
    started: Callable[["Run"], None] = lambda run: None,
    progress: Callable[["Worker", "Run"], None] = lambda worker, run: None,
    done: Callable[["Worker", "Run"], None] = lambda worker, run: None,
    carry_on: str | None = None,
) -> "Run":
    """Start a run of workflow `name` and serve it here until it ends or `timeout` seconds
    pass; `progress` is called as it goes, `done` once it has ended (before the worker
    stops). With `carry_on`, start nothing: serve that run, already started, instead (the
    worker here takes it over if its own worker is gone). Returns the run as last read."""
    from remit.core.principals import check_actor
    from remit.policy.guard import Guard
    from remit.serve.worker import Worker

    wf = app.workflow(name)
    running = Worker(app, settings)
    running.start()
    try:
        runs = running.runtime.runs
        if carry_on is None:
            carry_on = (
                Guard.of(app, running.db)
                .start(runs, running.client, wf, payload, by=check_actor(by))
                .run_id
            )
        current = runs.get(carry_on)
        started(current)
        deadline = time.monotonic() + timeout
        told: set[str] = set()
        while not current.finished and time.monotonic() < deadline:
            time.sleep(0.05)
            current = runs.get(carry_on)
            progress(running, current)
            if current.status == "waiting":
                tell_waiting(running.approvals.list(run_id=current.run_id, status="pending"), told)
                task_commands.tell_waiting(
                    running.tasks.list(run_id=current.run_id, status="open"), told
                )
        progress(running, current)
        done(running, current)
    finally:
        running.stop(keep_slot=True)
    return current

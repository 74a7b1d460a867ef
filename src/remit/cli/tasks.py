"""`remit tasks` and `remit task resolve`: writes whose outcome a person confirms.

A write whose outcome is unknown (the process making it died mid-call, or the vendor's answer
was lost) opens a task, and its run waits. `remit task resolve ID --done [--output JSON]` says
it happened, with what it returned: the run carries on with that output. `--not-done` says it
did not: the op is called again with the same key, or the run fails, as the op declares.
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from remit.cli.base import (
    ActAs,
    AppDir,
    AsJson,
    PlainTable,
    cli,
    client_of,
    command_group,
    err,
    json_input,
    moment,
    near,
    out,
    print_json,
    run_id_of,
    status_text,
    whole_ids,
)
from remit.core.text import printable

if TYPE_CHECKING:
    from remit.people.tasks import Resolved, Task
    from remit.surface import Surface

task_cli = command_group(
    "Answer a task: say whether a write whose outcome is unknown happened.", no_args_is_help=True
)
cli.add_typer(task_cli, name="task")


@cli.command("tasks")
def list_tasks(
    open_only: Annotated[bool, typer.Option("--open", help="Only tasks still open.")] = False,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's tasks.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 100,
    as_json: AsJson = False,
    app_dir: AppDir = None,
) -> None:
    """List tasks, newest first: writes whose outcome a person must confirm."""
    with client_of(app_dir) as remit:
        if run is not None:
            run = run_id_of(remit, run)
            remit.runs.get(run)  # an unknown run is an error, not an empty list
        found = remit.tasks.list(status="open" if open_only else None, run_id=run, limit=limit)
    if as_json:
        from remit.serve.models import TaskView

        print_json([TaskView.of(each) for each in found])
        return
    if not found:
        out.print("no open tasks" if open_only else "no tasks")
        return
    table = PlainTable("task", "run", "op", "key", "status", "title", "created", box=None)
    for each in found:
        table.add_row(
            each.id,
            each.run_id,
            each.op_id,
            each.idempotency_key,
            status_text(each.status),
            each.title,
            moment(each.created_at),
        )
    out.print(whole_ids(table, 0, 1, 3))


@task_cli.command("show")
def show(
    task_id: Annotated[str, typer.Argument(help="The task's id (or an unambiguous prefix).")],
    app_dir: AppDir = None,
) -> None:
    """Show a task: the call it asks about, what that call was sent, and how it was answered."""
    with client_of(app_dir) as remit:
        task = remit.tasks.get(remit.find_id("task", task_id))
    out.print(Text(f"{task.id}  {task.title}"))
    lines = [
        ("status", status_text(task.status)),
        ("op", Text(task.op_id)),
        ("key", Text(task.idempotency_key)),
        ("run", Text(f"{task.run_id}, step {task.step_id} (attempt {task.workflow_id})")),
        (
            "sent",
            Text(
                json.dumps(task.input)
                if task.input is not None
                else "not kept (a call made before remit kept it)"
            ),
        ),
        ("opened", Text(moment(task.created_at))),
    ]
    if task.resolved_at is not None:
        lines.append(("answered", Text(f"{moment(task.resolved_at)} by {task.resolved_by}")))
    if task.output is not None:
        lines.append(("output", Text(json.dumps(task.output))))
    for label, value in lines:
        out.print(Text(f"  {label + ':':<10}") + value)
    if task.status == "open":
        out.print(
            f"  answer it with `remit task resolve {task.id} --done --output JSON` or `--not-done`"
        )


@task_cli.command("resolve")
def resolve(
    task_id: Annotated[str, typer.Argument(help="The task's id.")],
    done: Annotated[
        bool, typer.Option("--done", help="The call happened: the run carries on.")
    ] = False,
    not_done: Annotated[
        bool,
        typer.Option(
            "--not-done", help="The call did not happen: it is called again, or the run fails."
        ),
    ] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help='With --done: what the call returned, as JSON, e.g. \'{"message_id": "m1"}\' '
            "(@FILE reads a file, - stdin).",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="The same key again replays the first answer."),
    ] = None,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Say whether a task's call happened, and carry its run on."""
    from remit.core.errors import RemitError

    if done == not_done:
        raise RemitError(
            f"task {task_id}: say what happened with --done (it happened; give what it returned "
            "with --output JSON) or --not-done (it did not), one of the two"
        )
    payload: dict[str, Any] | None = None
    if output is not None:
        parsed = json_input(output, "--output", app_dir, cap="op_bytes")
        if not isinstance(parsed, dict):
            raise RemitError(
                f"--output must be a JSON object of the op's output fields, e.g. "
                f'\'{{"message_id": "m1"}}\', not {near(json.dumps(parsed))}'
            )
        payload = parsed
    with client_of(app_dir) as remit:
        task_id = remit.find_id("task", task_id)
        result = remit.tasks.resolve(task_id, done=done, output=payload, key=key, by=as_)
        task = remit.tasks.get(task_id)
        run_status = _status_of(remit, result.run_id)
    _print_resolved(result, task, run_status)


def _print_resolved(result: "Resolved", task: "Task", run_status: str | None) -> None:
    again = " (replayed: this key had already resolved it)" if result.replayed else ""
    out.print(f"{task.id} {status_text(result.status).markup} by {task.resolved_by}{again}")
    then = {
        "continue": "the run carries on as if the call had returned this output",
        "retry": f"`{task.op_id}` is called again with the same key ({task.idempotency_key})",
        "fail": f'the run fails: `{task.op_id}` declares on_not_done="fail"',
    }[result.then]
    if result.then == "continue" and task.output is not None:
        out.print(f"  output {json.dumps(task.output)}")
    if result.resumed_workflow_id:
        out.print(f"  run {result.run_id} resumes on attempt {result.resumed_workflow_id}: {then}")
    elif run_status is None:
        out.print("  a direct call, not a run: the answer is recorded in the ledger")
    else:
        out.print(
            f"  run {result.run_id} is {run_status} and waits on no attempt at this call: "
            "the answer is recorded in the ledger only"
        )


def tell_waiting(waiting: list["Task"], told: set[str]) -> None:
    """Say once, on stderr, how to answer each task a run waits at (`remit run`)."""
    for task in waiting:
        if task.id not in told:
            told.add(task.id)
            err.print(_waits_at(task))


def _status_of(remit: "Surface", run_id: str) -> str | None:
    """The run's status; None when there is no such run (a direct call's task)."""
    from remit.core.errors import RunNotFound

    try:
        status: str = remit.runs.get(run_id).status
    except RunNotFound:
        return None
    return status


def show_open(remit: "Surface", run_id: str) -> None:
    """Under `remit show`: the run's open tasks and how to answer each."""
    for task in remit.tasks.list(run_id=run_id, status="open"):
        out.print(_waits_at(task))


def _waits_at(task: "Task") -> str:
    # The title and the key come from what was sent: shown as typed, never read as markup.
    return (
        f"{task.run_id} waits at task [bold]{task.id}[/]: {escape(printable(task.title))} "
        f"(`{task.op_id}`, key {escape(printable(task.idempotency_key))}). Answer it with "
        f"`remit task resolve {task.id} --done --output JSON` or `--not-done`"
    )

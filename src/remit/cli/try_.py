"""`remit try`: run a workflow once in a sandbox, and show what it did.

The sandbox is the app on fresh fakes (every connector on its fake, their folder a temporary
one of its own, `REMIT_FAKES_DIR`) in a throwaway SQLite database, whatever
`REMIT_DATABASE_URL`, `REMIT_FAKES_DIR` and the wakeup service's settings say: the live
ledger, budgets, collections and fakes never see the run, and no vendor is called. The run
goes until it rests: done, failed or cancelled, or waiting (at an approval, a task, a message
or its children) or sleeping, since the sandbox decides nothing. What it prints is its steps
and every op call it made, with what each was sent (`--json`: a `SandboxResult`, which
`remit.agent.sandbox.try_workflow` reads).
"""

# No `from __future__ import annotations`: Typer reads these annotations (see cli/base.py).

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from remit.cli.base import (
    SHOWN,
    ActAs,
    AppDir,
    PlainTable,
    cli,
    exit_now,
    json_input,
    load,
    moment,
    out,
    print_json,
    shortened,
    status_text,
    styled,
)
from remit.core.text import printable

if TYPE_CHECKING:
    from pydantic import BaseModel

    from remit.agent.sandbox import SandboxResult, SandboxStep
    from remit.app import App
    from remit.connectors.base import Implementation
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run
    from remit.testing import Harness

# Statuses a run rests in until someone (or the clock) moves it.
RESTING = ("waiting", "sleeping", "paused")
# DBOS's statuses of an attempt still going.
GOING = (None, "PENDING", "ENQUEUED")
# How often the sandbox looks at its runs while they go, in seconds.
POLL = 0.05
# The most calls read of each run's ledger.
MOST_CALLS = 1000


@cli.command("try")
def try_(
    workflow: Annotated[str, typer.Argument(help="The workflow's name.")],
    input: Annotated[
        str, typer.Option("--input", help="The run's input as JSON (@FILE reads a file, - stdin).")
    ] = "{}",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print it as one JSON object: the run's status, output and error, its steps, "
            "its calls and what it waits for.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds to wait for the run to rest.")
    ] = 120.0,
    full: Annotated[
        bool,
        typer.Option("--full", help=f"Show long values whole (else cut at {SHOWN} characters)."),
    ] = False,
    as_: ActAs = None,
    app_dir: AppDir = None,
) -> None:
    """Run a workflow once on fresh fakes in a throwaway database, and print its steps and the
    calls it made.

    Nothing reaches the live instance: not its database, budgets or collections, not its fakes,
    not a vendor. The run goes until it is done, failed or cancelled, or waits (at an approval,
    a task, a message) or sleeps: the sandbox decides nothing. Exits 0 whenever the sandbox
    ran, however the run ended. remit's `apply` and `change`, which write the app's folder,
    are refused.
    """
    payload = json_input(input, "--input", app_dir, cap="input_bytes")
    app, settings = load(app_dir)
    result = sandbox(app, workflow, payload, by=as_ or settings.actor, timeout=timeout)
    if as_json:
        print_json(result)
    else:
        _print(result, full=full)
    # A run that had not rested may still be in a step, on a thread that outlives the sandbox.
    exit_now(0)


def sandbox(app: "App", workflow: str, input: Any, *, by: str, timeout: float) -> "SandboxResult":
    """Run `workflow` of `app` once with `input`, started as `by` under the app's policies, on
    fresh fakes in a throwaway database, until it rests or `timeout` seconds pass, and say what
    it did. An unknown workflow, an input its model refuses and a start the policies refuse
    raise before anything runs."""
    import tempfile

    from remit.core.runs import parse_input
    from remit.testing import Harness

    wf = app.workflow(workflow)
    _no_repo_workflow(wf.name)
    parse_input(wf, input)  # refused naming the field, before a database is made
    with (
        tempfile.TemporaryDirectory(prefix="remit-try-") as folder,
        _own_fakes(Path(folder)),
        Harness(
            app,
            database_url=f"sqlite:///{Path(folder) / 'remit.sqlite'}",
            actor=by,
            environ={},
        ) as harness,
    ):
        sent = _record_calls(harness.worker.implementations)
        run = harness.start(wf.name, input)
        rested = _rest(harness, run.run_id, time.monotonic() + timeout)
        return _result(harness, harness.runs.get(run.run_id), sent, rested=rested, timeout=timeout)


def _no_repo_workflow(name: str) -> None:
    """Refuse remit's built-in workflows that act on the app's folder and its repo: `apply`
    writes the folder's `remit.lock` as it binds each resource, and `change` merges and deploys
    through it. What they would change is what `remit plan` shows."""
    from remit.changes.workflow import CHANGE
    from remit.core.errors import RemitError
    from remit.resources.workflows import APPLY

    does = {
        APPLY: "binds the declared resources in the app folder's remit.lock (`remit plan` "
        "shows what it would change)",
        CHANGE: "merges a branch of the app's repo and deploys it through `apply`",
    }
    if name in does:
        raise RemitError(
            f"`{name}` is remit's own workflow, which {does[name]}: the sandbox tries the "
            "app's own workflows"
        )


@contextlib.contextmanager
def _own_fakes(folder: Path) -> Iterator[None]:
    """While the sandbox runs, its fakes keep what they hold (the resource fakes' journals, the
    fake forge's repos) in `folder`, and the mirrors of a forge's repos are made there too,
    never in the live instance's folders."""
    from remit.changes.checks import CHANGES_DIR
    from remit.connectors.resources import FAKES_DIR
    from remit.core.settings import environment_set

    values = {FAKES_DIR: str(folder / "fakes"), CHANGES_DIR: str(folder / "changes")}
    with environment_set(values):
        yield


def _record_calls(implementations: Mapping[str, "Implementation"]) -> dict[str, dict[str, Any]]:
    """What each call the sandbox's fakes are sent was sent, by its idempotency key, kept as
    the calls are made. The ledger keeps only a hash of a call's input; the sandbox's fakes are
    its own, made for this run, so each is told to note its input as it answers."""
    sent: dict[str, dict[str, Any]] = {}
    for implementation in implementations.values():
        invoke = implementation.invoke

        def noting(op: Any, input: "BaseModel", call: Any, invoke: Any = invoke) -> "BaseModel":
            sent[call.idempotency_key] = input.model_dump(mode="json")
            answer: BaseModel = invoke(op, input, call)
            return answer

        implementation.invoke = noting  # type: ignore[method-assign]
    return sent


def _rest(harness: "Harness", run_id: str, deadline: float) -> bool:
    """Wait until the run and every run it started have rested, and nothing moves any more;
    False when `deadline` (a `time.monotonic()`) comes first."""
    seen: dict[str, tuple[str, int]] | None = None
    while True:
        family = _family(harness, run_id)
        now = {each: (run.status, run.attempt) for each, run in family.items()}
        if all(_resting(harness, run) for run in family.values()) and now == seen:
            return True
        seen = now
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)


def _family(harness: "Harness", run_id: str) -> dict[str, "Run"]:
    """The run, then the runs it started as its children, and theirs, oldest first."""
    found = {run_id: harness.runs.get(run_id)}
    queue = [run_id]
    while queue:
        for child in harness.children(queue.pop(0)):
            if child.run_id not in found:
                found[child.run_id] = harness.runs.get(child.run_id)
                queue.append(child.run_id)
    return found


def _resting(harness: "Harness", run: "Run") -> bool:
    """Whether the run has finished, or waits or sleeps with its attempt over and nothing
    about to move it on (a wait for children that have all ended is about to)."""
    if run.finished:
        return True
    if run.status not in RESTING or harness.attempt_status(run.run_id, run.attempt) in GOING:
        return False
    return not any(
        wait.kind == "children" and all(harness.runs.get(c).finished for c in wait.children)
        for wait in harness.runs.waiting(run.run_id)
    )


def _result(
    harness: "Harness",
    run: "Run",
    sent: Mapping[str, dict[str, Any]],
    *,
    rested: bool,
    timeout: float,
) -> "SandboxResult":
    from remit.agent.sandbox import SandboxCall, SandboxResult

    family = _family(harness, run.run_id)
    rows = {each: harness.client.calls.ledger(each, limit=MOST_CALLS) for each in family}
    every = sorted((row for found in rows.values() for row in found), key=lambda row: row.id)
    calls = [
        SandboxCall(
            op=row.op_id,
            effect=row.effect,
            input=sent.get(row.idempotency_key, {}),
            output=row.output if row.status == "ok" else None,
        )
        for row in every
    ]
    waiting = _waiting(harness, run)
    if not rested:
        waiting.append(
            f"its {run.status} attempt: the sandbox stopped waiting after {timeout:g} s, "
            "before the run rested (--timeout waits longer)"
        )
    return SandboxResult(
        workflow=run.workflow,
        input=run.input,
        status=run.status,
        output=run.output,
        error=run.error,
        steps=_steps(harness, run, rows[run.run_id]),
        calls=calls,
        waiting=waiting,
    )


def _steps(harness: "Harness", run: "Run", rows: list["LedgerRow"]) -> list["SandboxStep"]:
    """The steps of the run's latest attempt (which holds the earlier ones' it carried on
    from), each with the call it made and how that call ended."""
    from remit.agent.sandbox import SandboxStep

    by_step = {row.step_id: row for row in rows}
    found: list[SandboxStep] = []
    for step in harness.runs.steps(run.run_id):
        if step.attempt != run.attempt:
            continue
        row = by_step.get(step.function_id)
        if row is not None and row.op_id == step.name:
            status = row.status
        else:
            row, status = None, "failed" if step.error is not None else "ok"
        found.append(
            SandboxStep(
                position=step.function_id,
                name=step.name,
                status=status,
                op=None if row is None else row.op_id,
            )
        )
    return found


def _waiting(harness: "Harness", run: "Run") -> list[str]:
    """What the run waits for, a line each: its pending approvals, its open tasks, a message,
    its children, the end of a sleep."""
    if run.finished:
        return []
    lines: list[str] = []
    for gate in harness.approvals.list(run_id=run.run_id, status="pending"):
        assignee = f", for {gate.assignee}" if gate.assignee else ""
        until = f", until {moment(gate.expires_at)}" if gate.expires_at else ""
        lines.append(f"approval {gate.key}: {gate.title}{assignee}{until}")
    for task in harness.tasks.list(run_id=run.run_id, status="open"):
        lines.append(f"task {task.op_id}: {task.title} (a person says whether it happened)")
    for wait in harness.runs.waiting(run.run_id):
        if wait.kind == "message":
            until = "" if wait.deadline is None else f", until {moment(wait.deadline)}"
            lines.append(f"message on {wait.topic} (step {wait.step_id}){until}")
        else:
            lines.append(f"its child runs {', '.join(wait.children)} (step {wait.step_id})")
    for due in harness.deadlines(limit=1000):
        if due.run_id == run.run_id and due.kind == "wake":
            lines.append(f"sleep until {moment(due.at)}")
    return lines


def _print(result: "SandboxResult", *, full: bool) -> None:
    """The result as a person reads it: the run's outcome, what it waits for, its steps and
    its calls, each long value cut short unless `full`."""
    out.print(
        Text.assemble(
            (printable(result.workflow), "bold"),
            " on fresh fakes, in a throwaway database: ",
            status_text(result.status),
        )
    )
    out.print(Text(f"  input  {shortened(json.dumps(result.input), full=full)}"), soft_wrap=True)
    if result.output is not None:
        out.print(
            Text(f"  output {shortened(json.dumps(result.output), full=full)}"), soft_wrap=True
        )
    if result.error:
        out.print(styled(f"  error  {shortened(result.error, full=full)}", "red"), soft_wrap=True)
    for line in result.waiting:
        out.print(Text.assemble("  ", ("waits for", "cyan"), f" {printable(line)}"), soft_wrap=True)
    steps = PlainTable(box=None, title="steps", title_justify="left")
    for column in ("#", "step", "status", "op"):
        steps.add_column(column, overflow="fold")
    for step in result.steps:
        steps.add_row(str(step.position), step.name, status_text(step.status), step.op or "-")
    out.print(steps if result.steps else "  no steps")
    calls = PlainTable(box=None, title="calls", title_justify="left")
    for column in ("op", "effect", "input"):
        calls.add_column(column, overflow="fold")
    for call in result.calls:
        calls.add_row(call.op, call.effect, shortened(json.dumps(call.input), full=full))
    out.print(calls if result.calls else "  no op calls")
    out.print(
        Text(
            "  nothing of it reached the live instance: its database and fakes are thrown away",
            style="dim",
        )
    )

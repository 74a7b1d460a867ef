"""The page of one run: its status, input and output, each attempt with the version that ran it,
the timeline of its steps and of what it waited for (`console/timeline.py`), each op call with
its ledger row, its approvals (with a Withdraw button by each pending one the viewer may
withdraw: the policies' `withdraw`, which the example gives whoever started the run), tasks,
activity and audit rows, the failures remit keeps of it and
where its log lines are, and the buttons that cancel or retry it where that can be done; the run
that started it, what it waits for (a message, its child runs), what it published, the messages
sent to it and the runs it started.

While the run has not finished, the part that moves (status, waits, published state, timeline,
ledger, messages, children, buttons) asks for itself again every three seconds (`GET
/console/runs/{id}/live`, swapped in by htmx); a browser without scripts reloads the page."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from remit.client import Client
from remit.console.pages.inbox import posted
from remit.console.render import Page
from remit.console.session import Viewer
from remit.console.svg import timeline
from remit.console.timeline import Row, rows
from remit.core.ledger import LedgerRow
from remit.core.runs import Run
from remit.ops.retries import RETRYABLE
from remit.reads import Reader

# How much of a failed step's message the page keeps: all of it, in practice.
_WHOLE = 10_000
# The most messages and children the page lists, the latest.
_LISTED = 100


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/runs/{run_id}")
    def run_page(
        request: Request, run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        reader = Reader(client, viewer.principal)
        run = reader.run(run_id)
        record = client.runs.record(run_id)
        live = _live(client, reader, run)
        return page.render(
            request,
            "run.html",
            viewer,
            attempts=client.runs.attempts(run_id),
            parent=client.runs.parent(run_id),
            record=record,
            activity=[] if record is None else reader.activity(*record),
            audit=client.ops.audit(run_id),
            kept=_failures(live["steps"], live["ledger"]),
            withdrawable={
                a.id
                for a in live["approvals"]
                if a.status == "pending"
                and client.approvals.may_withdraw(a.id, by=viewer.principal)
            },
            # The withdraw forms' key: the same form sent twice withdraws once.
            withdraw_key=f"console:{uuid.uuid4().hex}",
            **live,
        )

    @router.get("/console/runs/{run_id}/live")
    def run_live(run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]) -> Response:
        reader = Reader(client, viewer.principal)
        run = reader.run(run_id)
        return page.fragment("parts/run_live.html", viewer=viewer, **_live(client, reader, run))

    @router.post("/console/runs/{run_id}/cancel")
    def cancel(run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.acting)]) -> Response:
        run = client.runs.cancel(run_id, by=viewer.principal)
        return page.redirect(f"/console/runs/{run_id}", flash=f"Run {run_id} is {run.status}.")

    @router.post("/console/approvals/{approval_id}/withdraw")
    def withdraw(
        approval_id: str,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form: Annotated[FormData, Depends(posted)],
    ) -> Response:
        # Only a gate the viewer may read: another is not found, as on every page.
        approval = Reader(client, viewer.principal).approval(approval_id)
        key, reason = form.get("key"), form.get("reason")
        result = client.approvals.withdraw(
            approval.id,
            key=key if isinstance(key, str) and key else None,
            reason=reason.strip() or None if isinstance(reason, str) else None,
            by=viewer.principal,
            via="console",
        )
        again = " (already withdrawn by this form)" if result.replayed else ""
        return page.redirect(
            f"/console/runs/{approval.run_id}",
            flash=f"Withdrew {approval.title} ({approval.id}){again}: the run carries on, "
            "reading it as withdrawn.",
        )

    @router.post("/console/runs/{run_id}/retry")
    def retry(
        run_id: str,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form: Annotated[FormData, Depends(posted)],
    ) -> Response:
        # The key is the attempt the form was shown for: the same form sent twice retries the
        # run once, even when the second post reads the attempt the first one made.
        given = form.get("attempt")
        attempt = (
            given
            if isinstance(given, str) and given.isascii() and given.isdigit()
            else client.runs.get(run_id).attempt
        )
        key = f"console:{run_id}:{attempt}"
        retried = client.runs.retry(run_id, by=viewer.principal, key=key)
        said = (
            f"Run {run_id} was already retried as attempt {retried.attempt}."
            if retried.replayed
            else f"Run {run_id} carries on as attempt {retried.attempt}, "
            f"from step {retried.from_step}."
        )
        return page.redirect(f"/console/runs/{run_id}", flash=said)


@dataclass(frozen=True)
class Failure:
    """A failure remit keeps of a run: when, where (a step, or a try of a call) and what."""

    at: datetime
    where: str
    message: str


def _failures(steps: list[Row], ledger: list[LedgerRow]) -> list[Failure]:
    """The failures remit keeps of a run, oldest first: each try of its calls that failed and
    each outcome left failed or unknown (the ledger), and each other step that failed (DBOS's
    record). remit keeps no log lines: the run page says where the workers write them."""
    found: list[Failure] = []
    calls = {(row.attempt, row.step_id) for row in ledger}
    for call in ledger:
        for tried in call.earlier:
            if tried.error:
                where = f"{call.op_id}, attempt {tried.attempt}, try {tried.try_number}"
                found.append(Failure(tried.at, f"{where} ({tried.status})", tried.error))
        if call.error:
            where = f"{call.op_id}, attempt {call.attempt} ({call.status})"
            found.append(Failure(call.finished_at or call.started_at, where, call.error))
    for row in steps:
        step = row.step
        if (
            "failed" in row.kinds
            and not step.copied
            and (step.attempt, step.function_id) not in calls
        ):
            _, error = step.summary(_WHOLE)
            where = f"attempt {step.attempt}, step {row.label}"
            found.append(Failure(row.started_at, where, error or "failed"))
    return sorted(found, key=lambda each: each.at)


def _live(client: Client, reader: Reader, run: Run) -> dict[str, Any]:
    """What the part of the page that moves shows: the status, what the run waits for and
    published, the timeline (each gate's wait up to its decision, a task's up to its answer,
    read from the approvals and tasks), the ledger, the latest messages and children (those the
    viewer may read) and which buttons apply; and the approvals and tasks themselves."""
    now_ms = int(time.time() * 1000)
    approvals = reader.approvals(run_id=run.run_id)
    tasks = client.tasks.list(run_id=run.run_id)
    steps = rows(
        client.runs.steps(run.run_id),
        now_ms=now_ms,
        finished_ms=None if run.finished_at is None else int(run.finished_at.timestamp() * 1000),
        approvals=approvals,
        tasks=tasks,
    )
    messages = client.runs.messages(run.run_id)
    children = reader.children(run.run_id)
    return {
        "run": run,
        "waiting": client.runs.waiting(run.run_id),
        "published": client.runs.state(run.run_id),
        "messages": messages[-_LISTED:],
        "earlier_messages": max(0, len(messages) - _LISTED),
        "children": children[-_LISTED:],
        "earlier_children": max(0, len(children) - _LISTED),
        "steps": steps,
        "timeline": timeline(steps, now_ms=now_ms),
        "ledger": client.calls.ledger(run.run_id),
        "approvals": approvals,
        "tasks": tasks,
        "can_cancel": not run.finished,
        "can_retry": run.status in RETRYABLE,
    }

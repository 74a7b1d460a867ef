"""The page of one run: its status, input and output, each attempt with the version that ran it,
the timeline of its steps, each op call with its ledger row, its approvals, tasks and activity,
and the buttons that cancel or retry it where that can be done.

While the run has not finished, the part that moves (status, timeline, ledger, buttons) asks
for itself again every three seconds (`GET /console/runs/{id}/live`, swapped in by htmx); a
browser without scripts reloads the page."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from remit.client import Client
from remit.console.pages.inbox import posted
from remit.console.render import Page
from remit.console.session import Viewer
from remit.console.svg import timeline
from remit.core.runs import Run
from remit.ops.retries import RETRYABLE
from remit.reads import Reader


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/runs/{run_id}")
    def run_page(
        request: Request, run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        reader = Reader(client, viewer.principal)
        run = reader.run(run_id)
        record = client.runs.record(run_id)
        return page.render(
            request,
            "run.html",
            viewer,
            attempts=client.runs.attempts(run_id),
            approvals=reader.approvals(run_id=run_id),
            tasks=client.tasks.list(run_id=run_id),
            record=record,
            activity=[] if record is None else reader.activity(*record),
            audit=client.ops.audit(run_id),
            **_live(client, run),
        )

    @router.get("/console/runs/{run_id}/live")
    def run_live(run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]) -> Response:
        run = Reader(client, viewer.principal).run(run_id)
        return page.fragment("parts/run_live.html", viewer=viewer, **_live(client, run))

    @router.post("/console/runs/{run_id}/cancel")
    def cancel(run_id: str, viewer: Annotated[Viewer, Depends(page.sessions.acting)]) -> Response:
        run = client.runs.cancel(run_id, by=viewer.principal)
        return page.redirect(f"/console/runs/{run_id}", flash=f"Run {run_id} is {run.status}.")

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


def _live(client: Client, run: Run) -> dict[str, Any]:
    """What the part of the page that moves shows: the status, the timeline, the ledger and
    which buttons apply."""
    return {
        "run": run,
        "timeline": timeline(client.runs.steps(run.run_id), now_ms=int(time.time() * 1000)),
        "ledger": client.calls.ledger(run.run_id),
        "can_cancel": not run.finished,
        "can_retry": run.status in RETRYABLE,
    }

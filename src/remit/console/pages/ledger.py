"""The ledger page: the op calls, newest first (one run's in order), filtered by op, status and
run, each with who it acted as. A row whose outcome is unknown (`uncertain`: the call may have
happened, and repeating it could do it twice) is marked, for a person to answer its task. A long
key, outcome or error is cut to what a row holds, and opens whole (`parts/cut.html`), so the
table keeps within the window."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from typing import Annotated, get_args

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.client import Client
from remit.console.render import Page
from remit.console.session import Viewer
from remit.core.errors import RemitError
from remit.core.ledger import LedgerStatus
from remit.reads import Reader

STATUSES: tuple[str, ...] = get_args(LedgerStatus)
PAGE_SIZE = 200


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/ledger")
    def ledger_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        given = {
            name: (request.query_params.get(name) or "").strip() for name in ("op", "status", "run")
        }
        problems: list[str] = []
        status = given["status"] or None
        if status is not None and status not in STATUSES:
            problems.append(f"status {status!r} is not one of {', '.join(STATUSES)}")
            status = None
        run_id = given["run"] or None
        reader = Reader(client, viewer.principal)
        rows = None
        if run_id is not None:
            # Said on the page beside the filters, as any other filter's problem is (an error
            # page would not show where htmx boosts the form: it swaps no 4xx answer): an
            # ambiguous prefix, or a run the viewer may not read (the refusal is recorded).
            try:
                run_id = reader.find_id("run", run_id)
                rows = reader.ledger(run_id, op=given["op"] or None, status=status)
            except RemitError as refused:
                problems.append(str(refused))
                rows = []
        if rows is None:
            rows = reader.ledger(None, op=given["op"] or None, status=status, limit=PAGE_SIZE)
        return page.render(
            request,
            "ledger.html",
            viewer,
            ledger=rows,
            given=given,
            problems=problems,
            statuses=STATUSES,
            ops=sorted(client.app.ops),
            one_run=False,
            filtered=any(given.values()),
            limit=PAGE_SIZE,
        )

"""The runs page: every run of the app, newest first, filtered by status, workflow, app of the
repo, the record it concerns, who started it and the run that started it, a page at a time.

Pages are read by key (the created time and id of the last run shown), never by offset, so the
hundredth page costs what the first does however many runs the database holds."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.client import Client
from remit.console.render import Page, query
from remit.console.session import Viewer
from remit.core.errors import RemitError
from remit.core.runs import STATUSES
from remit.reads import Reader

PAGE_SIZE = 50


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/runs")
    def runs_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        given = {
            name: (request.query_params.get(name) or "").strip()
            for name in ("status", "workflow", "app", "record", "started_by", "parent", "before")
        }
        problems: list[str] = []
        status = given["status"] or None
        if status is not None and status not in STATUSES:
            problems.append(f"status {status!r} is not one of {', '.join(STATUSES)}")
            status = None
        record = None
        if given["record"]:
            kind, colon, ident = given["record"].partition(":")
            if colon and kind and ident:
                record = (kind, ident)
            else:
                problems.append(
                    f"record {given['record']!r} is not type:id: write it as invoice:INV-1"
                )
        before = _cursor(given["before"], problems)
        reader = Reader(client, viewer.principal)
        parent = None
        if given["parent"]:
            try:  # an ambiguous prefix is said beside the filters, as any filter's problem
                parent = reader.find_id("run", given["parent"])
            except RemitError as refused:
                problems.append(str(refused))
                parent = given["parent"]  # no run has it as its whole id: none is listed
        found = reader.runs(
            status=status,
            workflow=given["workflow"] or None,
            app=None if given["app"] == "" else ("" if given["app"] == "(root)" else given["app"]),
            started_by=given["started_by"] or None,
            record=record,
            parent=parent,
            before=before,
            limit=PAGE_SIZE + 1,
        )
        shown, more = found[:PAGE_SIZE], len(found) > PAGE_SIZE
        older = None
        if more:
            last = shown[-1]
            older = query(given, before=f"{last.created_at.isoformat()}|{last.run_id}")
        return page.render(
            request,
            "runs.html",
            viewer,
            runs=shown,
            given=given,
            problems=problems,
            statuses=STATUSES,
            workflows=sorted(client.app.workflows),
            apps=["(root)", *client.app.apps],
            older=older,
            newest=query(given, before=None) if before else None,
        )


def _cursor(text: str, problems: list[str]) -> tuple[datetime, str] | None:
    if not text:
        return None
    at, bar, run_id = text.rpartition("|")
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        moment = None
    if not bar or moment is None or moment.tzinfo is None or not run_id:
        problems.append("the page asked for is not one this console links to: start again")
        return None
    return moment, run_id

"""Starting a run by hand: `/console/start` lists the workflows the signed-in person may start
(the policies' `start`, asked once a workflow with no input to judge), and
`/console/start/{workflow}` is a form generated from the workflow's input model, as the inbox's
drafts are (`console/forms.py`).

A start goes through `client.runs.start_row` as the viewer, so the policies judge it with the
input given: refused, the form is shown again with their reason (403) and what was typed, and
nothing starts. An input that does not parse is shown again with each field's message (422).
Started, the browser goes to the new run's page. A scheduled workflow (`trigger=`) starts on
its schedule and remit's own (the held call's, `apply`, `drift`) from their own commands: none
of them has a form here.
"""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

import inspect
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from remit.app import App
from remit.client import Client
from remit.console.errors import reasons_of, status_of
from remit.console.forms import fields_of, parse_form, posted_values
from remit.console.pages.inbox import form_dict, posted
from remit.console.render import Page
from remit.console.session import Viewer
from remit.core.errors import RemitError
from remit.declare.workflows import Workflow
from remit.policy.cedar import HELD
from remit.reads import Reader
from remit.resources.workflows import APPLY, DRIFT

INPUT = "input"
# The form's start key, a field of its own beside the input's.
START_KEY = "start_key"


def not_by_hand(app: App, wf: Workflow) -> str | None:
    """Why `wf` has no start form in the console, or None when it has one."""
    if wf.name == HELD and app.policy.enabled:
        return (
            f"`{HELD}` runs the direct calls a policy holds: make the call itself "
            "(`remit call OP --input JSON`)"
        )
    if wf.name in (APPLY, DRIFT) and app.resources is not None:
        return f"`{wf.name}` is remit's own, for the declared resources: `remit {wf.name}` runs it"
    if wf.trigger is not None:
        return (
            f"`{wf.name}` starts on its schedule ({wf.trigger.cron}, {wf.trigger.tz}), not "
            f"from the console; `remit start {wf.name}` starts one by hand"
        )
    return None


def summary(wf: Workflow) -> str:
    """The first paragraph of the workflow function's docstring, if it has one."""
    return (inspect.getdoc(wf.fn) or "").split("\n\n", 1)[0].replace("\n", " ")


def add(router: APIRouter, client: Client, page: Page) -> None:
    def startable(principal: str) -> list[Workflow]:
        """The workflows with a start form that `principal` may start, by name."""
        app = client.app
        offered = [wf for _, wf in sorted(app.workflows.items()) if not_by_hand(app, wf) is None]
        allowed = client.services.guard.allowed(principal, "start", [wf.name for wf in offered])
        return [wf for wf in offered if allowed is None or wf.name in allowed]

    def listing(
        request: Request, viewer: Viewer, *, status: int = 200, problem: str | None = None
    ) -> Response:
        return page.render(
            request,
            "start.html",
            viewer,
            status=status,
            title="Start a run",
            workflows=[(wf, summary(wf)) for wf in startable(viewer.principal)],
            problem=problem,
        )

    def form_page(
        request: Request,
        viewer: Viewer,
        wf: Workflow,
        values: Mapping[str, Any] | None = None,
        errors: Mapping[str, str] | None = None,
        *,
        status: int = 200,
        refusal: list[str] | None = None,
        key: str | None = None,
    ) -> Response:
        return page.render(
            request,
            "start_form.html",
            viewer,
            status=status,
            title=f"Start {wf.name}",
            wf=wf,
            about=summary(wf),
            fields=fields_of(wf.input, values, errors, INPUT),
            form_error=(errors or {}).get(""),
            refusal=refusal or [],
            # One start per form: the same form sent twice (a double click, a reload) is one
            # run. A form shown again after a problem keeps its key, having started nothing.
            start_key=key or f"console-{uuid.uuid4().hex}",
        )

    def workflow_of(request: Request, viewer: Viewer, name: str) -> Workflow | Response:
        """The workflow `name` if it has a start form; else the list, saying why not (404)."""
        wf = client.app.workflows.get(name)
        if wf is None:
            known = ", ".join(each.name for each in startable(viewer.principal)) or "none"
            why = f"there is no workflow `{name}` (you may start: {known})"
        else:
            why = not_by_hand(client.app, wf) or ""
        if wf is None or why:
            return listing(request, viewer, status=404, problem=why)
        return wf

    @router.get("/console/start")
    def start_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        return listing(request, viewer)

    @router.get("/console/start/{name}")
    def start_form(
        name: str, request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        found = workflow_of(request, viewer, name)
        return found if isinstance(found, Response) else form_page(request, viewer, found)

    @router.post("/console/start/{name}")
    def start_run(
        name: str,
        request: Request,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form_data: Annotated[FormData, Depends(posted)],
    ) -> Response:
        found = workflow_of(request, viewer, name)
        if isinstance(found, Response):
            return found
        wf, form = found, form_dict(form_data)
        typed = posted_values(wf.input, form, INPUT)
        sent = form.get(START_KEY)
        key = sent if isinstance(sent, str) and sent else None
        value, errors = parse_form(wf.input, form, INPUT)
        if value is None:
            return form_page(request, viewer, wf, typed, errors, status=422, key=key)
        try:
            run = client.runs.start_row(wf.name, value, by=viewer.principal, key=key)
        except RemitError as refused:
            status, reasons = status_of(refused), reasons_of(refused)
            return form_page(request, viewer, wf, typed, status=status, refusal=reasons, key=key)
        readable = Reader(client, viewer.principal).workflows
        if readable is not None and wf.name not in readable:
            # Theirs to start, not to read: the run's page would refuse them.
            return page.redirect(
                "/console/start",
                flash=f"Started {wf.name}: run {run.run_id}. The policies do not let you read "
                "its runs.",
            )
        return page.redirect(
            f"/console/runs/{run.run_id}", flash=f"Started {wf.name}: run {run.run_id}."
        )

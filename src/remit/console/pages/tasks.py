"""The tasks page: the open tasks, each a write whose outcome is unknown, for a person to say
whether it happened ("It happened", with what it returned, in a form generated from the op's
output model) or not ("It did not happen").

An answer goes through `client.tasks.resolve` as the viewer, with a key made when the page was
rendered, so a form sent twice answers once. An output that does not parse is shown again
with each field's message (422) and answers nothing; an answer the policies refuse is shown
again with their reason (403)."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.datastructures import FormData

from remit.client import Client
from remit.console.errors import reasons_of, status_of
from remit.console.forms import FormField, fields_of, parse_form, posted_values
from remit.console.pages.inbox import form_dict, new_key, posted, text_of
from remit.console.render import Page
from remit.console.session import Viewer
from remit.core.errors import TaskRefused
from remit.core.ledger import LedgerRow
from remit.people.tasks import Task
from remit.reads import Reader

OUTPUT = "output"


@dataclass(frozen=True)
class TaskForm:
    """One open task's form as the page shows it: the call's ledger row, the output fields,
    the key it carries, and what the last post of it was refused for."""

    task: Task
    row: LedgerRow | None
    # What the write was: the op's description, what the call was sent (`task.input`, when
    # kept), and the input of the run that made the call (None: a direct call made it).
    description: str
    run_input: Any
    model: type[BaseModel] | None
    fields: list[FormField]
    key: str
    raw_output: str = ""
    refusal: list[str] = field(default_factory=list)
    form_error: str | None = None

    @property
    def vendor(self) -> str:
        return self.task.op_id.split(".", 1)[0]


def add(router: APIRouter, client: Client, page: Page) -> None:
    def output_model(task: Task) -> type[BaseModel] | None:
        declared = client.app.ops.get(task.op_id)
        if declared is None:
            return None
        model = declared.output
        return model if isinstance(model, type) and issubclass(model, BaseModel) else None

    def ledger_row(task: Task) -> LedgerRow | None:
        rows = client.calls.ledger(task.run_id, limit=1000)
        return next((r for r in rows if r.idempotency_key == task.idempotency_key), None)

    def task_form(
        task: Task, shown: list[FormField] | None = None, key: str | None = None, **again: Any
    ) -> TaskForm:
        """The form of `task`: empty, or (`shown`, `key`, `again`) as a post left it."""
        model = output_model(task)
        if shown is None:
            shown = [] if model is None else fields_of(model, None, {}, OUTPUT)
        declared = client.app.ops.get(task.op_id)
        run = client.services.runs.find(task.run_id)  # None: a direct call's task, of no run
        return TaskForm(
            task,
            ledger_row(task),
            "" if declared is None else declared.description,
            None if run is None else run.input,
            model,
            shown,
            key or new_key(),
            **again,
        )

    def show(
        request: Request, viewer: Viewer, *, status: int = 200, replaced: TaskForm | None = None
    ) -> Response:
        open_tasks = Reader(client, viewer.principal).tasks(status="open", oldest_first=True)
        forms = [task_form(t) for t in open_tasks]
        if replaced is not None:
            at = next((i for i, f in enumerate(forms) if f.task.id == replaced.task.id), None)
            if at is None:
                forms.insert(0, replaced)
            else:
                forms[at] = replaced
        return page.render(request, "tasks.html", viewer, status=status, title="Tasks", forms=forms)

    @router.get("/console/tasks")
    def tasks_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        return show(request, viewer)

    @router.post("/console/tasks/{task_id}")
    def resolve_task(
        task_id: str,
        request: Request,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form_data: Annotated[FormData, Depends(posted)],
    ) -> Response:
        form = form_dict(form_data)
        # Read first: a refused answer shows the task's form again, with what its call was sent.
        task = Reader(client, viewer.principal).task(task_id)
        done = text_of(form, "done")
        key = text_of(form, "key") or new_key()
        model = output_model(task)
        raw = text_of(form, OUTPUT)

        def again(status: int, errors: Mapping[str, str], refusal: list[str]) -> Response:
            shown = (
                []
                if model is None
                else fields_of(model, posted_values(model, form, OUTPUT), errors, OUTPUT)
            )
            again_form = task_form(
                task,
                shown,
                key,
                raw_output=raw,
                refusal=refusal,
                form_error=errors.get("") or None,
            )
            return show(request, viewer, status=status, replaced=again_form)

        if done not in ("yes", "no"):
            return again(422, {}, [f"done {done!r} is not yes or no"])
        output: Any = None
        if done == "yes":
            if model is not None:
                output, errors = parse_form(model, form, OUTPUT)
                if output is None:
                    return again(422, errors, [])
            elif raw.strip():
                try:
                    output = json.loads(raw)
                except json.JSONDecodeError as bad:
                    return again(422, {"": f"Invalid JSON: {bad.msg}"}, [])
        try:
            resolved = client.tasks.resolve(
                task_id, done=done == "yes", output=output, key=key, by=viewer.principal
            )
        except TaskRefused as refused:
            return again(status_of(refused), {}, reasons_of(refused))
        said = "it happened" if done == "yes" else "it did not happen"
        already = " (already answered by this form)" if resolved.replayed else ""
        return page.redirect("/console/tasks", flash=f"{task.title} ({task_id}): {said}{already}")

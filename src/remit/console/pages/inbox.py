"""The inbox: the pending gates the signed-in person may decide, oldest first, each with its
draft as a form generated from its approval type's model, a reason, and Approve / Reject.

A decision goes through `client.approvals.decide` as the viewer, via `console`, with the draft's
fields the form changed as its edits; the flash then says what changed. The fields the approval
type keeps as the run proposed them (`ApprovalType(editable=...)`) are shown, not edited, and
`decide()` refuses a post that changes one. Each form carries a decision key made when the page
was rendered, so a form sent twice (a double click, a resent post) decides once. A draft that
does not parse is shown again with each field's message (422) and decides nothing; a decision
the policies refuse is shown again with their reason (403), and changes nothing. Several gates
are decided at once, all or none, from `form#batch`, shown when more than one waits.

The page polls `/console/inbox/live` every 5 s for a header saying how many gates wait and
which came or went since it was rendered; the forms themselves are never swapped, so nothing
being typed is lost, and without JavaScript the page is simply reloaded by hand.
"""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.datastructures import FormData

from remit.client import Client
from remit.console.errors import reasons_of, status_of
from remit.console.forms import FormField, as_posted, fields_of, parse_form, posted_values
from remit.console.render import Page
from remit.console.session import Viewer
from remit.core.errors import DecisionRefused
from remit.core.text import excerpt
from remit.people.approvals import ApprovalType
from remit.people.inbox import Decidable
from remit.reads import Reader

DRAFT = "draft"
VERBS = {"approved": "Approved", "rejected": "Rejected"}


@dataclass(frozen=True)
class GateForm:
    """One gate's form as the page shows it: its fields, the decision key it carries, and
    what the last post of it was refused for, if anything."""

    item: Decidable
    model: type[BaseModel] | None
    fields: list[FormField]
    key: str
    reason: str = ""
    refusal: list[str] = field(default_factory=list)
    form_error: str | None = None

    @property
    def approval_id(self) -> str:
        return self.item.approval.id


def new_key() -> str:
    """A decision key for one rendered form: the same form sent twice decides once."""
    return f"console:{uuid.uuid4().hex}"


def form_dict(form: FormData) -> dict[str, str | list[str]]:
    """A posted form's text values, a name given several times as a list."""
    out: dict[str, str | list[str]] = {}
    for name in form:
        values = [value for value in form.getlist(name) if isinstance(value, str)]
        out[name] = values[0] if len(values) == 1 else values
    return out


def text_of(form: Mapping[str, str | list[str]], name: str) -> str:
    given = form.get(name, "")
    return given if isinstance(given, str) else (given[-1] if given else "")


async def posted(request: Request) -> FormData:
    """The posted form (read once, by the CSRF check before it)."""
    return await request.form()


def changes(draft: Mapping[str, Any], edited: Mapping[str, Any]) -> str:
    """The fields `edited` changes in `draft`, as a person reads them: `amount 299.00 →
    250.00; memo goodwill → typed`."""
    return "; ".join(
        f"{name} {excerpt(draft.get(name), 40)} → {excerpt(value, 40)}"
        for name, value in edited.items()
    )


def add(router: APIRouter, client: Client, page: Page) -> None:
    def declared_of(item: Decidable) -> ApprovalType | None:
        return client.app.approval_types.get(item.approval.type)

    def draft_fields(
        declared: ApprovalType, values: Mapping[str, Any], errors: Mapping[str, str] | None = None
    ) -> list[FormField]:
        return fields_of(declared.draft, values, errors, DRAFT, read_only=declared.read_only)

    def gate_form(item: Decidable) -> GateForm:
        declared = declared_of(item)
        if declared is None:
            return GateForm(item, None, [], new_key())
        return GateForm(
            item, declared.draft, draft_fields(declared, item.approval.draft_json), new_key()
        )

    def show(
        request: Request,
        viewer: Viewer,
        *,
        status: int = 200,
        replaced: GateForm | None = None,
        batch_refusal: list[str] | None = None,
        batch_key: str | None = None,
    ) -> Response:
        items = client.approvals.decidable(by=viewer.principal)
        gates = [gate_form(item) for item in items]
        if replaced is not None:
            at = next(
                (i for i, g in enumerate(gates) if g.approval_id == replaced.approval_id), None
            )
            if at is None:
                gates.insert(0, replaced)
            else:
                gates[at] = replaced
        return page.render(
            request,
            "inbox.html",
            viewer,
            status=status,
            title="Inbox",
            gates=gates,
            batch_key=batch_key or new_key(),
            batch_refusal=batch_refusal or [],
            shown=",".join(g.approval_id for g in gates),
        )

    @router.get("/console/inbox")
    def inbox_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        return show(request, viewer)

    @router.get("/console/inbox/live")
    def inbox_live(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        shown = [i for i in (request.query_params.get("shown") or "").split(",") if i]
        waiting = client.approvals.decidable(by=viewer.principal)
        ids = [item.approval.id for item in waiting]
        return page.fragment(
            "parts/inbox_live.html",
            count=len(waiting),
            shown=",".join(shown),
            new=[item for item in waiting if item.approval.id not in shown],
            gone=[i for i in shown if i not in ids],
        )

    @router.post("/console/inbox/batch")
    def decide_batch(
        request: Request,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form_data: Annotated[FormData, Depends(posted)],
    ) -> Response:
        form = form_dict(form_data)
        chosen = form.get("ids", [])
        ids = [chosen] if isinstance(chosen, str) else list(chosen)
        decision = text_of(form, "decision")
        key = text_of(form, "key") or new_key()
        problems = []
        if not ids:
            problems.append("Select at least one approval to decide, then press the button.")
        if decision not in VERBS:
            problems.append(f"decision {decision!r} is not one of approved, rejected")
        if problems:
            return show(request, viewer, status=422, batch_refusal=problems, batch_key=key)
        reason = text_of(form, "reason").strip() or None
        try:
            result = client.approvals.decide(
                ids, decision, key=key, reason=reason, by=viewer.principal, via="console"
            )
        except DecisionRefused as refused:
            return show(
                request,
                viewer,
                status=status_of(refused),
                batch_refusal=reasons_of(refused),
                batch_key=key,
            )
        done = ", ".join(d.approval_id for d in result.decided)
        again = " (already decided by this form)" if result.replayed else ""
        count = len(result.decided)
        return page.redirect(
            "/console/inbox",
            flash=f"{VERBS[decision]} {count} approval{'s' if count != 1 else ''}{again}: {done}",
        )

    @router.post("/console/inbox/{approval_id}")
    def decide_one(
        approval_id: str,
        request: Request,
        viewer: Annotated[Viewer, Depends(page.sessions.acting)],
        form_data: Annotated[FormData, Depends(posted)],
    ) -> Response:
        form = form_dict(form_data)
        # A refused decision shows the gate again: only to whoever may decide it or read it.
        decidable = client.approvals.decidable(by=viewer.principal, approval_id=approval_id)
        approval = (
            decidable[0].approval
            if decidable
            else Reader(client, viewer.principal).approval(approval_id)
        )
        decision = text_of(form, "decision")
        key = text_of(form, "key") or new_key()
        reason = text_of(form, "reason")
        item = Decidable(approval, client.runs.get(approval.run_id), None, ("approved", "rejected"))
        # This gate alone, not the whole inbox: its own policy checks, once.
        item = next(iter(decidable), item)
        declared = declared_of(item)
        model = None if declared is None else declared.draft
        if declared is not None:
            # The read-only fields are shown, not posted: read the post with them as they stand.
            stored = draft_fields(declared, approval.draft_json)
            form = {**as_posted(f for f in stored if f.read_only), **form}

        def again(status: int, errors: Mapping[str, str], refusal: list[str]) -> Response:
            shown = (
                []
                if declared is None
                else draft_fields(declared, posted_values(declared.draft, form, DRAFT), errors)
            )
            gate = GateForm(
                item, model, shown, key, reason, refusal, form_error=errors.get("") or None
            )
            return show(request, viewer, status=status, replaced=gate)

        if decision not in VERBS:
            return again(422, {}, [f"decision {decision!r} is not one of approved, rejected"])
        edited: dict[str, Any] = {}
        if decision == "approved" and model is not None:
            value, errors = parse_form(model, form, DRAFT)
            if value is None:
                return again(422, errors, [])
            edited = {k: v for k, v in value.items() if v != approval.draft_json.get(k)}
        try:
            result = client.approvals.decide(
                approval_id,
                decision,
                key=key,
                edits={approval_id: edited} if edited else None,
                reason=reason.strip() or None,
                by=viewer.principal,
                via="console",
            )
        except DecisionRefused as refused:
            return again(status_of(refused), {}, reasons_of(refused))
        said = f" with edits ({changes(approval.draft_json, edited)})" if edited else ""
        already = " (already decided by this form)" if result.replayed else ""
        return page.redirect(
            "/console/inbox",
            flash=f"{VERBS[decision]}{said}: {approval.title} ({approval_id}){already}",
        )

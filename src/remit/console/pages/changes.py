"""The changes pages: the changes to the operations repo, newest first, and one change's page:
where it stands, its change request, its checks with what each said, its review (the gates of
its run, linked to the inbox), its merge, what its deploy put on each host and whether the host
was healthy after, and its activity.

Changes are the runs of the built-in workflow `change`, read as the viewer may read them
(`read_runs` on `change`): the list is empty for a viewer who may not, and a change's page is
403 with the policies' reason."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.changes.store import Change, Deploy
from remit.changes.workflow import CHANGE
from remit.client import Client
from remit.console.render import Page
from remit.console.session import Viewer
from remit.ops.changes import ChangeNotFound
from remit.reads import Reader

PAGE_SIZE = 50
# How many of the latest deploys a change's page looks through for its own.
DEPLOYS_READ = 200


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/changes")
    def changes_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        branch = (request.query_params.get("branch") or "").strip()
        has_changes = CHANGE in client.app.workflows
        found: list[Change] = []
        if has_changes and Reader(client, viewer.principal).may_read_runs_of(CHANGE):
            found = client.changes.list(branch=branch or None, limit=PAGE_SIZE)
        return page.render(
            request,
            "changes.html",
            viewer,
            has_changes=has_changes,
            changes=found,
            branch=branch,
            limit=PAGE_SIZE,
        )

    @router.get("/console/changes/{change_id}")
    def change_page(
        request: Request,
        change_id: str,
        viewer: Annotated[Viewer, Depends(page.sessions.viewer)],
    ) -> Response:
        reader = Reader(client, viewer.principal)
        if not reader.may_read_runs_of(CHANGE):
            # Refused, with the policies' reason, and recorded.
            client.services.guard.require(viewer.principal, "read_runs", CHANGE, {})
        try:
            change = client.changes.get(change_id)
        except ChangeNotFound:
            return page.render(
                request,
                "error.html",
                viewer,
                status=404,
                title="Not found",
                reasons=[f"There is no change {change_id}: the Changes page lists them."],
            )
        deploys = client.changes.deploys(change_id=change.id, limit=DEPLOYS_READ)
        return page.render(
            request,
            "change.html",
            viewer,
            change=change,
            checks=_checks(change),
            approvals=reader.approvals(run_id=change.run_id),
            deploys=_oldest_first(deploys),
            activity=reader.activity("change", change.id),
        )


def _checks(change: Change) -> dict[str, Any]:
    """The change's last checks as the page shows them: the head they checked, each result
    (`ok`, `exit`, `summary`) by name, and the commits the head adds."""
    checks = change.checks or {}
    results = checks.get("results") or {}
    return {
        "head": checks.get("head"),
        "results": {
            str(name): {
                "ok": bool(result.get("ok")),
                "exit": result.get("exit"),
                "summary": str(result.get("summary") or ""),
            }
            for name, result in results.items()
        },
        "commits": [
            {
                "sha": str(commit.get("sha") or ""),
                "subject": str(commit.get("subject") or ""),
                "author": str(commit.get("author") or ""),
            }
            for commit in checks.get("commits") or []
        ],
    }


def _oldest_first(deploys: list[Deploy]) -> list[Deploy]:
    return sorted(deploys, key=lambda each: each.id)

"""The operations page: the app's workers (live, dead, stopped or taken over), what is due
without anyone asking, whether the app is paused with the buttons that pause and resume it,
what the policies refused, and the audit of the app's controls."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.client import Client
from remit.console.render import Page
from remit.console.session import Viewer
from remit.ops.registry import state as worker_state
from remit.reads import Reader

SHOWN = 50


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/operations")
    def operations_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        Reader(client, viewer.principal).require_operations()
        now = datetime.now(UTC)
        dead_after = timedelta(seconds=client.settings.dead_after)
        workers = [
            (row, worker_state(row, now=now, dead_after=dead_after))
            for row in client.ops.workers()[:SHOWN]
        ]
        return page.render(
            request,
            "operations.html",
            viewer,
            workers=workers,
            paused=client.services.app_state.paused(),
            deadlines=client.ops.deadlines(limit=SHOWN),
            denials=client.ops.denials(limit=SHOWN),
            audit=list(reversed(client.ops.audit(f"app:{client.app.name}", limit=SHOWN))),
        )

    @router.post("/console/pause")
    def pause(viewer: Annotated[Viewer, Depends(page.sessions.acting)]) -> Response:
        stopped = client.ops.pause(by=viewer.principal)
        said = (
            f"The app is paused: {len(stopped)} queues stopped; runs park before their next step."
        )
        return page.redirect("/console/operations", flash=said)

    @router.post("/console/resume")
    def resume(viewer: Annotated[Viewer, Depends(page.sessions.acting)]) -> Response:
        _, carried_on = client.ops.resume(by=viewer.principal)
        said = f"The app is resumed: {len(carried_on)} parked runs carry on."
        return page.redirect("/console/operations", flash=said)

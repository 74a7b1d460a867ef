"""The resources page: the resources the app's data files declare, each with its type and the
vendor id it is bound to, bindings whose declarations are gone, and the last plan: what the
latest `apply` and `drift` runs found and did. The page asks no vendor (`remit plan` does)."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.client import Client
from remit.console.render import Page
from remit.console.session import Viewer
from remit.reads import Reader
from remit.resources.workflows import APPLY, DRIFT


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/resources")
    def resources_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        reader = Reader(client, viewer.principal)
        reader.require_operations()  # the vendor ids of what the app runs on
        resources = client.app.resources
        bindings = client.resources.bindings()
        rows: list[dict[str, Any]] = []
        if resources is not None:
            declared = resources.declared
            for name in [*declared.order, *sorted(set(bindings) - set(declared.by_name))]:
                declaration = declared.by_name.get(name)
                bound = bindings.get(name)
                rows.append(
                    {
                        "name": name,
                        "type": declaration.type.id
                        if declaration
                        else (bound.type if bound else ""),
                        "bound": None if bound is None else bound.id,
                        "declared": declaration is not None,
                        "fields": {} if declaration is None else dict(declaration.fields),
                        "where": declared.where.get(name, ""),
                    }
                )
        last = {
            kind: next(iter(reader.runs(workflow=kind, limit=1)), None)
            for kind in (APPLY, DRIFT)
            if resources is not None
        }
        return page.render(
            request,
            "resources.html",
            viewer,
            declares=resources is not None,
            resources=rows,
            last=last,
        )

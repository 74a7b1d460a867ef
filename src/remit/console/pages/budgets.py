"""The budgets page: each budget's periods as a chart (spent and reserved against the limit),
with each period's drift: its counter less the sum of the ledger costs of the calls settled in
it, which is 0 unless something wrote one without the other."""

# No `from __future__ import annotations`: FastAPI reads each route's `Annotated[...,
# Depends(page.sessions...)]` when the route is made, and `page` is local to `add`.

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from remit.budgets.model import PeriodState
from remit.client import Client
from remit.console.render import Page
from remit.console.session import Viewer
from remit.console.svg import budget_chart
from remit.reads import Reader

PERIODS = 50


def add(router: APIRouter, client: Client, page: Page) -> None:
    @router.get("/console/budgets")
    def budgets_page(
        request: Request, viewer: Annotated[Viewer, Depends(page.sessions.viewer)]
    ) -> Response:
        Reader(client, viewer.principal).require_operations()
        by_scope: dict[str, list[tuple[PeriodState, Decimal]]] = {}
        for state, drift in client.budgets.periods(limit=PERIODS):
            by_scope.setdefault(state.scope, []).append((state, drift))
        budgets = [
            {"scope": scope, "periods": periods, "chart": budget_chart(periods)}
            for scope, periods in sorted(by_scope.items())
        ]
        return page.render(request, "budgets.html", viewer, budgets=budgets)

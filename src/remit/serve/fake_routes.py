"""`GET /fakes/{vendor}`: what a demo's fake vendors hold (see `remit demo`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path

from remit.connectors.base import Fake
from remit.core.text import excerpt
from remit.serve.errors import Problem, error_responses
from remit.serve.params import NUL_FREE


def fake_routes(routes: APIRouter, fakes: Mapping[str, Fake]) -> None:
    """`GET /fakes/{vendor}`: what each fake vendor holds, served by an instance that runs every
    connector on its fake and shares one fake per vendor (`remit demo`)."""

    @routes.get("/fakes/{vendor}", responses=error_responses(401, 404, 422))
    def fake_state(
        vendor: Annotated[
            str, Path(max_length=200, json_schema_extra=NUL_FREE, description="The vendor.")
        ],
    ) -> dict[str, Any]:
        """What the vendor's fake holds (`Fake.state()`): its invoices, its outbox, the writes
        it applied. A vendor with no fake here is 404, naming those there are."""
        fake = fakes.get(vendor)
        if fake is None:
            raise Problem(
                404,
                f"this instance runs no fake for the vendor `{excerpt(vendor)}`: the fake vendors "
                f"here are {', '.join(sorted(fakes)) or 'none'}",
            )
        return fake.state()

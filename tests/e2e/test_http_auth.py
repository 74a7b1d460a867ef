"""Who acts over HTTP: every route but /health (and the forge's webhook) needs an API token,
the request acts as the token's principal under the app's policies, and the server answers
only to its own names. On the example desk, whose policies refuse dave everything and let ann
(a clerk) approve up to 500.00."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from remit import load_app
from remit.core.schema import denials
from remit.serve.api import create_api
from remit.testing import Harness, ManualClock
from tests.e2e.cli_support import ACME

WRITE_OFF = {"invoice_id": "inv_1003", "reason": "customer in administration"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def desk(database_url: str, clock: ManualClock) -> Iterator[Harness]:
    with Harness(load_app(ACME), database_url=database_url, clock=clock) as running:
        yield running


@pytest.fixture
def http(desk: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(desk.client, allowed_hosts=["testserver"])) as client:
        yield client


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    """Every route of an app, those of the routers it includes too."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # an included router
            yield from _routes(route.original_router.routes)


def token(desk: Harness, principal: str, **options: object) -> dict[str, str]:
    _, made = desk.client.services.tokens.create(principal, by="user:sam", **options)  # type: ignore[arg-type]
    return {"Authorization": f"Bearer {made}"}


def test_every_route_but_health_needs_a_working_token(
    desk: Harness, http: TestClient, clock: ManualClock
) -> None:
    routes = [
        (method, route.path.replace("{approval_id}", "apr_0123456789abcdef"))
        for route in _routes(http.app.routes)  # type: ignore[attr-defined]
        for method in route.methods
        # The console's pages sign in by a session cookie, not a token (test_console_frame.py).
        if route.path not in ("/", "/console") and not route.path.startswith("/console/")
    ]
    assert ("GET", "/health") in routes
    assert ("GET", "/openapi.json") in routes
    revoked = token(desk, "user:ann")
    desk.client.services.tokens.revoke(desk.client.services.tokens.list()[0].id, by="user:sam")
    expired = token(desk, "user:ann", expires_in=timedelta(hours=1))
    clock.advance(hours=2)
    for headers, why in [
        ({}, "send an API token as `Authorization: Bearer rmt_...`"),
        ({"Authorization": "Basic YW5uOnB3"}, "send an API token"),
        ({"Authorization": "Bearer rmt_nope"}, "is not a remit API token"),
        (
            {"Authorization": "Bearer rmt_0123456789ab_" + "A" * 43},
            "is not one of this app's",
        ),
        (revoked, "is revoked"),
        (expired, "is expired"),
    ]:
        for method, path in routes:
            # The forge's webhook needs no token: the delivery's signature is its
            # authentication (tests/e2e/test_api_changes.py).
            if path in ("/health", "/forge/{remote}/events"):
                continue
            answer = http.request(method, path, headers=headers, json={"decision": "approved"})
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="remit"'
            assert why in answer.json()["error"]
            # The token is never repeated back.
            assert "Bearer" not in answer.json()["error"].replace("Bearer rmt_...`", "")
    assert http.get("/health").json() == {"ok": True}


def test_a_decision_is_made_as_the_tokens_principal_and_refused_by_the_policies(
    desk: Harness, http: TestClient
) -> None:
    run = desk.start("ar.write-off", WRITE_OFF, by="user:ann")
    gate = desk.gate(run.run_id)
    path = f"/approvals/{gate.id}/decision"

    stranger = http.post(
        path,
        json={"decision": "approved"},
        headers={**token(desk, "user:dave"), "Idempotency-Key": "d"},
    )
    assert stranger.status_code == 403, stranger.text
    assert 'user:dave may not decide ApprovalType::"write-off"' in stranger.json()["error"]
    clerk = http.post(
        path,
        json={"decision": "approved"},
        headers={**token(desk, "user:ann"), "Idempotency-Key": "a"},
    )
    assert clerk.status_code == 403
    assert "user:ann may not decide" in clerk.json()["error"]
    with desk.client.db.engine.connect() as conn:
        refused = conn.execute(sa.select(denials.c.principal, denials.c.action)).all()
    assert sorted(refused) == [("user:ann", "decide"), ("user:dave", "decide")]
    assert desk.approvals.get(gate.id).status == "pending"

    # The body cannot say who decides: only the token does.
    forged = http.post(
        path,
        json={"decision": "approved", "by": "user:carol"},
        headers={**token(desk, "user:dave"), "Idempotency-Key": "f"},
    )
    assert forged.status_code == 422
    assert (
        "the decision is made as the principal of the request's API token"
        in (forged.json()["error"])
    )

    carol = http.post(
        path,
        json={"decision": "approved", "edits": {"amount": 50000}},
        headers={**token(desk, "user:carol"), "Idempotency-Key": "c"},
    )
    assert carol.status_code == 200, carol.text
    assert carol.json()["approval"]["decided_by"] == "user:carol"
    assert desk.wait(run.run_id).status == "done"


def test_the_server_answers_only_to_its_own_names(desk: Harness) -> None:
    api = create_api(desk.client)  # localhost, 127.0.0.1 and ::1
    ann = token(desk, "user:ann")
    for host, status in [
        ("localhost:8700", 200),
        ("127.0.0.1", 200),
        ("[::1]:8700", 200),
        ("attacker.example", 400),
        ("localhost.attacker.example:8700", 400),
    ]:
        with TestClient(api, base_url=f"http://{host}") as client:
            answer = client.get("/approvals", headers=ann)
        assert answer.status_code == status, (host, answer.text)
        if status == 400:
            assert "this server does not answer to the name" in answer.json()["error"]

"""The HTTP API's routes beyond approvals: runs, tasks, the ledger, budgets, deadlines, workers,
denials, audit, controls, secrets, direct calls and tokens, each as a user sees it, acting as
the principal of the request's API token. On the test shop (no policies: every act allowed) and
on the example desk (ann a clerk, carol a controller, sam an admin, dave nobody)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit import DriverError, load_app
from remit.core.schema import denials
from remit.serve.api import create_api
from remit.testing import Harness
from tests.e2e.cli_support import ACME
from tests.e2e.test_http_auth import _routes
from tests.support import FakeShop, make_app, send_email

WRITE_OFF = {"invoice_id": "inv_1003", "reason": "customer in administration"}
# Every route and its methods, /health and the spec among them.
ROUTES = {
    "/approvals": ["get"],
    "/approvals/decisions": ["post"],
    "/approvals/{approval_id}": ["get"],
    "/approvals/{approval_id}/decision": ["post"],
    "/approvals/{approval_id}/withdraw": ["post"],
    "/audit": ["get"],
    "/budgets": ["get"],
    "/budgets/{scope}/limit": ["put"],
    "/calls": ["post"],
    "/changes": ["get", "post"],
    "/changes/{change_id}": ["get"],
    "/chats": ["get", "post"],
    "/chats/{chat_id}": ["get"],
    "/chats/{chat_id}/draft/confirm": ["post"],
    "/chats/{chat_id}/draft/discard": ["post"],
    "/chats/{chat_id}/draft/sandbox": ["post"],
    "/chats/{chat_id}/events": ["get"],
    "/chats/{chat_id}/messages": ["get", "post"],
    "/deadlines": ["get"],
    "/denials": ["get"],
    "/deploys": ["get"],
    "/forge/{remote}/events": ["post"],
    "/health": ["get"],
    "/ledger": ["get"],
    "/login-links": ["post"],
    "/passwords/{principal}": ["put"],
    "/pause": ["post"],
    "/reconcile": ["post"],
    "/records/{record_type}/{record_id}/activity": ["get"],
    "/records/{record_type}/{record_id}/archive": ["post"],
    "/resume": ["post"],
    "/runs": ["get", "post"],
    "/runs/{run_id}": ["get"],
    "/runs/{run_id}/cancel": ["post"],
    "/runs/{run_id}/children": ["get"],
    "/runs/{run_id}/messages": ["get", "post"],
    "/runs/{run_id}/state": ["get"],
    "/runs/{run_id}/retry": ["post"],
    "/runs/{run_id}/steps": ["get"],
    "/schedules": ["get"],
    "/schedules/{workflow}/pause": ["post"],
    "/schedules/{workflow}/resume": ["post"],
    "/secrets": ["get"],
    "/secrets/{name}": ["delete", "put"],
    "/tasks": ["get"],
    "/tasks/{task_id}": ["get"],
    "/tasks/{task_id}/resolution": ["post"],
    "/tokens": ["get", "post"],
    "/tokens/{token_id}": ["delete"],
    "/workers": ["get"],
}
# The routes that need no token: the probe of health, and the forge's webhook, whose
# signature (checked against the remote's webhook secret) is its authentication.
TOKENLESS = {"/health", "/forge/{remote}/events"}
# The routes that answer with something else than JSON when they succeed: a chat's turn as
# server-sent events.
STREAMS = {"/chats/{chat_id}/events": "text/event-stream"}


@pytest.fixture
def shop(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # The secrets' key file is made in the app's folder, here the test's own.
    monkeypatch.chdir(tmp_path)
    with Harness(make_app(), database_url=database_url) as running:
        yield running


@pytest.fixture
def http(shop: Harness) -> Iterator[TestClient]:
    """The API over the shop, called as ann unless a request says otherwise."""
    api = create_api(shop.client, allowed_hosts=["testserver"])
    with TestClient(api, headers=bearer(shop, "user:ann")) as client:
        yield client


@pytest.fixture
def desk(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    monkeypatch.chdir(tmp_path)
    with Harness(load_app(ACME), database_url=database_url) as running:
        yield running


@pytest.fixture
def desk_http(desk: Harness) -> Iterator[TestClient]:
    """The API over the desk, with no token unless a request sends one."""
    with TestClient(create_api(desk.client, allowed_hosts=["testserver"])) as client:
        yield client


def bearer(harness: Harness, principal: str) -> dict[str, str]:
    """The `Authorization` header of a new API token for `principal`."""
    _, token = harness.client.services.tokens.create(principal, by="user:sam")
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def refused(response: Any, status: int, *, error: str) -> list[str]:
    """The reasons of an error response, checked to be `status` and to say `error`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "reasons"}
    assert error in body["error"], body
    return [reason["reason"] for reason in body["reasons"]]


def denied(harness: Harness) -> list[tuple[str, str, str]]:
    with harness.client.db.engine.connect() as conn:
        rows = conn.execute(sa.select(denials.c.principal, denials.c.action, denials.c.resource))
        return sorted((row.principal, row.action, row.resource) for row in rows)


def test_every_route_is_in_the_spec_and_needs_a_token(shop: Harness, http: TestClient) -> None:
    spec = ok(http.get("/openapi.json"))
    assert {path: sorted(methods) for path, methods in spec["paths"].items()} == ROUTES
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            answered = {int(status) for status in operation["responses"]}
            success = min(answered)
            assert success in (200, 201, 202), (method, path)
            media = STREAMS.get(path, "application/json")
            assert operation["responses"][str(success)]["content"][media]["schema"]
            for status in answered - {success}:
                schema = operation["responses"][str(status)]["content"]["application/json"]
                assert schema["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            if path not in TOKENLESS:
                assert operation["security"] == [{"HTTPBearer": []}], (method, path)
                assert "401" in operation["responses"], (method, path)
    for name in ("StartRequest", "DecisionsRequest", "TokenRequest", "CallRequest"):
        assert spec["components"]["schemas"][name]["additionalProperties"] is False

    walked = [
        (method, route.path, route.path.format(**dict.fromkeys(route.param_convertors, "x1")))
        for route in _routes(http.app.routes)  # type: ignore[attr-defined]
        for method in route.methods
        if not _console(route.path)  # the console's pages sign in by cookie, not token
    ]
    assert len(walked) == sum(len(methods) for methods in ROUTES.values()) + 1  # and the spec
    anonymous = TestClient(http.app)  # type: ignore[arg-type]
    for method, route, path in walked:
        if route in TOKENLESS:
            continue
        answer = anonymous.request(method, path, json={})
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="remit"'
        assert "send an API token as `Authorization: Bearer rmt_...`" in answer.json()["error"]
    # The forge's webhook answers without a token: here, that the shop has no forge remote.
    webhook = anonymous.post("/forge/forge/events", json={})
    assert webhook.status_code == 404, webhook.text
    assert "the app has no forge remote `forge`" in webhook.json()["error"]
    assert shop.runs.list() == []


def test_a_start_sent_again_under_its_idempotency_key_is_one_run(
    shop: Harness, http: TestClient
) -> None:
    body = {"workflow": "nap", "input": {}}
    key = {"Idempotency-Key": "nap-1"}
    first = ok(http.post("/runs", json=body, headers=key), 201)
    again = ok(http.post("/runs", json=body, headers=key), 201)
    assert again["run_id"] == first["run_id"]
    refused(
        http.post("/runs", json={"workflow": "purchase", "input": {"sku": "sku-1"}}, headers=key),
        422,
        error=f"start key 'nap-1' was first used to start run {first['run_id']} of nap",
    )
    assert [run.run_id for run in shop.runs.list()] == [first["run_id"]]


def _console(path: str) -> bool:
    return path in ("/", "/console") or path.startswith("/console/")


def test_runs_are_started_listed_shown_with_their_steps_and_found_by_prefix(
    shop: Harness, http: TestClient
) -> None:
    started = ok(http.post("/runs", json={"workflow": "purchase", "input": {"sku": "sku-1"}}), 201)
    assert (started["workflow"], started["status"], started["started_by"]) == (
        "purchase",
        "queued",
        "user:ann",
    )
    assert started["input"] == {"sku": "sku-1", "quantity": 1, "email": "buyer@example.com"}
    run_id = started["run_id"]
    shop.wait(run_id)

    shown = ok(http.get(f"/runs/{run_id[:12]}"))
    assert (shown["run_id"], shown["status"], shown["attempt"]) == (run_id, "done", 1)
    assert shown["output"] == {"order_id": "ord_1", "total": 1200, "message_id": "msg_1"}
    assert shown["finished_at"].endswith("Z")

    steps = ok(http.get(f"/runs/{run_id}/steps"))
    assert [(s["attempt"], s["function_id"], s["error"], s["copied"]) for s in steps] == [
        (1, n, None, False) for n in range(1, len(steps) + 1)
    ]
    by_name = {step["name"]: step for step in steps}
    assert by_name["total"]["output"] == "1200"
    assert '"price": 1200' in next(s["output"] for s in steps if "shop.items.get" in s["name"])
    assert all(s["took_ms"] is not None and s["started_at"] for s in steps)

    other = ok(http.post("/runs", json={"workflow": "nap", "input": {}}), 201)
    shop.wait(other["run_id"], until=("sleeping",))
    listed = ok(http.get("/runs"))
    assert [r["run_id"] for r in listed] == [other["run_id"], run_id]
    assert [r["run_id"] for r in ok(http.get("/runs", params={"status": "done"}))] == [run_id]
    assert ok(http.get("/runs", params={"workflow": "nap", "limit": 1}))[0]["workflow"] == "nap"

    ambiguous = refused(http.get("/runs/run_"), 400, error="run `run_` is ambiguous")
    assert ambiguous == []
    assert run_id in http.get("/runs/run_").json()["error"]
    refused(http.get("/runs/run_nope"), 404, error="no run `run_nope`: GET /runs lists the runs")
    refused(http.get("/runs/run_nope/steps"), 404, error="GET /runs lists the runs")
    reasons = refused(
        http.post("/runs", json={"workflow": "purchase", "input": {"quantity": "many"}}),
        422,
        error="input to workflow `purchase` does not parse",
    )
    assert reasons == [
        "input.sku: Field required",
        "input.quantity: Input should be a valid integer, unable to parse string as an integer",
    ]
    refused(
        http.post("/runs", json={"workflow": "nope", "input": {}}),
        404,
        error="app `shop` has no workflow `nope`",
    )
    forged = refused(
        http.post("/runs", json={"workflow": "nap", "by": "user:carol"}),
        422,
        error="`by` is not a field of a start: the run is started as the principal of the "
        "request's API token; send only workflow, input",
    )
    assert len(forged) == 1
    refused(http.get("/runs", params={"limit": 1001}), 422, error="query parameter `limit`")
    # A query parameter the route does not take, or one sent twice, is not passed over.
    reasons = refused(
        http.get("/runs?stauts=done&limit=1&limit=2"),
        422,
        error="query parameter `stauts` is not one GET /runs takes: send only status, workflow, "
        "record, started_by, since, limit",
    )
    assert reasons[1] == "query parameter `limit` is given 2 times: give it once"
    # Nor is text no database field can hold.
    refused(
        http.post("/runs", json={"workflow": "nap\u0000"}),
        422,
        error="`workflow` holds a NUL character (\\u0000), which no text the database keeps",
    )
    refused(http.get("/runs/run_%00"), 422, error="path `run_id` holds a NUL character (%00)")


def test_runs_are_listed_by_record_starter_and_start_time(shop: Harness, http: TestClient) -> None:
    about = {"type": "invoice", "id": "inv_1003"}
    first = ok(http.post("/runs", json={"workflow": "nap", "input": {}, "record": about}), 201)
    other = ok(
        http.post("/runs", json={"workflow": "nap", "input": {}}, headers=bearer(shop, "user:bo")),
        201,
    )

    def listed(**params: str) -> list[str]:
        return [run["run_id"] for run in ok(http.get("/runs", params=params))]

    assert listed(record="invoice:inv_1003") == [first["run_id"]]
    assert listed(record="invoice:inv_9999") == []
    assert listed(started_by="user:bo") == [other["run_id"]]
    assert listed(since="1h") == [other["run_id"], first["run_id"]]
    assert listed(since=first["created_at"], started_by="user:ann") == [first["run_id"]]
    assert listed(since="2999-01-01") == []
    assert listed(since="2999-01-01T00:00+14:00") == []

    refused(
        http.get("/runs", params={"record": "inv_1003"}),
        422,
        error="record 'inv_1003' is not TYPE:ID: name the record as its type and id, e.g. "
        "invoice:inv_1003",
    )
    refused(
        http.get("/runs", params={"since": "yesterday"}),
        422,
        error="since 'yesterday' is not a time: give an ISO date or time (2026-12-01, "
        "2026-12-01T09:30, 2026-12-01T09:30+02:00; UTC unless it names a zone) or how long ago "
        "(30m, 2h, 3d, 1w)",
    )
    refused(
        http.get("/runs", params={"since": "999999w"}),
        422,
        error="since '999999w' is outside the years 1 to 9999",
    )


def test_a_run_is_cancelled_and_retried_once_per_key(shop: Harness, http: TestClient) -> None:
    run = shop.start("nap", {})
    shop.wait(run.run_id, until=("sleeping",))
    cancelled = ok(http.post(f"/runs/{run.run_id}/cancel"))
    assert (cancelled["run_id"], cancelled["status"]) == (run.run_id, "cancelled")
    assert ok(http.get("/audit", params={"target": run.run_id}))[-1]["actor"] == "user:ann"

    path = f"/runs/{run.run_id}/retry"
    first = ok(http.post(path, json={"from_step": 1}, headers={"Idempotency-Key": "again-1"}))
    assert first == {
        "run_id": run.run_id,
        "attempt": 2,
        "workflow_id": f"{run.run_id}:2",
        "from_step": 1,
        "replayed": False,
    }
    replayed = ok(http.post(path, json={"from_step": 1}, headers={"Idempotency-Key": "again-1"}))
    assert replayed == {**first, "replayed": True}
    assert shop.wait(run.run_id, until=("sleeping",)).attempt == 2

    done = shop.run("purchase", {"sku": "sku-2"})
    reasons = refused(
        http.post(f"/runs/{done.run_id}/retry"),
        409,
        error=f"run {done.run_id} is done: only a failed or cancelled run is retried",
    )
    assert len(reasons) == 1
    refused(
        http.post(path, json={"from_step": 0}),
        422,
        error="`from_step`: Input should be greater than or equal to 1",
    )
    refused(http.post(path, headers={"Idempotency-Key": " "}), 400, error="Idempotency-Key")
    refused(http.post("/runs/run_nope/cancel"), 404, error="no run `run_nope`")


def _waiting_refunds(harness: Harness, count: int) -> list[str]:
    runs = [harness.start("refund", {"sku": "sku-1", "quantity": n + 1}) for n in range(count)]
    return [harness.gate(run.run_id).id for run in runs]


def test_a_batch_decision_is_all_or_nothing_and_its_key_replays_only_itself(
    shop: Harness, http: TestClient
) -> None:
    first, second = _waiting_refunds(shop, 2)
    bob = bearer(shop, "user:bob")
    rejected = http.post(
        f"/approvals/{first}/decision",
        json={"decision": "rejected"},
        headers={"Idempotency-Key": "bob-1", **bob},
    )
    assert ok(rejected)["approval"]["decided_by"] == "user:bob"

    batch = {"ids": [first, second, "apr_nope"], "decision": "approved"}
    answer = http.post("/approvals/decisions", json=batch, headers={"Idempotency-Key": "all-1"})
    reasons = refused(answer, 409, error="decision refused, nothing was written")
    assert {(r["approval_id"], r["reason"]) for r in answer.json()["reasons"]} == {
        (first, "is already rejected by user:bob"),
        ("apr_nope", "is not an approval: `remit approvals` lists them"),
    }
    assert len(reasons) == 2
    assert shop.approvals.get(second).status == "pending"

    third, fourth = _waiting_refunds(shop, 2)
    batch = {
        "ids": [third, fourth],
        "decision": "approved",
        "edits": {third: {"note": "checked"}},
        "reason": "both fine",
    }
    decided = ok(http.post("/approvals/decisions", json=batch, headers={"Idempotency-Key": "b-1"}))
    assert decided["replayed"] is False
    assert [(a["id"], a["status"], a["decided_by"]) for a in decided["approvals"]] == [
        (third, "approved", "user:ann"),
        (fourth, "approved", "user:ann"),
    ]
    assert decided["approvals"][0]["edited_draft"]["note"] == "checked"
    assert {a["batch_id"] for a in decided["approvals"]} == {decided["batch_id"]}
    again = ok(http.post("/approvals/decisions", json=batch, headers={"Idempotency-Key": "b-1"}))
    assert again == {**decided, "replayed": True}
    other = {**batch, "reason": "another reason"}
    reused = refused(
        http.post("/approvals/decisions", json=other, headers={"Idempotency-Key": "b-1"}),
        422,
        error="decision key 'b-1' was first used to approve",
    )
    assert len(reused) == 1
    assert [a.status for a in shop.approvals.list(status="pending")] == ["pending"]

    bad = {"ids": [second], "decision": "approved", "edits": {second: {"quantity": "lots"}}}
    reasons = refused(
        http.post("/approvals/decisions", json=bad, headers={"Idempotency-Key": "b-2"}),
        422,
        error=f"the edits to approval {second} do not fit its draft (RefundDraft)",
    )
    assert reasons == [
        "edits.quantity: Input should be a valid integer, unable to parse string as an integer"
    ]
    stray = {"ids": [second], "decision": "approved", "edits": {third: {"note": "x"}}}
    refused(
        http.post("/approvals/decisions", json=stray, headers={"Idempotency-Key": "b-3"}),
        422,
        error=f"edits name {third}, which `ids` does not",
    )
    refused(
        http.post("/approvals/decisions", json={"ids": [second], "decision": "approved"}),
        400,
        error="send an Idempotency-Key header",
    )
    refused(
        http.post(
            "/approvals/decisions",
            json={"ids": [], "decision": "approved"},
            headers={"Idempotency-Key": "b-4"},
        ),
        422,
        error="`ids`: List should have at least 1 item",
    )
    assert shop.approvals.get(second).status == "pending"


def test_a_task_is_listed_shown_and_resolved_once_per_key(shop: Harness, http: TestClient) -> None:
    shop.fake("shop", FakeShop).failures[send_email.id] = [
        DriverError("mail relay timeout", retryable=True, status=504)
    ]
    run = shop.start("purchase", {"sku": "sku-1"})
    task = shop.task(run.run_id)

    listed = ok(http.get("/tasks", params={"status": "open", "run": run.run_id[:12]}))
    assert [(t["id"], t["op_id"], t["status"]) for t in listed] == [
        (task.id, "shop.emails.send", "open")
    ]
    assert ok(http.get("/tasks", params={"status": "done"})) == []
    shown = ok(http.get(f"/tasks/{task.id}"))
    assert (shown["run_id"], shown["audit"]) == (run.run_id, [])

    path = f"/tasks/{task.id}/resolution"
    sent = {"done": True, "output": {"message_id": "msg_by_hand"}}
    answer = ok(http.post(path, json=sent, headers={"Idempotency-Key": "t-1"}))
    assert (answer["replayed"], answer["then"]) == (False, "continue")
    assert answer["resumed_workflow_id"] == f"{run.run_id}:2"
    assert (answer["task"]["status"], answer["task"]["resolved_by"]) == ("done", "user:ann")
    assert ok(http.post(path, json=sent, headers={"Idempotency-Key": "t-1"}))["replayed"] is True
    refused(
        http.post(path, json={"done": False}, headers={"Idempotency-Key": "t-1"}),
        422,
        error="key 't-1' was first used to answer task",
    )
    reasons = refused(
        http.post(path, json={"done": False}, headers={"Idempotency-Key": "t-2"}),
        409,
        error=f"task {task.id} was not resolved, nothing was written",
    )
    assert reasons
    assert shop.wait(run.run_id).output["message_id"] == "msg_by_hand"
    audit = ok(http.get(f"/tasks/{task.id}"))["audit"]
    assert [(row["actor"], row["action"]) for row in audit] == [("user:ann", "task.done")]
    assert ok(http.get("/audit", params={"target": task.id})) == audit

    ledger = ok(http.get("/ledger", params={"run": run.run_id}))
    assert [(row["op_id"], row["status"]) for row in ledger][-1] == ("shop.emails.send", "ok")
    assert ledger[-1]["output"] == {"message_id": "msg_by_hand"}
    refused(http.get("/tasks/tsk_nope"), 404, error="no task `tsk_nope`: GET /tasks lists")
    refused(http.post("/tasks/tsk_nope/resolution", json={"done": True}), 404, error="no task")
    refused(http.get("/ledger", params={"run": "run_nope"}), 404, error="no run `run_nope`")


def test_records_deadlines_workers_and_controls(shop: Harness, http: TestClient) -> None:
    run = shop.start("nap", {})
    shop.wait(run.run_id, until=("sleeping",))
    [deadline] = ok(http.get("/deadlines"))
    assert (deadline["kind"], deadline["run_id"]) == ("wake", run.run_id)
    assert deadline["target"].startswith(f"{run.run_id}:")
    [worker] = ok(http.get("/workers"))
    assert (worker["state"], worker["executor_id"]) == ("live", shop.worker.executor_id)
    assert ok(http.get("/budgets")) == []  # the shop declares none
    refused(
        http.put("/budgets/app/limit", json={"limit": "10"}),
        404,
        error="app `shop` declares no budget for scope `app` (it has: none): GET /budgets lists",
    )
    refused(
        http.put("/budgets/app/limit", json={"limit": "-1"}),
        422,
        error="`limit`: Value error, '-1' is not an amount in USD: give a number, or a decimal "
        "string of at most 11 digits and 6 places, e.g. 75.50",
    )

    # A route that takes no body refuses one, rather than act as if it had not been sent.
    refused(
        http.post("/pause", json={"by": "user:ann", "dry_run": True}),
        422,
        error="POST /pause takes no body: send none",
    )
    refused(http.post("/resume", content=b"{}"), 422, error="POST /resume takes no body")
    refused(http.request("GET", "/budgets", content=b"x"), 422, error="GET /budgets takes no body")
    assert ok(http.get("/audit", params={"target": "app:shop"})) == []  # nothing was paused
    paused = ok(http.post("/pause"))
    assert paused["paused"] is True
    assert "shop:default" in paused["queues"]
    resumed = ok(http.post("/resume"))
    assert resumed["paused"] is False
    assert resumed["queues"] == paused["queues"]
    dry = ok(http.post("/reconcile", json={"dry_run": True}))
    assert (dry["dry_run"], dry["errors"]) == (True, [])
    assert ok(http.post("/reconcile"))["dry_run"] is False
    audit = ok(http.get("/audit", params={"target": "app:shop"}))
    assert [row["action"] for row in audit] == ["app.paused", "app.resumed", "app.reconciled"]
    assert ok(http.get("/audit", params={"target": "app:shop", "limit": 1}))[0]["action"] == (
        "app.reconciled"
    )
    refused(http.get("/audit"), 422, error="query parameter `target`: Field required")
    assert ok(http.get("/denials")) == []


def test_secrets_are_set_listed_and_deleted_and_never_shown(
    shop: Harness, http: TestClient
) -> None:
    assert ok(http.get("/secrets")) == []
    stored = ok(http.put("/secrets/SHOP_TOKEN", json={"value": "s3cret"}))
    assert (stored["name"], stored["set_by"]) == ("SHOP_TOKEN", "user:ann")
    listed = http.get("/secrets")
    assert [each["name"] for each in ok(listed)] == ["SHOP_TOKEN"]
    assert "s3cret" not in listed.text
    assert ok(http.delete("/secrets/SHOP_TOKEN")) == {"name": "SHOP_TOKEN", "deleted": True}
    refused(
        http.delete("/secrets/SHOP_TOKEN"),
        404,
        error="no secret `SHOP_TOKEN`: GET /secrets lists the secrets",
    )
    refused(
        http.put("/secrets/shop-token", json={"value": "x"}),
        400,
        error="'shop-token' cannot name a secret",
    )
    refused(
        http.put("/secrets/SHOP_TOKEN", json={"value": ""}),
        422,
        error="`value`: String should have at least 1 character",
    )
    actions = [
        row["action"] for row in ok(http.get("/audit", params={"target": "secret:SHOP_TOKEN"}))
    ]
    assert actions == ["secret.set", "secret.deleted"]


def test_a_direct_call_is_made_once_per_key(shop: Harness, http: TestClient) -> None:
    call = {"op": "shop.items.get", "input": {"sku": "sku-2"}}
    made = ok(http.post("/calls", json=call, headers={"Idempotency-Key": "c-1"}))
    assert made == {
        "status": "ok",
        "op": "shop.items.get",
        "idempotency_key": "direct:c-1",
        "output": {"sku": "sku-2", "price": 450},
        "error": None,
        "run_id": None,
        "note": "",
        "replayed": False,
    }
    again = ok(http.post("/calls", json=call, headers={"Idempotency-Key": "c-1"}))
    assert again == {**made, "replayed": True}
    assert shop.fake("shop", FakeShop).reads == 1
    refused(
        http.post(
            "/calls",
            json={"op": "shop.items.get", "input": {"sku": "sku-1"}},
            headers={"Idempotency-Key": "c-1"},
        ),
        400,
        error="was used for a call of other input",
    )
    failed = ok(http.post("/calls", json={"op": "shop.items.get", "input": {"sku": "nope"}}))
    assert (failed["status"], failed["error"]) == ("failed", "no item nope")
    refused(
        http.post("/calls", json={"op": "shop.items.get", "input": {}}),
        422,
        error="does not parse",
    )
    refused(
        http.post("/calls", json={"op": "shop.nope", "input": {}}),
        404,
        error="app `shop` has no op `shop.nope` (it has: remit.apps.list, shop.emails.send, shop.items.get, ",
    )


def test_tokens_are_made_listed_and_revoked(shop: Harness, http: TestClient) -> None:
    made = ok(http.post("/tokens", json={"for": "agent:bot", "name": "ci", "expires": "30d"}), 201)
    assert made["token"].startswith("rmt_")
    info = made["info"]
    assert (info["principal"], info["name"], info["state"], info["created_by"]) == (
        "agent:bot",
        "ci",
        "active",
        "user:ann",
    )
    assert info["expires_at"] is not None
    as_bot = {"Authorization": f"Bearer {made['token']}"}
    started = ok(http.post("/runs", json={"workflow": "nap"}, headers=as_bot), 201)
    assert started["started_by"] == "agent:bot"

    listed = ok(http.get("/tokens"))
    assert [t["principal"] for t in listed] == ["agent:bot", "user:ann"]
    assert made["token"] not in http.get("/tokens").text
    revoked = ok(http.delete(f"/tokens/{info['id']}"))
    assert (revoked["state"], revoked["revoked_by"]) == ("revoked", "user:ann")
    refused(http.get("/runs", headers=as_bot), 401, error="is revoked")
    refused(http.delete("/tokens/tok_nope"), 404, error="no token `tok_nope`: GET /tokens lists")
    refused(
        http.post("/tokens", json={"for": "agent:bot", "expires": "forever"}),
        422,
        error="`expires` 'forever' is not a duration a token may last",
    )
    refused(
        http.post("/tokens", json={"for": "remit:expiry"}),
        422,
        error="give who the token acts as: user:<name> or agent:<name>",
    )
    refused(
        http.post("/tokens", json={"for": "user:x", "by": "user:sam"}),
        422,
        error="`by` is not a field of a token: the token is made as the principal of the "
        "request's API token; send only for, name, expires",
    )


def test_the_policies_refuse_dave_every_act_and_record_each(
    desk: Harness, desk_http: TestClient
) -> None:
    dave = bearer(desk, "user:dave")
    run = desk.start("ar.write-off", WRITE_OFF, by="user:ann")
    desk.gate(run.run_id)
    for method, path, body, why in [
        ("POST", f"/runs/{run.run_id}/cancel", None, 'may not cancel Workflow::"ar.write-off"'),
        ("POST", "/pause", None, 'may not pause App::"acme"'),
        ("PUT", "/secrets/MAIL_FROM", {"value": "x"}, 'may not set_secret Secret::"MAIL_FROM"'),
        ("POST", "/runs", {"workflow": "ar.write-off", "input": WRITE_OFF}, "may not start"),
        ("GET", "/tokens", None, "may not manage_tokens"),
        ("PUT", "/budgets/app/limit", {"limit": 10}, "may not set_budget"),
    ]:
        answer = desk_http.request(method, path, json=body, headers=dave)
        refused(answer, 403, error=f"user:dave {why}")
    assert denied(desk) == sorted(
        [
            ("user:dave", "cancel", "ar.write-off"),
            ("user:dave", "pause", "acme"),
            ("user:dave", "set_secret", "MAIL_FROM"),
            ("user:dave", "start", "ar.write-off"),
            ("user:dave", "manage_tokens", "acme"),
            ("user:dave", "set_budget", "app"),
        ]
    )
    assert desk.runs.get(run.run_id).status == "waiting"
    carol = bearer(desk, "user:carol")
    listed = ok(desk_http.get("/denials", params={"limit": 2}, headers=carol))
    assert [row["principal"] for row in listed] == ["user:dave", "user:dave"]

    [period] = ok(desk_http.get("/budgets", headers=carol))
    assert (period["scope"], period["limit_usd"], period["drift_usd"]) == ("app", "5.00", "0.00")
    raised = ok(desk_http.put("/budgets/app/limit", json={"limit": "7.5"}, headers=carol))
    assert (raised["limit_usd"], raised["limit_set_by"]) == ("7.50", "user:carol")
    assert ok(desk_http.post(f"/runs/{run.run_id}/cancel", headers=carol))["status"] == "cancelled"
    sam = bearer(desk, "user:sam")
    assert ok(desk_http.put("/secrets/MAIL_FROM", json={"value": "x"}, headers=sam))["set_by"] == (
        "user:sam"
    )


def test_schedules_are_listed_paused_and_resumed(database_url: str) -> None:
    from tests.integration.test_schedules import scheduled_app

    with Harness(scheduled_app(), database_url=database_url) as clockwork:
        api = create_api(clockwork.client, allowed_hosts=["testserver"])
        with TestClient(api, headers=bearer(clockwork, "user:carol")) as http:
            [listed] = ok(http.get("/schedules"))
            assert (listed["workflow"], listed["cron"], listed["paused"]) == (
                "daily",
                "0 9 * * *",
                False,
            )
            paused = ok(http.post("/schedules/daily/pause"))
            assert (paused["paused"], paused["paused_by"], paused["next_at"]) == (
                True,
                "user:carol",
                None,
            )
            assert ok(http.get("/schedules")) == [paused]
            assert ok(http.get("/deadlines")) == []
            resumed = ok(http.post("/schedules/daily/resume"))
            assert (resumed["paused"], resumed["next_at"]) == (False, listed["next_at"])
            audit = ok(http.get("/audit", params={"target": "schedule:daily"}))
            assert [row["action"] for row in audit] == ["schedule.paused", "schedule.resumed"]
            refused(
                http.post("/schedules/weekly/pause"),
                404,
                error="`weekly` is no workflow of app `clockwork` (its scheduled workflows: daily)",
            )
            refused(http.post("/schedules/daily/pause", json={}), 422, error="takes no body")

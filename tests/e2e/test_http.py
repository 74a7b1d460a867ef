"""The HTTP API as a client sees it: status codes and JSON bodies, over a worker that really
resumes the run; and `remit serve` as a process a client reaches over the network."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient

from remit import App, ApprovalType
from remit.client import Client
from remit.core.settings import Settings
from remit.people.approvals import Approval
from remit.serve.api import create_api
from remit.testing import Harness
from tests.e2e.test_api_routes import ROUTES
from tests.support import RefundDraft, make_app, refund, shop

ROOT = Path(__file__).parent.parent.parent
# Nothing listens on port 1.
DOWN = "postgresql://postgres@127.0.0.1:1/remit"


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    with Harness(make_app(), database_url=database_url) as running:
        yield running


@pytest.fixture
def client(harness: Harness) -> Iterator[TestClient]:
    """The API over the harness's app, called as ann (with her API token) unless a request
    says otherwise."""
    api = create_api(harness.client, allowed_hosts=["testserver"])
    with TestClient(api, headers=bearer(harness, "user:ann")) as http:
        yield http


def bearer(harness: Harness, principal: str) -> dict[str, str]:
    """The `Authorization` header of a new API token for `principal`."""
    _, token = harness.client.services.tokens.create(principal, by="user:admin")
    return {"Authorization": f"Bearer {token}"}


def waiting_refund(harness: Harness, quantity: int = 2) -> Approval:
    run = harness.start("refund", {"sku": "sku-1", "quantity": quantity})
    return harness.gate(run.run_id)


def decide(
    client: TestClient,
    approval_id: str,
    body: Any,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    sent = {**(headers or {}), **({} if key is None else {"Idempotency-Key": key})}
    return client.post(f"/approvals/{approval_id}/decision", json=body, headers=sent)


def test_approve_with_edits_resumes_the_run_and_the_same_key_replays_it(
    harness: Harness, client: TestClient
) -> None:
    gate = waiting_refund(harness)

    pending = client.get("/approvals", params={"status": "pending"})
    assert pending.status_code == 200
    assert [(a["id"], a["status"]) for a in pending.json()] == [(gate.id, "pending")]
    assert pending.json()[0]["draft"] == {"sku": "sku-1", "quantity": 2, "note": ""}
    assert [a["id"] for a in client.get("/approvals", params={"run": gate.run_id}).json()] == [
        gate.id
    ]

    body = {"decision": "approved", "edits": {"quantity": 1}, "reason": "one"}
    first = decide(client, gate.id, body, key="ann-1")
    assert first.status_code == 200, first.text
    decided = first.json()
    assert decided["replayed"] is False
    approval = decided["approval"]
    assert approval["status"] == "approved"
    assert (approval["decided_by"], approval["decided_via"]) == ("user:ann", "http")
    assert approval["edited_draft"] == {"sku": "sku-1", "quantity": 1, "note": ""}
    assert approval["reason"] == "one"
    assert approval["resumed_workflow_id"] == f"{gate.run_id}:2"

    run = harness.wait(gate.run_id)
    assert run.status == "done"
    assert run.output == {"status": "approved", "order_id": "ord_1", "quantity": 1}

    again = decide(client, gate.id, body, key="ann-1")
    assert again.status_code == 200
    assert again.json() == {**decided, "replayed": True}
    # The key names that one request: sent with another body it is refused (422), naming it.
    other = decide(client, gate.id, {**body, "edits": {"quantity": 2}}, key="ann-1")
    assert other.status_code == 422, other.text
    assert (
        f"'ann-1' was first used to approve {gate.id} with edits as user:ann"
        in (other.json()["error"])
    )
    assert len(harness.approvals.audit(gate.id)) == 1
    assert harness.runs.get(gate.run_id).attempt == 2

    shown = client.get(f"/approvals/{gate.id}")
    assert shown.status_code == 200
    assert shown.json()["status"] == "approved"
    assert [(row["actor"], row["action"]) for row in shown.json()["audit"]] == [
        ("user:ann", "approval.approved")
    ]
    assert shown.json()["audit"][0]["meta"]["via"] == "http"


def test_reject_resumes_the_run_with_the_rejection(harness: Harness, client: TestClient) -> None:
    gate = waiting_refund(harness)
    bob = bearer(harness, "user:bob")
    response = decide(
        client, gate.id, {"decision": "rejected", "reason": "no"}, key="b", headers=bob
    )
    assert response.status_code == 200, response.text
    assert response.json()["approval"]["status"] == "rejected"
    run = harness.wait(gate.run_id)
    assert (run.status, run.output) == ("done", {"status": "rejected", "by": "user:bob"})


def test_an_unknown_approval_is_404(client: TestClient) -> None:
    shown = client.get("/approvals/apr_nope")
    assert shown.status_code == 404
    assert "no approval `apr_nope`" in shown.json()["error"]
    assert shown.json()["reasons"][0]["approval_id"] == "apr_nope"
    decided = decide(client, "apr_nope", {"decision": "approved"}, key="k")
    assert decided.status_code == 404
    assert "GET /approvals lists the approvals" in decided.json()["error"]


def test_deciding_a_decided_approval_is_409_with_every_reason(
    harness: Harness, client: TestClient
) -> None:
    gate = waiting_refund(harness)
    bob = bearer(harness, "user:bob")
    rejected = decide(client, gate.id, {"decision": "rejected"}, key="bob-1", headers=bob)
    assert rejected.status_code == 200
    response = decide(client, gate.id, {"decision": "approved"}, key="ann-1")
    assert response.status_code == 409
    assert "nothing was written" in response.json()["error"]
    assert response.json()["reasons"] == [
        {"approval_id": gate.id, "reason": "is already rejected by user:bob"}
    ]
    assert len(harness.approvals.audit(gate.id)) == 1
    assert harness.wait(gate.run_id).output == {"status": "rejected", "by": "user:bob"}

    other = waiting_refund(harness, quantity=3)
    reused = decide(client, other.id, {"decision": "approved"}, key="bob-1", headers=bob)
    assert reused.status_code == 422
    assert (
        f"decision key 'bob-1' was first used to reject {gate.id} as user:bob"
        in (reused.json()["reasons"][0]["reason"])
    )
    assert harness.approvals.get(other.id).status == "pending"


@pytest.mark.parametrize("key", [None, "   ", "k" * 201])
def test_a_decision_without_a_usable_idempotency_key_is_400(
    harness: Harness, client: TestClient, key: str | None
) -> None:
    gate = waiting_refund(harness)
    response = decide(client, gate.id, {"decision": "approved"}, key=key)
    assert response.status_code == 400
    assert "send an Idempotency-Key header" in response.json()["error"]
    assert harness.approvals.get(gate.id).status == "pending"


BAD_DECISIONS: list[tuple[Any, str]] = [
    ({"decision": "maybe"}, "`decision`: Input should be 'approved' or"),
    (
        {"decision": "approved", "by": "user:carol"},
        "`by` is not a field of a decision: the decision is made as the principal of the "
        "request's API token",
    ),
    ({"decision": "approved", "edit": {}}, "`edit` is not a field"),
    ({"decision": "approved", "edits": [1]}, "`edits`: Input should be a"),
    ("approve it", "Input should be a valid dictionary or object"),
    (
        {"decision": "rejected", "edits": {"quantity": 1}},
        "edits go with an approval, not a decision of 'rejected'",
    ),
    (
        {"decision": "approved", "edits": {"quantity": "lots"}},
        "edits.quantity: Input should be a valid integer",
    ),
    (
        {"decision": "approved", "edits": {"quantiy": 1}},
        "edits.quantiy: RefundDraft has no field `quantiy` (its fields: sku, quantity, note)",
    ),
]


def test_a_malformed_decision_is_422_naming_the_field_and_decides_nothing(
    harness: Harness, client: TestClient
) -> None:
    gate = waiting_refund(harness)
    for body, reason in BAD_DECISIONS:
        response = decide(client, gate.id, body, key=uuid.uuid4().hex)
        assert response.status_code == 422, (body, response.text)
        reasons = [r["reason"] for r in response.json()["reasons"]]
        assert any(reason in r for r in reasons), (body, reasons)
        assert reason in response.json()["error"]
        assert {r["approval_id"] for r in response.json()["reasons"]} == {gate.id}

    not_json = client.post(
        f"/approvals/{gate.id}/decision",
        content=b"{approved",
        headers={"Idempotency-Key": "raw", "Content-Type": "application/json"},
    )
    assert not_json.status_code == 422
    assert "the body is not valid JSON" in not_json.json()["error"]

    assert harness.approvals.get(gate.id).status == "pending"
    assert harness.approvals.audit(gate.id) == []
    assert harness.runs.get(gate.run_id).status == "waiting"


def test_an_edit_to_a_field_the_type_keeps_is_422_and_the_view_says_what_may_change(
    database_url: str,
) -> None:
    kept = ApprovalType("refund", draft=RefundDraft, editable=["quantity"])
    app = App(name="shop", workflows=[refund], connectors=[shop], approvals=[kept])
    with Harness(app, database_url=database_url) as harness:
        api = create_api(harness.client, allowed_hosts=["testserver"])
        with TestClient(api, headers=bearer(harness, "user:ann")) as client:
            gate = waiting_refund(harness)
            shown = client.get(f"/approvals/{gate.id}").json()
            assert shown["editable"] == ["quantity"]
            listed = client.get("/approvals", params={"status": "pending"}).json()
            assert [a["editable"] for a in listed] == [["quantity"]]

            body = {"decision": "approved", "edits": {"sku": "sku-9", "quantity": 1}}
            refused = decide(client, gate.id, body, key="ann-kept")
            assert refused.status_code == 422, refused.text
            reason = (
                "edits.sku: changing sku, which approval type `refund` keeps as the run "
                "proposed it: a decider may change only quantity"
            )
            assert [r["reason"] for r in refused.json()["reasons"]] == [reason]
            assert reason in refused.json()["error"]
            assert harness.approvals.get(gate.id).status == "pending"
            assert harness.approvals.audit(gate.id) == []

            done = decide(client, gate.id, {**body, "edits": {"quantity": 1}}, key="ann-ok")
            assert done.status_code == 200, done.text
            approval = done.json()["approval"]
            assert approval["edited_draft"] == {"sku": "sku-1", "quantity": 1, "note": ""}
            assert approval["editable"] == ["quantity"]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"status": "bogus"}, "query parameter `status`: Input should be 'pending', 'approved'"),
        ({"limit": "0"}, "query parameter `limit`: Input should be greater than or equal to 1"),
        ({"limit": "1001"}, "query parameter `limit`: Input should be less than or equal to 1000"),
        ({"limit": "all"}, "query parameter `limit`: Input should be a valid integer"),
    ],
)
def test_a_bad_query_is_422_naming_the_parameter(
    client: TestClient, params: dict[str, str], reason: str
) -> None:
    response = client.get("/approvals", params=params)
    assert response.status_code == 422
    [only] = response.json()["reasons"]
    assert only["approval_id"] is None
    assert only["reason"].startswith(reason)
    assert reason in response.json()["error"]


def test_health_routes_and_the_openapi_spec(client: TestClient) -> None:
    assert client.get("/health").json() == {"ok": True}
    missing = client.get("/approval")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": "GET /approval is not a route of this API: GET /openapi.json lists the routes",
        "reasons": [],
    }
    assert client.delete("/approvals").status_code == 405

    spec = client.get("/openapi.json").json()
    assert {path: sorted(spec["paths"][path]) for path in spec["paths"]} == ROUTES
    decision = spec["paths"]["/approvals/{approval_id}/decision"]["post"]
    assert decision["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DecisionRequest"
    }
    header = next(p for p in decision["parameters"] if p["in"] == "header")
    assert (header["name"], header["required"]) == ("Idempotency-Key", True)
    for status in ("400", "401", "403", "404", "409", "422", "503"):
        schema = decision["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, status
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_remit_serve_answers_over_http_and_stops_on_sigterm(
    database_url: str, tmp_path: Path
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        gate = waiting_refund(harness)
        ann = bearer(harness, "user:ann")
    folder = tmp_path / "shop_app"
    folder.mkdir()
    (folder / "app.py").write_text("from tests.support import make_app\n\napp = make_app()\n")
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "REMIT_DATABASE_URL": database_url,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",
    }
    with log.open("w") as out:
        serving = subprocess.Popen(
            [sys.executable, "-m", "remit", "serve", "--app", str(folder), "--port", "0"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = _wait_listening(serving, log)
        with httpx.Client(base_url=url, timeout=5) as http:
            _wait_healthy(http, serving, log)
            assert http.get("/approvals").status_code == 401
            listed = http.get("/approvals", params={"status": "pending"}, headers=ann)
            assert listed.status_code == 200
            assert [a["id"] for a in listed.json()] == [gate.id]
            decided = http.post(
                f"/approvals/{gate.id}/decision",
                json={"decision": "approved"},
                headers={"Idempotency-Key": "over-the-wire", **ann},
            )
            assert decided.status_code == 200, decided.text
            assert decided.json()["approval"]["resumed_workflow_id"] == f"{gate.run_id}:2"
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(15) == 0, log.read_text()
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait(10)
    printed = log.read_text()
    assert f"serving the API of shop on {url}" in printed
    assert "serve stopped" in printed
    assert "Traceback" not in printed


def _wait_listening(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 30
    while True:
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return found.group(1)
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def _wait_healthy(http: httpx.Client, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if http.get("/health").json() == {"ok": True}:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


def test_a_database_that_does_not_answer_is_503_with_a_reason(tmp_path: Path) -> None:
    # Nothing listens on port 1. Every route reads before it decides, so no DBOS client is
    # reached: the database's refusal is the whole story.
    down = Settings.from_env(tmp_path, environ={"REMIT_DATABASE_URL": DOWN})
    remit = Client(make_app(), down, prepare=False)
    api = create_api(remit, allowed_hosts=["testserver"])
    # A token of the right form: checking it is the first thing to reach the database.
    token = {"Authorization": f"Bearer rmt_{'0' * 12}_{'x' * 43}"}
    try:
        with TestClient(api, headers=token) as http:
            for response in (
                http.get("/health"),
                http.get("/approvals"),
                http.get("/approvals/apr_1"),
                decide(http, "apr_1", {"decision": "approved"}, key="k"),
            ):
                assert response.status_code == 503
                assert response.headers["Retry-After"] == "1"
                assert response.json() == {
                    "error": "the database did not answer: send the request again in a moment",
                    "reasons": [],
                }
    finally:
        remit.close()

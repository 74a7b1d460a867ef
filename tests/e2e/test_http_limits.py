"""Limits and NUL characters over HTTP, on SQLite and Postgres: a value past its cap is 413 (a
reason past its cap 422), text holding a NUL character 422 naming the field, an id holding one
404 or 422, never a 500; a body past `REMIT_MAX_BODY_BYTES` is 413 from a real `remit serve`
before it is read whole, sent with a length or in chunks; and an error quotes only an excerpt
of what was sent. Nothing is written by any refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from remit.serve.api import create_api
from remit.testing import Harness
from tests.e2e.test_http import ROOT, _wait_healthy, _wait_listening
from tests.limits_app import OVER_2_MIB, MiB, counts, fake, make_app


@pytest.fixture
def harness(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    monkeypatch.chdir(tmp_path)
    with Harness(make_app(), database_url=database_url) as running:
        yield running


def bearer(harness: Harness, principal: str = "user:ann") -> dict[str, str]:
    _, token = harness.client.services.tokens.create(principal, by="user:sam")
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def http(harness: Harness) -> Iterator[TestClient]:
    api = create_api(harness.client, allowed_hosts=["testserver"])
    with TestClient(api, headers=bearer(harness)) as client:
        yield client


def refused(response: Any, status: int, *, error: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "reasons"}
    assert error in body["error"], body
    return body


def gate(harness: Harness) -> str:
    run = harness.start("gate", {"text": "first"})
    return harness.gate(run.run_id).id


def test_a_run_input_past_its_cap_is_413_and_writes_nothing(
    harness: Harness, http: TestClient
) -> None:
    before = counts(harness)
    response = http.post("/runs", json={"workflow": "say", "input": {"text": OVER_2_MIB}})
    refused(
        response,
        413,
        error="the run's input is 2,097,173 bytes, over the 2 MiB limit (REMIT_MAX_INPUT_BYTES)",
    )
    assert counts(harness) == before


def test_a_nul_in_a_run_input_is_422_naming_the_field(harness: Harness, http: TestClient) -> None:
    before = counts(harness)
    response = http.post("/runs", json={"workflow": "say", "input": {"text": "a\x00b"}})
    refused(response, 422, error="NUL character")
    assert counts(harness) == before


def test_an_unknown_run_input_field_is_422_naming_it(harness: Harness, http: TestClient) -> None:
    before = counts(harness)
    response = http.post("/runs", json={"workflow": "say", "input": {"text": "a", "txet": 1}})
    refused(response, 422, error="Say has no field `txet` (its fields: text)")
    assert counts(harness) == before


def test_a_direct_call_past_its_cap_is_413_and_calls_nothing(
    harness: Harness, http: TestClient
) -> None:
    before = counts(harness)
    response = http.post("/calls", json={"op": "box.echo.say", "input": {"text": OVER_2_MIB}})
    refused(response, 413, error="the input to `box.echo.say` is 2,097,173 bytes")
    assert counts(harness) == before
    assert fake(harness).calls == []


def test_a_collection_record_with_a_nul_is_422_not_a_traceback(
    harness: Harness, http: TestClient
) -> None:
    before = counts(harness)
    response = http.post(
        "/calls", json={"op": "data.people.put", "input": {"id": "p1", "email": "nul\x00@x"}}
    )
    refused(response, 422, error="NUL character")
    assert counts(harness) == before


def test_edits_past_the_draft_cap_are_413_and_decide_nothing(
    harness: Harness, http: TestClient
) -> None:
    approval_id = gate(harness)
    before = counts(harness)
    response = http.post(
        f"/approvals/{approval_id}/decision",
        json={"decision": "approved", "edits": {"note": "x" * 300_000}},
        headers={"Idempotency-Key": "k1"},
    )
    refused(
        response,
        413,
        error=f"the edits to approval {approval_id} is 293 KiB, over the 256 KiB limit "
        "(REMIT_MAX_DRAFT_BYTES)",
    )
    assert harness.approvals.get(approval_id).status == "pending"
    assert counts(harness) == before


def test_a_reason_past_its_cap_is_422(harness: Harness, http: TestClient) -> None:
    approval_id = gate(harness)
    response = http.post(
        f"/approvals/{approval_id}/decision",
        json={"decision": "rejected", "reason": "r" * 4001},
        headers={"Idempotency-Key": "k1"},
    )
    refused(response, 422, error="the decision's reason is 4,001 characters, over the 4,000")
    assert harness.approvals.get(approval_id).status == "pending"


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "rejected", "reason": "a\x00b"},
        {"decision": "approved", "edits": {"note": "a\x00b"}},
    ],
)
def test_a_nul_in_a_reason_or_an_edit_is_422(
    harness: Harness, http: TestClient, body: dict[str, Any]
) -> None:
    approval_id = gate(harness)
    before = counts(harness)
    response = http.post(
        f"/approvals/{approval_id}/decision", json=body, headers={"Idempotency-Key": "k1"}
    )
    refused(response, 422, error="NUL character")
    assert harness.approvals.get(approval_id).status == "pending"
    assert counts(harness) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/approvals/%00"),
        ("get", "/approvals/apr_%00x"),
        ("post", "/approvals/%00/decision"),
        ("get", "/runs/%00"),
        ("get", "/tasks/%00"),
        ("post", "/tasks/%00/resolution"),
        ("get", "/records/invoice/%00/activity"),
    ],
)
def test_a_nul_in_a_path_is_a_json_error_not_a_500(
    http: TestClient, method: str, path: str
) -> None:
    body = {"decision": "approved"} if "decision" in path else {"done": False}
    headers = {"Idempotency-Key": "k1"}
    response = http.get(path) if method == "get" else http.post(path, json=body, headers=headers)
    assert response.status_code in (404, 422), response.text
    assert set(response.json()) == {"error", "reasons"}


def test_a_task_answer_with_a_nul_or_past_its_cap_is_refused(
    harness: Harness, http: TestClient
) -> None:
    fake(harness).lost = True
    run = harness.start("mail-out", {})
    task = harness.task(run.run_id)
    before = counts(harness)
    nul = http.post(
        f"/tasks/{task.id}/resolution", json={"done": True, "output": {"message_id": "m\x00"}}
    )
    refused(nul, 422, error="NUL character")
    big = http.post(
        f"/tasks/{task.id}/resolution", json={"done": True, "output": {"message_id": OVER_2_MIB}}
    )
    refused(big, 413, error="over the 2 MiB limit (REMIT_MAX_OP_BYTES)")
    assert harness.tasks.get(task.id).status == "open"
    assert counts(harness) == before


@pytest.mark.parametrize("route", ["/runs", "/approvals", "/tasks", "/ledger", "/denials"])
@pytest.mark.parametrize("limit", ["0", "-5"])
def test_a_limit_below_one_is_422_naming_it(http: TestClient, route: str, limit: str) -> None:
    body = refused(http.get(route, params={"limit": limit}), 422, error="`limit`")
    assert len(body["reasons"]) == 1


def test_a_twenty_thousand_field_edit_gets_a_small_error(
    harness: Harness, http: TestClient
) -> None:
    approval_id = gate(harness)
    edits = {f"f{n}": 1 for n in range(20_000)}  # under the draft's cap, every field unknown
    response = http.post(
        f"/approvals/{approval_id}/decision",
        json={"decision": "approved", "edits": edits},
        headers={"Idempotency-Key": "k1"},
    )
    body = refused(response, 422, error="NoteDraft has no field `f0`")
    assert len(response.content) < 8_000
    assert len(body["reasons"]) == 20
    assert "and 19,980 more" in body["error"]


def test_a_run_input_that_does_not_parse_quotes_an_excerpt(
    harness: Harness, http: TestClient
) -> None:
    response = http.post("/runs", json={"workflow": "say", "input": {"text": ["y" * 1_000_000]}})
    refused(response, 422, error="input to workflow `say` does not parse: text")
    assert len(response.content) < 2_000


def test_the_spec_lists_413_where_a_body_is_taken(http: TestClient) -> None:
    spec = http.get("/openapi.json").json()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if method in ("post", "put"):
                assert "413" in operation["responses"], (method, path)


# A real server.


@pytest.fixture
def served(harness: Harness, database_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`remit serve` over the limits app, as a process: its URL and its log (and, in the log's
    folder, `pid`, its process id)."""
    folder = tmp_path / "limits_app"
    folder.mkdir()
    (folder / "app.py").write_text("from tests.limits_app import make_app\n\napp = make_app()\n")
    log = tmp_path / "serve.log"
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env = {**os.environ, "REMIT_DATABASE_URL": database_url, "PYTHONPATH": path}
    with log.open("w") as out:
        serving = subprocess.Popen(
            [sys.executable, "-m", "remit", "serve", "--app", str(folder), "--port", "0"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = _wait_listening(serving, log)
        with httpx.Client(base_url=url, timeout=10) as client:
            _wait_healthy(client, serving, log)
        (tmp_path / "pid").write_text(str(serving.pid))
        yield url, log
    finally:
        serving.terminate()
        serving.wait(15)


def test_a_five_megabyte_body_is_413_before_it_is_read(
    harness: Harness, served: tuple[str, Path]
) -> None:
    url, log = served
    before = counts(harness)
    body = b'{"workflow": "say", "input": {"text": "' + b"x" * (5 * MiB) + b'"}}'
    with httpx.Client(base_url=url, timeout=30, headers=bearer(harness)) as client:
        response = client.post("/runs", content=body, headers={"Content-Type": "application/json"})
    refused(
        response,
        413,
        error="the request body is 5 MiB, over the 4 MiB limit (REMIT_MAX_BODY_BYTES)",
    )
    assert counts(harness) == before
    assert "Traceback" not in log.read_text()


def test_a_chunked_body_past_the_cap_is_413(harness: Harness, served: tuple[str, Path]) -> None:
    url, log = served
    before = counts(harness)

    def chunks() -> Iterator[bytes]:
        yield b'{"workflow": "say", "input": {"text": "'
        for _ in range(6):
            yield b"x" * MiB
        yield b'"}}'

    with httpx.Client(base_url=url, timeout=30, headers=bearer(harness)) as client:
        response = client.post(
            "/runs", content=chunks(), headers={"Content-Type": "application/json"}
        )
    assert "content-length" not in response.request.headers
    refused(response, 413, error="over the 4 MiB limit (REMIT_MAX_BODY_BYTES)")
    assert counts(harness) == before
    assert "Traceback" not in log.read_text()


def test_a_body_under_the_cap_is_served(harness: Harness, served: tuple[str, Path]) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=30, headers=bearer(harness)) as client:
        response = client.post("/runs", json={"workflow": "say", "input": {"text": "x" * MiB}})
    assert response.status_code == 201, response.text


def resident_mb(pid: int) -> float:
    """The resident memory of process `pid`, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def test_a_fifty_megabyte_body_does_not_grow_the_server(
    harness: Harness, served: tuple[str, Path]
) -> None:
    url, log = served
    pid = int((log.parent / "pid").read_text())
    body = b'{"workflow": "say", "input": {"text": "' + b"x" * (50 * MiB) + b'"}}'
    with httpx.Client(base_url=url, timeout=60, headers=bearer(harness)) as client:
        client.get("/runs")  # the routes' first use, before measuring
        before = resident_mb(pid)
        response = client.post("/runs", content=body, headers={"Content-Type": "application/json"})
        after = resident_mb(pid)
    refused(response, 413, error="the request body is 50 MiB, over the 4 MiB limit")
    assert after - before < 20, (before, after)

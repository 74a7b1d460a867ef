"""Withdrawing a gate from each surface: `POST /approvals/{id}/withdraw` (and the remote client
over it), and `remit approvals withdraw ID` on the example desk, whose policies let whoever
started a run withdraw its gates. Someone who neither started the run nor is an admin is
refused with 409 (exit 1), naming who may, as is a gate no longer pending, naming why; nothing is
written either way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remit import RemitError
from remit.core.runs import RunStore
from remit.remote import RemoteClient
from remit.serve.api import create_api
from remit.testing import Harness
from tests.e2e.cli_support import Cli
from tests.integration.test_approvals_withdraw import desk_app


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    with Harness(desk_app(tmp_path), database_url=database_url, actor="user:ann") as running:
        yield running


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as http:
        yield http


def bearer(harness: Harness, principal: str) -> dict[str, str]:
    _, token = harness.client.services.tokens.create(principal, by="user:admin")
    return {"Authorization": f"Bearer {token}"}


def test_the_api_withdraws_for_the_requester_only_and_once(
    harness: Harness, api: TestClient
) -> None:
    ann, bob = bearer(harness, "user:ann"), bearer(harness, "user:bob")
    run = harness.start("errand", {"sku": "sku-1"})
    gate = harness.gate(run.run_id)
    path = f"/approvals/{gate.id}/withdraw"

    refused = api.post(path, json={"reason": "mine now"}, headers=bob)
    assert refused.status_code == 409, refused.text
    assert refused.json()["reasons"] == [
        {
            "approval_id": gate.id,
            "reason": f"was asked for by user:ann, who started run {run.run_id}: only they or "
            "an admin (REMIT_ADMINS) may withdraw it, not user:bob",
        }
    ]
    assert harness.approvals.get(gate.id).status == "pending"

    sent = {**ann, "Idempotency-Key": "ann-w1"}
    first = api.post(path, json={"reason": "asked by mistake"}, headers=sent)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["replayed"] is False
    approval = body["approval"]
    assert (approval["status"], approval["decided_by"], approval["decided_via"]) == (
        "withdrawn",
        "user:ann",
        "http",
    )
    assert approval["reason"] == "asked by mistake"
    assert approval["resumed_workflow_id"] == f"{run.run_id}:2"
    again = api.post(path, json={"reason": "asked by mistake"}, headers=sent)
    assert again.json() == {**body, "replayed": True}
    assert harness.wait(run.run_id).output == {
        "branch": "withdrawn",
        "by": "user:ann",
        "reason": "asked by mistake",
    }

    # Withdrawn, it is decided by no one: 409, saying so.
    decided = api.post(
        f"/approvals/{gate.id}/decision",
        json={"decision": "approved"},
        headers={**bob, "Idempotency-Key": "bob-1"},
    )
    assert decided.status_code == 409, decided.text
    assert decided.json()["reasons"] == [
        {"approval_id": gate.id, "reason": "is already withdrawn by user:ann"}
    ]
    # A body is optional; withdrawn already, it is 409 too.
    twice = api.post(path, headers=ann)
    assert twice.status_code == 409
    assert twice.json()["error"] == (
        f"withdrawal refused, nothing was written: {gate.id} is already withdrawn by user:ann"
    )
    assert api.post("/approvals/apr_nope/withdraw", headers=ann).status_code == 404
    shown = api.get(f"/approvals/{gate.id}", headers=ann).json()
    assert [row["action"] for row in shown["audit"]] == ["approval.withdrawn"]


def test_the_remote_client_withdraws_through_the_api(harness: Harness, api: TestClient) -> None:
    def remote(principal: str) -> RemoteClient:
        made = RemoteClient("http://testserver", "unused")
        made._http.close()
        made._http = api  # its requests to the API in this process
        api.headers.update(bearer(harness, principal))
        return made

    run = harness.start("errand", {"sku": "sku-1"})
    gate = harness.gate(run.run_id)
    with pytest.raises(RemitError, match=r"only they or an admin .* not user:bob"):
        remote("user:bob").approvals.withdraw(gate.id)
    withdrawn = remote("user:ann").approvals.withdraw(gate.id, key="r-1", reason="not needed")
    assert not withdrawn.replayed
    assert [(d.approval_id, d.status, d.resumed_workflow_id) for d in withdrawn.decided] == [
        (gate.id, "withdrawn", f"{run.run_id}:2")
    ]
    assert remote("user:ann").approvals.withdraw(gate.id, key="r-1", reason="not needed").replayed
    with pytest.raises(RemitError, match="is already withdrawn by user:ann"):
        remote("user:ann").approvals.withdraw(gate.id)


def test_remit_approvals_withdraw_on_the_example_desk(cli: Cli) -> None:
    cli.worker()
    run_id = cli("start", "ar.write-off", "--input", '{"invoice_id": "inv_1003"}').stdout.strip()
    approval = cli.pending_approvals(run_id)[0]

    # Carol decides write-offs, but did not ask for this one.
    refused = cli("approvals", "withdraw", approval, "--as", "user:carol", check=False)
    assert refused.returncode == 1
    assert (
        f"{approval} was asked for by user:ann, who started run {run_id}: only they or an "
        "admin (REMIT_ADMINS) may withdraw it, not user:carol"
    ) in " ".join(refused.stderr.split())

    done = cli("approvals", "withdraw", approval[:12], "--reason", "paid after all")
    assert f"{approval} withdrawn by user:ann" in done.stdout
    assert f"resumes on attempt {run_id}:2" in done.stdout
    cli.wait_for(run_id, "done")
    output = RunStore(cli.db).get(run_id).output
    assert output is not None
    assert output["outcome"] == "not written off (withdrawn)"

    late = cli("approve", approval, "--as", "user:carol", check=False)
    assert late.returncode == 1
    assert f"{approval} is already withdrawn by user:ann" in late.stderr

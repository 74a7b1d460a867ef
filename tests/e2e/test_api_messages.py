"""The HTTP API of runs that wait for the world: `POST /runs/{id}/messages` sends one a message
(the policy action `send`), `GET /runs/{id}/messages`, `/state` and `/children` read what it was
sent, published and started, `GET /runs/{id}` says what started it and what it waits for, and
`GET /runs?parent=` lists a run's children; each read as the policies allow (`read_runs`).
Driven over HTTP (starlette's TestClient on `create_api`), as the token's principal."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit.core.schema import audit, denials
from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import policies_in
from tests.waits_app import FakeShop, make_waits_app

# carol may do anything; ann reads the parents' runs (not the refund lines) and sends only
# payments; dave reads everything and sends nothing.
POLICIES = """
permit (principal == User::"carol", action, resource);
permit (principal == User::"ann", action == Action::"read_runs", resource == Workflow::"credit-note");
permit (principal == User::"ann", action == Action::"read_runs", resource == Workflow::"await-payment");
permit (principal == User::"ann", action == Action::"send", resource == Workflow::"await-payment")
when { context.topic == "paid" };
permit (principal == User::"dave", action == Action::"read_runs", resource);
"""
PAID = {"amount": "120.00", "reference": "pi_1"}


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    policies = policies_in(tmp_path, POLICIES)
    with Harness(
        make_waits_app(), database_url=database_url, actor="user:carol", policies=policies
    ) as running:
        yield running


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    """The API, with no token unless a request sends one (`as_` gives one)."""
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def as_(harness: Harness, principal: str) -> dict[str, str]:
    _, token = harness.client.services.tokens.create(principal, by="user:carol")
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def refused(response: Any, status: int, *, error: str) -> list[str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "reasons"}
    assert error in body["error"], body
    return [reason["reason"] for reason in body["reasons"]]


def waiting_for_payment(harness: Harness, **input: Any) -> str:
    run = harness.start("await-payment", input)
    harness.wait(run.run_id, until=("waiting",))
    harness.wait_attempt_ended(run.run_id, 1)
    return run.run_id


def test_a_message_moves_a_waiting_run_on_and_its_key_replays_it(
    harness: Harness, api: TestClient
) -> None:
    ann = as_(harness, "user:ann")
    run_id = waiting_for_payment(harness, timeout=3600)

    shown = ok(api.get(f"/runs/{run_id[:10]}", headers=ann))
    assert shown["parent"] is None
    [wait] = shown["waiting"]
    assert (wait["kind"], wait["topic"], wait["children"], wait["step_id"]) == (
        "message",
        "paid",
        [],
        2,
    )
    since, deadline = (datetime.fromisoformat(wait[name]) for name in ("since", "deadline"))
    assert 3590 <= (deadline - since).total_seconds() <= 3610

    sent = ok(
        api.post(
            f"/runs/{run_id}/messages",
            json={"topic": "paid", "payload": PAID},
            headers={**ann, "Idempotency-Key": "pay-pi_1"},
        ),
        201,
    )
    assert sent == {
        "seq": sent["seq"],
        "run_id": run_id,
        "topic": "paid",
        "resumed_workflow_id": f"{run_id}:2",
        "replayed": False,
    }
    done = harness.wait(run_id)
    assert done.status == "done", done.error
    assert done.output == {"paid": "120.00", "reference": "pi_1", "order": "ord_1"}
    assert harness.fake("shop", FakeShop).orders == 1

    # Sent again under its key, in the header or in the body: the first send, nothing more.
    again = {"topic": "paid", "payload": PAID}
    replayed = ok(
        api.post(
            f"/runs/{run_id}/messages", json=again, headers={**ann, "Idempotency-Key": "pay-pi_1"}
        ),
        201,
    )
    assert (replayed["seq"], replayed["replayed"]) == (sent["seq"], True)
    in_body = ok(
        api.post(f"/runs/{run_id}/messages", json={**again, "key": "pay-pi_1"}, headers=ann), 201
    )
    assert (in_body["seq"], in_body["replayed"]) == (sent["seq"], True)

    [message] = ok(api.get(f"/runs/{run_id}/messages", headers=ann))
    assert {k: message[k] for k in ("seq", "topic", "payload", "key", "sent_by", "status")} == {
        "seq": sent["seq"],
        "topic": "paid",
        "payload": PAID,
        "key": "pay-pi_1",
        "sent_by": "user:ann",
        "status": "taken",
    }
    assert message["step_id"] == 2
    assert message["error"] is None
    assert ok(api.get(f"/runs/{run_id}", headers=ann))["waiting"] == []
    with harness.client.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit.c.action, audit.c.actor, audit.c.meta).where(audit.c.target == run_id)
        ).all()
    assert [(row.action, row.actor) for row in rows if row.action == "run.message"] == [
        ("run.message", "user:ann")
    ]


def test_a_message_the_run_does_not_wait_for_yet_is_kept_and_not_moved_on(
    harness: Harness, api: TestClient
) -> None:
    carol = as_(harness, "user:carol")
    run = harness.start("collect", {"count": 2})
    harness.wait(run.run_id, until=("waiting",))
    harness.wait_attempt_ended(run.run_id, 1)
    other = ok(
        api.post(
            f"/runs/{run.run_id}/messages", json={"topic": "other", "payload": "x"}, headers=carol
        ),
        201,
    )
    assert (other["resumed_workflow_id"], other["replayed"]) == (None, False)
    assert harness.client.runs.get(run.run_id).status == "waiting"
    # No payload is a message of null.
    ok(api.post(f"/runs/{run.run_id}/messages", json={"topic": "item"}, headers=carol), 201)
    ok(
        api.post(
            f"/runs/{run.run_id}/messages", json={"topic": "item", "payload": [1]}, headers=carol
        ),
        201,
    )
    assert harness.wait(run.run_id).output == [None, [1]]
    listed = ok(api.get(f"/runs/{run.run_id}/messages", headers=carol))
    assert [(m["topic"], m["status"]) for m in listed] == [
        ("other", "queued"),
        ("item", "taken"),
        ("item", "taken"),
    ]


def test_a_send_refused_is_answered_with_whose_move_it_is_and_keeps_nothing(
    harness: Harness, api: TestClient
) -> None:
    ann, carol = as_(harness, "user:ann"), as_(harness, "user:carol")
    run_id = waiting_for_payment(harness)
    path = f"/runs/{run_id}/messages"

    refused(
        api.post("/runs/run_nothere/messages", json={"topic": "paid"}, headers=carol),
        404,
        error="no run `run_nothere`: GET /runs lists the runs",
    )
    reasons = refused(
        api.post(path, json={"topic": "refund", "payload": 1}, headers=ann),
        403,
        error='user:ann may not send Workflow::"await-payment"',
    )
    assert reasons == []
    with harness.client.db.engine.connect() as conn:
        refusals = conn.execute(sa.select(denials.c.principal, denials.c.action)).all()
    assert [tuple(row) for row in refusals] == [("user:ann", "send")]
    refused(
        api.post(path, json={"topic": "paid day", "payload": 1}, headers=carol),
        422,
        error="topic 'paid day' must be 1 to 100 printable characters with no spaces",
    )
    refused(
        api.post(path, json={"topic": "paid", "payload": 1, "by": "user:ann"}, headers=carol),
        422,
        error="`by` is not a field of a message: the message is sent as the principal of the "
        "request's API token; send only topic, payload, key",
    )
    refused(
        api.post(
            path,
            json={"topic": "paid", "payload": 1, "key": "k-body"},
            headers={**carol, "Idempotency-Key": "k-header"},
        ),
        422,
        error="the body's `key` (k-body) and the Idempotency-Key header (k-header) differ",
    )
    refused(
        api.post(
            path, json={"topic": "paid", "payload": "x" * (2 * 1024 * 1024 + 10)}, headers=carol
        ),
        413,
        error="over the 2 MiB limit (REMIT_MAX_INPUT_BYTES)",
    )
    refused(
        api.post(path, json={"topic": "paid", "payload": "a\x00b"}, headers=carol),
        422,
        error="NUL character",
    )
    assert ok(api.get(f"{path}", headers=carol)) == []

    ok(api.post(path, json={"topic": "hold", "key": "k1"}, headers=carol), 201)
    refused(
        api.post(path, json={"topic": "hold", "payload": 2, "key": "k1"}, headers=carol),
        422,
        error="message key 'k1' was first used to send message",
    )
    harness.client.runs.cancel(run_id, by="user:carol")
    reasons = refused(
        api.post(path, json={"topic": "paid", "payload": PAID}, headers=carol),
        409,
        error=f"run {run_id} is cancelled: it waits for no more messages, and the message on "
        "`paid` was not kept",
    )
    assert len(reasons) == 1
    assert [m["topic"] for m in ok(api.get(path, headers=carol))] == ["hold"]


def test_a_parent_its_children_and_what_it_published_read_as_each_may_read_them(
    harness: Harness, api: TestClient
) -> None:
    ann, carol, dave = (as_(harness, who) for who in ("user:ann", "user:carol", "user:dave"))
    run = harness.start("credit-note", {"lines": 2, "hold": True})
    harness.wait(run.run_id, until=("waiting",))
    harness.wait_attempt_ended(run.run_id, 1)
    parent = run.run_id

    children = ok(api.get(f"/runs/{parent}/children", headers=carol))
    assert [(c["workflow"], c["key"], c["step_id"], c["detached"]) for c in children] == [
        ("refund-line", "line-0", 2, False),
        ("refund-line", "line-1", 3, False),
    ]
    assert {c["parent_run_id"] for c in children} == {parent}
    ids = [c["run_id"] for c in children]
    shown = ok(api.get(f"/runs/{parent}", headers=carol))
    [wait] = shown["waiting"]
    assert (wait["kind"], wait["topic"], wait["children"], wait["deadline"]) == (
        "children",
        None,
        ids,
        None,
    )
    assert ok(api.get(f"/runs/{parent}/state", headers=carol)) == {"progress": {"started": 2}}
    listed = ok(api.get("/runs", params={"parent": parent[:12]}, headers=carol))
    assert sorted(each["run_id"] for each in listed) == sorted(ids)
    assert all("parent" not in each for each in listed)  # a list's runs are plain RunViews
    assert ok(api.get("/runs", params={"parent": ids[0]}, headers=carol)) == []

    for child in ids:
        harness.wait(child, until=("waiting",))
        harness.wait_attempt_ended(child, 1)
    child = ok(api.get(f"/runs/{ids[0]}", headers=carol))
    assert child["parent"] == {"run_id": parent, "step_id": 2, "key": "line-0", "detached": False}
    assert [(w["kind"], w["topic"]) for w in child["waiting"]] == [("message", "go")]

    # ann reads the credit note, not its refund lines: they are left out of her lists, and one
    # of them asked for is 403.
    assert ok(api.get(f"/runs/{parent}/children", headers=ann)) == []
    assert ok(api.get("/runs", params={"parent": parent}, headers=ann)) == []
    assert ok(api.get(f"/runs/{parent}/state", headers=ann)) == {"progress": {"started": 2}}
    refused(
        api.get(f"/runs/{ids[0]}/messages", headers=ann),
        403,
        error='user:ann may not read_runs Workflow::"refund-line"',
    )
    refused(api.get(f"/runs/{ids[0]}/state", headers=ann), 403, error="may not read_runs")
    # dave reads all and sends nothing.
    assert len(ok(api.get(f"/runs/{parent}/children", headers=dave))) == 2
    refused(
        api.post(f"/runs/{ids[0]}/messages", json={"topic": "go"}, headers=dave),
        403,
        error='user:dave may not send Workflow::"refund-line"',
    )
    refused(api.get("/runs/run_nothere/children", headers=carol), 404, error="no run")

    for child_id in ids:
        ok(api.post(f"/runs/{child_id}/messages", json={"topic": "go"}, headers=carol), 201)
    done = harness.wait(parent)
    assert done.status == "done", done.error
    assert done.output == {"total": 2, "children": ids}
    assert ok(api.get(f"/runs/{parent}/state", headers=dave)) == {
        "progress": {"started": 2, "done": 2}
    }
    ended = ok(api.get(f"/runs/{parent}/children", headers=dave))
    assert [c["status"] for c in ended] == ["done", "done"]
    assert ok(api.get(f"/runs/{parent}", headers=dave))["waiting"] == []


def test_a_waits_timeout_is_listed_among_the_deadlines(harness: Harness, api: TestClient) -> None:
    run = harness.start("await-payment", {"timeout": 3600})
    harness.wait(run.run_id, until=("waiting",))
    (wait,) = harness.client.runs.waiting(run.run_id)
    (deadline,) = ok(api.get("/deadlines", headers=as_(harness, "user:carol")))
    assert deadline == {
        "at": deadline["at"],
        "kind": "message",
        "run_id": run.run_id,
        "target": "paid",
    }
    assert wait.deadline is not None
    assert datetime.fromisoformat(deadline["at"]) == wait.deadline

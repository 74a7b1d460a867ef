"""The HTTP API of changes, as a user and a forge see it: `POST /changes` opens one (the policy
action `start` on `change`), `GET /changes`, `GET /changes/{id}` and `GET /deploys` read them
(`read_runs` on `change`), and the forge's webhook `POST /forge/{remote}/events` takes signed
deliveries, once, with no token. On a copy of `tests/apps/change_app` (ann and carol author
changes, carol reviews them, dave is named by no policy), its repo on a fake forge, both
databases. Driven over HTTP (starlette's TestClient on `create_api`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from remit.changes.forge import sign
from remit.core.schema import denials, forge_deliveries
from remit.serve.api import create_api
from remit.serve.change_routes import ChangeView, DeployView, TakenView
from remit.testing import Harness
from tests.change_support import Shop, shop_at, start_change, wait_for_status

# A change's checks are processes of their own: under load they take minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ANN, CAROL, DAVE = "user:ann", "user:carol", "user:dave"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    return shop_at(tmp_path, monkeypatch)


@pytest.fixture
def harness(shop: Shop, database_url: str) -> Iterator[Harness]:
    with Harness(shop.app, database_url=database_url, actor=ANN) as running:
        yield running


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    """The API, with no token unless a request sends one (`as_` gives one)."""
    with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as client:
        yield client


def as_(harness: Harness, principal: str) -> dict[str, str]:
    _, token = harness.client.services.tokens.create(principal, by=CAROL)
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def refused(response: Any, status: int, error: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "reasons"}
    assert error in body["error"], body
    return body


def count(harness: Harness, table: sa.Table) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    return int(harness.client.db.read("count", lambda conn: conn.execute(query).scalar()))


def test_a_change_is_opened_read_reviewed_and_deployed_through_the_api(
    shop: Shop, harness: Harness, api: TestClient
) -> None:
    ann, carol, dave = as_(harness, ANN), as_(harness, CAROL), as_(harness, DAVE)
    head = shop.forge.push(shop.repo, "notes", {"NOTES.md": "what changed\n"}, "Notes", "ann")

    body = {"branch": "notes", "title": "Add notes"}
    opened = ok(api.post("/changes", json=body, headers=ann), 201)
    assert set(opened) == set(ChangeView.model_fields)
    assert opened["id"].startswith("chg_")
    assert (opened["branch"], opened["base"], opened["title"], opened["author"]) == (
        "notes",
        "main",
        "Add notes",
        ANN,
    )
    assert opened["status"] == "opened"
    # Unkeyed, a branch with a change going is refused, naming it; dave may not open one.
    refused(
        api.post("/changes", json=body, headers=ann),
        409,
        f"the branch notes already has a change going, {opened['id']}",
    )
    refused(api.post("/changes", json={"branch": "x"}, headers=dave), 403, "user:dave may not")
    refused(
        api.post("/changes", json={"branch": "has space"}, headers=ann),
        400,
        "a change's branch 'has space' must be 1 to 255 printable characters with no spaces",
    )

    change_id = opened["id"]
    wait_for_status(harness, change_id, "review")
    listed = ok(api.get("/changes", headers=ann))
    assert [each["id"] for each in listed] == [change_id]
    assert [e["id"] for e in ok(api.get("/changes", params={"branch": "notes"}, headers=ann))] == [
        change_id
    ]
    assert ok(api.get("/changes", params={"branch": "other"}, headers=ann)) == []
    shown = ok(api.get(f"/changes/{change_id}", headers=ann))
    assert (shown["status"], shown["head"], shown["number"]) == ("review", head, 1)
    assert shown["url"] == "https://git.shop.test/shop/ops/pull/1"
    assert shown["run_status"] == "waiting"
    results = shown["checks"]["results"]
    assert {name: result["ok"] for name, result in results.items()} == {
        "test": True,
        "plan": True,
        "deploy-check": True,
    }
    assert re.search(r"\d+ passed", results["test"]["summary"])
    refused(
        api.get("/changes/chg_000000000000", headers=ann),
        404,
        "no change `chg_000000000000`: GET /changes lists the changes",
    )
    assert ok(api.get("/deploys", headers=ann)) == []

    # dave reads nothing of changes: the lists are empty, one change is 403 and recorded.
    assert ok(api.get("/changes", headers=dave)) == []
    assert ok(api.get("/deploys", headers=dave)) == []
    refused(api.get(f"/changes/{change_id}", headers=dave), 403, "user:dave may not read_runs")
    with harness.client.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(denials.c.action, denials.c.resource).where(denials.c.principal == DAVE)
        ).all()
    assert [tuple(row) for row in rows] == [("start", "change"), ("read_runs", "change")]

    # carol approves the review through the API: the run merges and deploys.
    [gate] = ok(api.get("/approvals", params={"run": shown["run_id"]}, headers=carol))
    assert gate["type"] == "change"
    decided = api.post(
        f"/approvals/{gate['id']}/decision",
        json={"decision": "approved"},
        headers={**carol, "Idempotency-Key": "review-notes"},
    )
    ok(decided)
    run = harness.wait(shown["run_id"], timeout=600, until=("done", "failed"))
    assert run.status == "done", run.error

    merged = shop.forge.head(shop.repo, "main")
    done = ok(api.get(f"/changes/{change_id}", headers=ann))
    assert (done["status"], done["merge_commit"], done["deployed"]) == ("deployed", merged, merged)
    deploys = ok(api.get("/deploys", headers=ann))
    assert [set(each) for each in deploys] == [set(DeployView.model_fields)]
    [deploy] = deploys
    assert (deploy["host"], deploy["revision"], deploy["kind"], deploy["healthy"]) == (
        "web",
        merged,
        "deploy",
        True,
    )
    assert (deploy["change_id"], deploy["run_id"]) == (change_id, shown["run_id"])
    assert ok(api.get("/deploys", params={"host": "web"}, headers=ann)) == deploys
    assert ok(api.get("/deploys", params={"host": "db"}, headers=ann)) == []
    activity = ok(api.get(f"/records/change/{change_id}/activity", headers=ann))
    assert [row["kind"] for row in activity][-3:] == [
        "change.deploying",
        "change.deployed",
        "run.done",
    ]


def test_an_open_sent_again_under_its_key_is_one_change(
    shop: Shop, harness: Harness, api: TestClient
) -> None:
    ann = as_(harness, ANN)
    shop.forge.push(shop.repo, "keyed", {"NOTES.md": "keyed\n"}, "Keyed", "ann")
    body = {"branch": "keyed"}
    keyed = {**ann, "Idempotency-Key": "open-keyed"}
    opened = ok(api.post("/changes", json=body, headers=keyed), 201)
    again = ok(api.post("/changes", json=body, headers=keyed), 201)
    assert (again["id"], again["run_id"]) == (opened["id"], opened["run_id"])
    in_body = ok(api.post("/changes", json={**body, "key": "open-keyed"}, headers=ann), 201)
    assert in_body["id"] == opened["id"]
    refused(
        api.post("/changes", json={**body, "key": "other"}, headers=keyed),
        422,
        "the body's `key` (other) and the Idempotency-Key header (open-keyed) differ",
    )
    assert [each["id"] for each in ok(api.get("/changes", headers=ann))] == [opened["id"]]


def test_the_forges_webhook_takes_signed_deliveries_once_with_no_token(
    shop: Shop, harness: Harness, api: TestClient
) -> None:
    change = start_change(harness, shop, "fix", {"NOTES.md": "fix\n"})
    events = "/forge/forge/events"

    # Signed with another secret: 401, naming the header and the secret, and nothing kept.
    headers, body = shop.forge.event("comment", shop.repo, secret="not-it", number=1, body="hi")
    said = refused(api.post(events, content=body, headers=headers), 401, "X-Hub-Signature-256")
    assert "FORGE_WEBHOOK_SECRET" in said["error"]
    assert said["reasons"][0]["reason"] == said["error"]
    unsigned = {k: v for k, v in headers.items() if k.lower() != "x-hub-signature-256"}
    refused(api.post(events, content=body, headers=unsigned), 401, "X-Hub-Signature-256")
    # A remote the app does not have; a body that is no delivery, however well signed.
    headers, body = shop.forge.event("comment", shop.repo, secret=shop.secret, number=1, body="x")
    refused(
        api.post("/forge/gitlab/events", content=body, headers=headers),
        404,
        "the app has no forge remote `gitlab`",
    )
    garbled = b"not json"
    resigned = {
        **{k: v for k, v in headers.items() if k.lower() != "x-hub-signature-256"},
        "X-Hub-Signature-256": sign(shop.secret, garbled),
    }
    refused(api.post(events, content=garbled, headers=resigned), 400, "cannot be read")
    assert count(harness, forge_deliveries) == 0

    # Signed with the secret: taken, as the forge, with no API token; again, a duplicate.
    headers, body = shop.forge.event(
        "comment", shop.repo, secret=shop.secret, number=1, body="looks good"
    )
    taken = ok(api.post(events, content=body, headers=headers))
    assert taken == {
        "delivery": headers["X-GitHub-Delivery"],
        "kind": "comment",
        "action": "sent",
        "run_id": change.run_id,
        "why": "",
        "duplicate": False,
    }
    assert set(taken) == set(TakenView.model_fields)
    assert ok(api.post(events, content=body, headers=headers)) == {**taken, "duplicate": True}
    messages = ok(api.get(f"/runs/{change.run_id}/messages", headers=as_(harness, ANN)))
    assert [(m["topic"], m["sent_by"]) for m in messages] == [("forge", "agent:forge")]

    # A push to a branch no change is going for is taken, and ignored, saying why.
    shop.forge.push(shop.repo, "elsewhere", {"OTHER.md": "x\n"}, "Other", "ann")
    headers, body = shop.forge.event("push", shop.repo, secret=shop.secret, branch="elsewhere")
    ignored = ok(api.post(events, content=body, headers=headers))
    assert (ignored["action"], ignored["why"], ignored["run_id"]) == (
        "ignored",
        "no change is going for it",
        None,
    )
    assert count(harness, forge_deliveries) == 2

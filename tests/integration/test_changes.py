"""A change to the operations repo as one run, in process on both databases: checks, review,
merge, deploy, rollback, the forge's events, and what is refused on the way.

The repo is a copy of `tests/apps/change_app` held by a fake forge (a bare git repository and
its change requests, in `$REMIT_FAKES_DIR`); its host is a fake whose apps crash on the
revisions a test lists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit.app import App
from remit.changes.git import Git
from remit.changes.store import Change
from remit.core.database import Database
from remit.core.errors import DecisionRefused
from remit.core.schema import forge_deliveries, messages
from remit.ops.changes import EventRefused, ForgeEvents
from remit.testing import Harness
from tests.change_support import REPO, SECRET, Shop, shop_at

# A change's checks are processes of their own: under load they take minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ORDERS = "workflows/orders.py"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    return shop_at(tmp_path, monkeypatch)


@pytest.fixture
def harness(shop: Shop, database_url: str) -> Iterator[Harness]:
    with Harness(shop.app, database_url=database_url, actor="user:ann") as h:
        yield h


def until(what: str, check: Callable[[], Any], timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def change_in(h: Harness, change_id: str, *statuses: str, timeout: float = 600) -> Change:
    def found() -> Change | None:
        change = h.client.changes.get(change_id)
        return change if change.status in statuses else None

    return until(f"change {change_id} to be {' or '.join(statuses)}", found, timeout)  # type: ignore[no-any-return]


def review_gate(h: Harness, change: Change) -> str:
    pending = until(
        "the review gate",
        lambda: h.approvals.list(run_id=change.run_id, status="pending"),
    )
    assert [gate.type for gate in pending] == ["change"]
    return str(pending[0].id)


def kinds(h: Harness, change_id: str) -> list[str]:
    return [row.kind for row in h.client.records.activity("change", change_id)]


def test_a_change_goes_from_branch_to_deploy(shop: Shop, harness: Harness) -> None:
    h, forge = harness, shop.forge
    # The host runs main already: an apply of the data files at main.
    first = h.start("apply", {}, by="user:carol").run_id
    assert h.wait(first, timeout=300, until=("done",)).status == "done"
    main_before = forge.head(REPO, "main")
    head = forge.push(
        REPO, "tidy", {"NOTES.md": "what the shop changed\n"}, "Add notes", author="ann"
    )

    change = h.client.changes.open("tidy", title="Add notes", health_wait=0.05)
    change = change_in(h, change.id, "review")
    assert change.head == head
    assert change.number == 1
    assert {name: r["ok"] for name, r in change.checks["results"].items()} == {
        "test": True,
        "plan": True,
        "deploy-check": True,
    }
    # Each check is a status on the head commit at the forge.
    assert {(s.context, s.state) for s in forge.statuses(REPO, head)} == {
        ("remit/test", "success"),
        ("remit/plan", "success"),
        ("remit/deploy-check", "success"),
    }
    gate = review_gate(h, change)
    draft = h.approvals.get(gate).draft_json
    assert draft["author"] == "user:ann"
    assert draft["head"] == head
    assert draft["commits"] == [f"{head[:12]} Add notes"]

    # The author may not approve their own change, whatever the policies say.
    with pytest.raises(DecisionRefused, match="its author may not approve it"):
        h.decide(gate, "approved", by="user:ann")
    h.decide(gate, "approved", by="user:carol")
    run = h.wait(change.run_id, timeout=600, until=("done", "failed"))
    assert run.status == "done", run.error

    done = h.client.changes.get(change.id)
    assert done.status == "deployed"
    merged = forge.head(REPO, "main")
    assert done.merge_commit == merged == done.deployed
    git = Git(forge.git_url(REPO))
    assert git.run("rev-list", "--parents", "-n", "1", merged).split()[1:] == [
        main_before,
        head,
    ]
    # The host runs the merged revision, healthy, and the deploy is recorded.
    host = h.fake("host")
    [state] = host.records("host.app").values()  # type: ignore[attr-defined]
    assert state["revision"] == merged
    [deploy] = h.client.changes.deploys()
    assert (deploy.host, deploy.revision, deploy.healthy) == ("web", merged, True)
    assert kinds(h, change.id) == [
        "run.started",
        "change.opened",
        "change.checked",
        "approval.opened",
        "approval.approved",
        "change.merging",
        "change.merged",
        "change.deploying",
        "change.deployed",
        "run.done",
    ]
    # One merge: the forge holds it once, and approving again is refused.
    assert [c.state for c in forge.changes(REPO)] == ["merged"]
    with pytest.raises(DecisionRefused, match="already approved"):
        h.decide(gate, "approved", by="user:carol")


def test_a_change_that_would_break_a_waiting_run_fails_its_checks_until_fixed(
    shop: Shop, harness: Harness
) -> None:
    h, forge = harness, shop.forge
    waiting = h.start("refund", {"order_id": "o-1"}, by="user:carol").run_id
    h.gate(waiting)
    source = (shop.folder / ORDERS).read_text()
    unguarded = source.replace(
        "    decision = ctx.approval(",
        '    ctx.step("check stock", lambda: "ok")\n    decision = ctx.approval(',
    )
    assert unguarded != source
    bad = forge.push(REPO, "stock", {ORDERS: unguarded}, "Check stock", author="ann")
    change = h.client.changes.open("stock", health_wait=0.05)
    failing = change_in(h, change.id, "failing")
    result = failing.checks["results"]["deploy-check"]
    assert not result["ok"]
    assert f"would fail {waiting}" in result["summary"]
    assert ("remit/deploy-check", "failure") in {
        (s.context, s.state) for s in forge.statuses(REPO, bad)
    }
    # No review is asked while a check fails.
    assert h.approvals.list(run_id=change.run_id, status="pending") == []

    guarded = source.replace(
        "    decision = ctx.approval(",
        '    if ctx.patch("check-stock"):\n'
        '        ctx.step("check stock", lambda: "ok")\n'
        "    decision = ctx.approval(",
    )
    fixed = forge.push(REPO, "stock", {ORDERS: guarded}, "Guard the stock check", author="ann")
    headers, body = forge.event(
        "push", REPO, secret=SECRET, branch="stock", before=bad, after=fixed
    )
    taken = ForgeEvents(h.client).take("forge", headers, body)
    assert (taken.action, taken.run_id) == ("sent", change.run_id)

    again = change_in(h, change.id, "review")
    assert again.head == fixed
    assert all(r["ok"] for r in again.checks["results"].values())
    review_gate(h, again)
    assert kinds(h, change.id).count("change.checked") == 2
    # The older results never count for the new head: its statuses are its own.
    assert {s.state for s in forge.statuses(REPO, fixed)} == {"success"}


def test_forged_and_repeated_deliveries(shop: Shop, harness: Harness) -> None:
    h, forge = harness, shop.forge
    forge.push(REPO, "fix", {"NOTES.md": "x\n"}, "Notes", author="ann")
    change = h.client.changes.open("fix")
    change_in(h, change.id, "review")
    events = ForgeEvents(h.client)
    db: Database = h.client.db

    def rows(table: sa.Table) -> int:
        return int(
            db.read(
                "count", lambda c: c.execute(sa.select(sa.func.count()).select_from(table)).scalar()
            )
        )

    headers, body = forge.event("comment", REPO, secret="not-the-secret", number=1, body="hi")
    with pytest.raises(EventRefused) as refused:
        events.take("forge", headers, body)
    assert refused.value.status == 401
    assert rows(forge_deliveries) == 0
    assert rows(messages) == 0

    headers, body = forge.event("comment", REPO, secret=SECRET, number=1, body="looks good")
    first = events.take("forge", headers, body)
    second = events.take("forge", headers, body)
    assert (first.action, first.duplicate) == ("sent", False)
    assert (second.action, second.run_id, second.duplicate) == ("sent", change.run_id, True)
    assert rows(forge_deliveries) == 1
    assert rows(messages) == 1


def test_an_unhealthy_deploy_is_rolled_back_when_approved(shop: Shop, harness: Harness) -> None:
    h, forge = harness, shop.forge
    first = h.start("apply", {}, by="user:carol").run_id
    assert h.wait(first, timeout=300, until=("done",)).status == "done"
    before = forge.head(REPO, "main")
    assert before is not None
    shop.healthy_only(before)  # every other revision crashes on the host
    forge.push(REPO, "risky", {"NOTES.md": "risky\n"}, "Risky", author="ann")
    change = h.client.changes.open("risky", health_wait=0.05)
    h.decide(review_gate(h, change_in(h, change.id, "review")), "approved", by="user:carol")

    unhealthy = change_in(h, change.id, "unhealthy")
    rollback = until(
        "the rollback gate",
        lambda: h.approvals.list(run_id=change.run_id, status="pending"),
    )
    assert [gate.type for gate in rollback] == ["change-rollback"]
    assert rollback[0].draft_json["previous"] == before
    assert "crashing" in rollback[0].draft_json["failures"]["web"]
    h.decide(rollback[0].id, "approved", by="user:carol")
    run = h.wait(change.run_id, timeout=600, until=("done", "failed"))
    assert run.status == "done", run.error
    assert h.client.changes.get(change.id).status == "rolled_back"
    [state] = h.fake("host").records("host.app").values()  # type: ignore[attr-defined]
    assert state["revision"] == before
    assert state["status"] == "running"
    deploys = [(d.kind, d.revision, d.healthy) for d in h.client.changes.deploys()]
    assert deploys == [("rollback", before, True), ("deploy", unhealthy.merge_commit, False)]


def test_a_push_to_main_no_change_made_applies_it(shop: Shop, harness: Harness) -> None:
    h, forge = harness, shop.forge
    before = forge.head(REPO, "main")
    pushed = forge.push(REPO, "main", {"NOTES.md": "hotfix\n"}, "Hotfix", author="dev")
    headers, body = forge.event(
        "push", REPO, secret=SECRET, branch="main", before=before, after=pushed
    )
    taken = ForgeEvents(h.client).take("forge", headers, body)
    assert taken.action == "apply"
    assert taken.run_id is not None
    assert h.wait(taken.run_id, timeout=300, until=("done", "failed")).status == "done"
    [state] = h.fake("host").records("host.app").values()  # type: ignore[attr-defined]
    assert state["revision"] == pushed
    run = h.runs.get(taken.run_id)
    assert run.started_by == "agent:forge"


def test_only_the_change_workflow_may_call_the_change_ops(shop: Shop) -> None:
    from pydantic import BaseModel

    from remit import workflow
    from remit.changes.ops import merge
    from remit.core.errors import AppError

    class Nothing(BaseModel):
        pass

    @workflow(name="sneaky", input=Nothing, uses=[merge])
    def sneaky(ctx: Any, input: Nothing) -> None:
        return None

    with pytest.raises(AppError, match="only remit's built-in `change` calls it"):
        App(name="shop", workflows=[sneaky], connectors=list(shop.app.remotes.values()))


def test_what_a_change_does_not_let_through(shop: Shop, harness: Harness) -> None:
    """The repo's ops are not called directly; an author is who opens the change; a delivery
    copied under another id, and a push to main delivered late, do nothing; a message that is
    no forge event is ignored."""
    h, forge = harness, shop.forge
    from remit.core.errors import RemitError

    head = forge.push(REPO, "sneak", {"NOTES.md": "x\n"}, "Sneak", author="carol")
    with pytest.raises(RemitError, match="only the built-in `change` does"):
        h.call("remit.change.merge", {"number": 1, "head": head}, by="user:carol")

    forged = h.start(
        "change", {"id": "chg_forged", "branch": "sneak", "author": "user:nobody"}, by="user:carol"
    ).run_id
    run = h.wait(forged, timeout=300, until=("failed", "done"))
    assert run.status == "failed"
    assert "this run was started by user:carol, and its input names user:nobody" in (
        run.error or ""
    )

    change = h.client.changes.open("sneak")
    h.decide(review_gate(h, change_in(h, change.id, "review")), "rejected", by="user:carol")
    change_in(h, change.id, "rejected")
    h.send(change.run_id, "forge", {"oops": 1}, by="agent:forge")
    until(
        "the odd message to be noted",
        lambda: "change.ignored" in kinds(h, change.id),
    )
    # The run goes on waiting for a push: it takes the next message, not the odd one.
    until("the run to wait again", lambda: h.runs.get(change.run_id).status == "waiting")
    assert [w.topic for w in h.client.runs.waiting(change.run_id)] == ["forge"]

    events = ForgeEvents(h.client)
    before = forge.head(REPO, "main")
    assert before is not None
    first = forge.push(REPO, "main", {"A.md": "a\n"}, "A", author="dev")
    headers, body = forge.event(
        "push", REPO, secret=SECRET, branch="main", before=before, after=first
    )
    second = forge.push(REPO, "main", {"B.md": "b\n"}, "B", author="dev")
    late = events.take("forge", headers, body)
    assert late.action == "ignored"
    assert f"main is at {second[:12]} now" in late.why
    copied = {**headers, "X-GitHub-Delivery": "another-id"}
    again = events.take("forge", copied, body)
    assert again.duplicate
    assert again.action == "ignored"


def test_a_review_withdrawn_by_its_author_is_recorded_as_withdrawn(
    shop: Shop, database_url: str
) -> None:
    """A review its author takes back is no rejection: the change reads `withdrawn`, and its run
    waits for a push as after a rejection."""
    policies = shop.folder / "policies"
    with (policies / "shop.cedar").open("a") as cedar:
        cedar.write(
            '\npermit (principal, action == Action::"withdraw", resource) '
            "when { context.is_requester };\n"
        )
    with Harness(shop.app, database_url=database_url, actor="user:ann", policies=policies) as h:
        head = shop.forge.push(REPO, "tidy", {"NOTES.md": "notes\n"}, "Add notes", author="ann")
        change = h.client.changes.open("tidy")
        gate = review_gate(h, change_in(h, change.id, "review"))

        h.approvals.withdraw(gate, reason="not ready")
        withdrawn = change_in(h, change.id, "withdrawn")
        assert withdrawn.head == head
        activity = h.client.records.activity("change", change.id)
        assert [row.kind for row in activity][-2:] == ["approval.withdrawn", "change.withdrawn"]
        assert activity[-1].summary == f"review of {head[:12]} withdrawn by user:ann: not ready"
        assert "change.rejected" not in kinds(h, change.id)
        until("the run to wait for a push", lambda: h.runs.get(change.run_id).status == "waiting")
        assert [w.topic for w in h.client.runs.waiting(change.run_id)] == ["forge"]

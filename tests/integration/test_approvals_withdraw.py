"""A gate withdrawn by whoever asked for it: the run carries on reading `withdrawn` and takes
its own branch; only whoever started the run or an admin may withdraw it, with or without
policies, and with them only as they let them too (`withdraw`, told who started the run);
a withdrawn gate is decided by no one after, a decided one is withdrawn by no one, and a
withdrawal racing a decision ends with one of them. Each is audited and on the record's
activity, as a decision is."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, Client, Context, DecisionRefused, RemitError, workflow
from remit.testing import Harness
from tests.support import REFUND, FakeShop, RefundDraft, create_order, get_item, shop

# Anyone starts and reads; clerks decide; whoever started a run withdraws its gates.
POLICIES = """
permit (
    principal,
    action in [Action::"start", Action::"read_runs", Action::"read_approvals"],
    resource
);
permit (principal in Group::"clerks", action == Action::"decide", resource);
permit (principal, action == Action::"withdraw", resource) when { context.is_requester };
"""
# Controllers are clerks too (a group within a group); Eve is in neither.
PRINCIPALS = """
[groups]
clerks = ["user:ann", "user:bob", "group:controllers"]
controllers = ["user:carol", "user:dan"]
outsiders = ["user:eve"]

[telegram]
"user:ann" = 111
"user:carol" = 333
"user:dan" = 444
"user:eve" = 555
"""


class Errand(BaseModel):
    sku: str
    assignee: str | None = None


@workflow(
    name="errand",
    input=Errand,
    uses=[get_item, create_order],
    record=lambda input: ("order", input.sku),
)
def errand(ctx: Context, input: Errand) -> dict[str, Any]:
    item = ctx.call(get_item, sku=input.sku)
    decision = ctx.approval(
        "errand",
        type="refund",
        title=f"Refund {input.sku} at {item.price}",
        draft=RefundDraft(sku=input.sku, quantity=1),
        assignee=input.assignee,
    )
    if decision.withdrawn:
        return {"branch": "withdrawn", "by": decision.decided_by, "reason": decision.reason}
    if not decision.approved:
        return {"branch": decision.status}
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    return {"branch": "approved", "order_id": order.order_id, "by": decision.decided_by}


def desk_app(folder: Path, *, notifiers: list[Any] | None = None) -> App:
    """The errand app under `POLICIES` and `PRINCIPALS`, written to `folder/policies`."""
    policies = folder / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    (policies / "desk.cedar").write_text(POLICIES)
    (policies / "principals.toml").write_text(PRINCIPALS)
    app = App(
        name="desk", workflows=[errand], connectors=[shop], approvals=[REFUND], notifiers=notifiers
    )
    app.use_policies(policies)
    return app


@pytest.fixture
def h(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    """A worker on the desk, acting as Ann unless a verb says otherwise."""
    with Harness(desk_app(tmp_path), database_url=database_url, actor="user:ann") as running:
        yield running


def test_the_requester_withdraws_a_gate_and_the_run_takes_its_withdrawn_branch(h: Harness) -> None:
    run = h.start("errand", {"sku": "sku-1"})
    gate = h.gate(run.run_id)

    result = h.approvals.withdraw(gate.id, key="w-1", reason="asked by mistake")

    assert not result.replayed
    assert [(d.approval_id, d.status, d.resumed_workflow_id) for d in result.decided] == [
        (gate.id, "withdrawn", f"{run.run_id}:2")
    ]
    done = h.wait(run.run_id)
    assert done.status == "done", done.error
    assert done.output == {
        "branch": "withdrawn",
        "by": "user:ann",
        "reason": "asked by mistake",
    }
    assert h.fake("shop", FakeShop).effects == []  # the approved branch never ran
    withdrawn = h.approvals.get(gate.id)
    assert (withdrawn.status, withdrawn.decided_by, withdrawn.decided_via) == (
        "withdrawn",
        "user:ann",
        "api",
    )
    (row,) = h.approvals.audit(gate.id)
    assert (row["actor"], row["action"]) == ("user:ann", "approval.withdrawn")
    assert row["meta"]["reason"] == "asked by mistake"
    assert row["meta"]["resumed_workflow_id"] == f"{run.run_id}:2"
    activity = h.client.records.activity("order", "sku-1")
    assert [(a.kind, a.actor) for a in activity] == [
        ("run.started", "user:ann"),
        ("approval.opened", "user:ann"),
        ("approval.withdrawn", "user:ann"),
        ("run.done", "remit:run"),
    ]
    assert activity[2].summary == "Refund sku-1 at 1200: withdrawn via api: asked by mistake"
    assert activity[2].target == gate.id

    # The same key again replays the first withdrawal, and resumes nothing again.
    again = h.approvals.withdraw(gate.id, key="w-1", reason="asked by mistake")
    assert again.replayed
    assert [d.status for d in again.decided] == ["withdrawn"]
    # Withdrawn, it is decided by no one, and withdrawn no more.
    with pytest.raises(DecisionRefused, match="is already withdrawn by user:ann") as refused:
        h.decide(gate.id, "approved", by="user:bob")
    assert not refused.value.by_policy
    with pytest.raises(
        DecisionRefused, match=r"^withdrawal refused, nothing was written: .* is already"
    ):
        h.approvals.withdraw(gate.id)
    assert len(h.approvals.audit(gate.id)) == 1
    assert h.runs.get(run.run_id).attempt == 2


def test_only_the_requester_or_an_admin_the_policies_let_withdraws_and_a_decided_gate_stays_decided(
    h: Harness,
) -> None:
    run = h.start("errand", {"sku": "sku-1"})
    gate = h.gate(run.run_id)

    # Bob did not start the run: the built-in rule refuses him, naming who may, before the
    # policies are asked; nothing is written.
    with pytest.raises(DecisionRefused) as refused:
        h.approvals.withdraw(gate.id, by="user:bob")
    assert not refused.value.by_policy
    assert str(refused.value) == (
        f"withdrawal refused, nothing was written: {gate.id} was asked for by user:ann, who "
        f"started run {run.run_id}: only they or an admin (REMIT_ADMINS) may withdraw it, "
        "not user:bob"
    )
    assert not h.client.approvals.may_withdraw(gate.id, by="user:bob")
    assert h.client.ops.denials() == []
    # An admin passes the rule, but these policies let only the requester withdraw: both must
    # let them, so the policies refuse root, told who asked.
    with pytest.raises(DecisionRefused) as denied:
        h.client.services.approvals.withdraw(
            gate.id, by="user:root", via="test", key="root-w", admin=True
        )
    assert denied.value.by_policy
    assert str(denied.value) == (
        f"withdrawal refused, nothing was written: {gate.id} user:root may not withdraw "
        'ApprovalType::"refund": no policy permits it'
    )
    assert h.approvals.get(gate.id).status == "pending"
    assert h.approvals.audit(gate.id) == []
    (denial,) = h.client.ops.denials()
    assert (denial.principal, denial.action, denial.resource) == (
        "user:root",
        "withdraw",
        "refund",
    )
    assert denial.context["requester"] == "user:ann"
    assert denial.context["is_requester"] is False
    assert h.client.approvals.may_withdraw(gate.id, by="user:ann")
    # Not a decision: `decide()` does not write `withdrawn`.
    with pytest.raises(RemitError, match="not decided as withdrawn: use `remit approvals"):
        h.decide(gate.id, "withdrawn", by="user:ann")
    # remit's own principals withdraw nothing.
    with pytest.raises(RemitError, match="remit's own"):
        h.client.services.approvals.withdraw(gate.id, by="remit:expiry", via="expiry", key="k")

    # Decided, it is withdrawn by no one: its requester is told why.
    h.decide(gate.id, "approved", by="user:bob")
    with pytest.raises(DecisionRefused, match="is already approved by user:bob") as late:
        h.approvals.withdraw(gate.id)
    assert not late.value.by_policy
    assert h.wait(run.run_id).output == {
        "branch": "approved",
        "order_id": "ord_1",
        "by": "user:bob",
    }
    assert [row["action"] for row in h.approvals.audit(gate.id)] == ["approval.approved"]


RACES = 4


def test_a_withdrawal_racing_a_decision_ends_with_exactly_one_of_them(h: Harness) -> None:
    runs = [h.start("errand", {"sku": "sku-1"}) for _ in range(RACES)]
    gates = [h.gate(run.run_id) for run in runs]
    outcomes: dict[tuple[str, str], str] = {}
    start = threading.Barrier(2 * RACES)

    def act(approval_id: str, who: str) -> None:
        start.wait()
        try:
            if who == "user:ann":
                h.approvals.withdraw(approval_id, by=who)
            else:
                h.decide(approval_id, "rejected", by=who)
            outcomes[(approval_id, who)] = "done"
        except DecisionRefused as refused:
            outcomes[(approval_id, who)] = str(refused)

    threads = [
        threading.Thread(target=act, args=(gate.id, who))
        for gate in gates
        for who in ("user:ann", "user:bob")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    for gate, run in zip(gates, runs, strict=True):
        withdrew, rejected = outcomes[(gate.id, "user:ann")], outcomes[(gate.id, "user:bob")]
        assert [withdrew, rejected].count("done") == 1, (withdrew, rejected)
        status = "withdrawn" if withdrew == "done" else "rejected"
        loser = rejected if withdrew == "done" else withdrew
        assert f"is already {status} by" in loser
        assert h.approvals.get(gate.id).status == status
        assert [row["action"] for row in h.approvals.audit(gate.id)] == [f"approval.{status}"]
        done = h.wait(run.run_id)
        assert done.output is not None
        assert done.output["branch"] == status
        assert done.attempt == 2  # resumed once


def test_without_policies_only_the_requester_or_an_admin_withdraws(database_url: str) -> None:
    app = App(name="desk", workflows=[errand], connectors=[shop], approvals=[REFUND])
    with Harness(app, database_url=database_url, actor="user:ann") as h:
        assert not h.client.services.guard.policy.enabled
        mine = h.start("errand", {"sku": "sku-1", "assignee": "user:carol"})
        other = h.start("errand", {"sku": "sku-2"})
        gate, second = h.gate(mine.run_id), h.gate(other.run_id)

        # Mallory did not start the run, nor did its assignee Carol: the rule holds without
        # policies, names who may, and writes nothing.
        for who in ("user:mallory", "user:carol"):
            assert not h.client.approvals.may_withdraw(gate.id, by=who)
            with pytest.raises(DecisionRefused) as refused:
                h.approvals.withdraw(gate.id, by=who)
            assert str(refused.value) == (
                f"withdrawal refused, nothing was written: {gate.id} was asked for by "
                f"user:ann, who started run {mine.run_id}: only they or an admin "
                f"(REMIT_ADMINS) may withdraw it, not {who}"
            )
        assert h.approvals.get(gate.id).status == "pending"
        assert h.approvals.audit(gate.id) == []

        # Ann started it: she may.
        assert h.client.approvals.may_withdraw(gate.id, by="user:ann")
        h.approvals.withdraw(gate.id, reason="not needed")
        assert h.wait(mine.run_id).output == {
            "branch": "withdrawn",
            "by": "user:ann",
            "reason": "not needed",
        }

        # An admin (REMIT_ADMINS) may withdraw someone else's gate; a client that does not
        # count Mallory as one still refuses her.
        admins = replace(h.client.settings, admins=frozenset({"user:root"}))
        with Client(app, admins, clock=h.worker.runtime.clock) as client:
            assert not client.approvals.may_withdraw(second.id, by="user:mallory")
            assert client.approvals.may_withdraw(second.id, by="user:root")
            client.approvals.withdraw(second.id, by="user:root", key="root-w")
        assert h.wait(other.run_id).output["by"] == "user:root"
        assert [(r["actor"], r["action"]) for r in h.approvals.audit(second.id)] == [
            ("user:root", "approval.withdrawn")
        ]

"""Approval gates on a real worker: a run waits at `ctx.approval`, holding nothing, and carries
on from the gate after `decide()`, without running the steps before it again."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
import sqlalchemy as sa

from remit import App, ApprovalNotice, ApprovalType, DecisionRefused, KeyReused, WebhookNotifier
from remit.core.schema import decisions
from remit.people.approvals import Approvals, UndeclaredDraft
from remit.testing import Harness, ManualClock
from tests.support import FakeShop, RefundDraft, get_item, make_app, refund, shop


def test_a_gate_suspends_the_run_and_a_decision_resumes_it_past_the_gate(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        gate = h.gate(run.run_id)
        waiting = h.runs.get(run.run_id)
        assert (waiting.status, waiting.attempt) == ("waiting", 1)
        # The attempt has ended in DBOS: nothing of it is left running in the worker.
        assert h.wait_attempt_ended(run.run_id, 1) == "SUCCESS"
        assert (gate.type, gate.title, gate.draft) == (
            "refund",
            "Refund 2 x sku-1 at 1200",
            RefundDraft(sku="sku-1", quantity=2),
        )
        assert gate.draft_json == {"sku": "sku-1", "quantity": 2, "note": ""}

        result = h.decide(gate.id, "approved", edits={gate.id: {"quantity": 3}}, reason="ok")

        assert not result.replayed
        assert [(d.approval_id, d.status, d.resumed_workflow_id) for d in result.decided] == [
            (gate.id, "approved", f"{run.run_id}:2")
        ]
        done = h.wait(run.run_id)
        assert done.status == "done", done.error
        assert done.output == {"status": "approved", "order_id": "ord_1", "quantity": 3}
        assert done.attempt == 2
        shop = h.fake("shop", FakeShop)
        # The read before the gate ran once, on attempt 1; attempt 2 was forked past it.
        assert shop.reads == 1
        assert [e.input for e in shop.effects] == [{"sku": "sku-1", "quantity": 3}]
        ledger = h.ledger(run.run_id)
        assert [(row.op_id, row.attempt, row.status) for row in ledger] == [
            ("shop.items.get", 1, "ok"),
            ("shop.orders.create", 2, "ok"),
        ]
        first, second = h.steps(run.run_id, 1), h.steps(run.run_id, 2)
        assert [s["function_name"] for s in second] == [
            "shop.items.get",
            "approval:refund",
            "shop.orders.create",
        ]
        assert second[0] == first[0]  # copied by the fork, timings and all

        decided = h.approvals.get(gate.id)
        assert (decided.status, decided.decided_by, decided.decided_via, decided.reason) == (
            "approved",
            "user:test",
            "test",
            "ok",
        )
        assert decided.edited_draft == RefundDraft(sku="sku-1", quantity=3)
        assert decided.draft == RefundDraft(sku="sku-1", quantity=2)
        assert decided.edited_draft_json == {"sku": "sku-1", "quantity": 3, "note": ""}
        assert decided.as_json()["draft"] == {"sku": "sku-1", "quantity": 2, "note": ""}
        (row,) = h.approvals.audit(gate.id)
        assert (row["actor"], row["action"]) == ("user:test", "approval.approved")
        assert row["meta"]["resumed_workflow_id"] == f"{run.run_id}:2"
        assert row["meta"]["edited"] is True


def test_an_approval_read_where_its_type_is_not_declared_shows_its_draft_as_stored(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 2})
        gate = h.gate(run.run_id)
        untyped = Approvals(h.worker.db, h.worker.client, {}).get(gate.id)
        assert isinstance(gate.draft, RefundDraft)
        assert isinstance(untyped.draft, UndeclaredDraft)
        stored = {"sku": "sku-1", "quantity": 2, "note": ""}
        assert untyped.draft.model_dump(mode="json") == untyped.draft_json == stored
        assert untyped.as_json() == gate.as_json()
        assert untyped.as_json()["draft"] == stored


def test_rejected_gate_resumes_the_run_with_the_rejection(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-2"})
        gate = h.gate(run.run_id)
        h.decide(gate.id, "rejected", by="user:carol", reason="duplicate")
        done = h.wait(run.run_id)
        assert done.output == {"status": "rejected", "by": "user:carol"}
        assert h.fake("shop").effects == []


def test_an_async_workflow_waits_and_resumes_the_same_way(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund-async", {"sku": "sku-1"})
        gate = h.gate(run.run_id)
        h.decide(gate.id, "approved")
        done = h.wait(run.run_id)
        assert done.output == {"status": "approved", "order_id": "ord_1"}
        assert h.fake("shop", FakeShop).reads == 1


def test_a_repeated_decision_key_replays_the_first_result(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1"})
        gate = h.gate(run.run_id)
        first = h.decide(gate.id, "approved", decision_key="k-1", edits={"quantity": 2})
        again = h.decide(gate.id, "approved", decision_key="k-1", edits={"quantity": 2})
        assert again.replayed
        assert not first.replayed
        assert again.decided == first.decided
        assert h.wait(run.run_id).status == "done"
        assert len(h.approvals.audit(gate.id)) == 1
        assert h.runs.get(run.run_id).attempt == 2
        assert h.attempt_status(run.run_id, 3) is None

        # The key names that one request: sent with any other, it is refused, naming the first.
        first_request = f"approve {gate.id} with edits as user:test"
        for other in (
            {"decision": "rejected"},
            {"decision": "approved", "edits": {"quantity": 3}},
            {"decision": "approved", "edits": {"quantity": 2}, "reason": "changed my mind"},
            {"decision": "approved", "edits": {"quantity": 2}, "by": "user:someone-else"},
        ):
            with pytest.raises(
                KeyReused, match=f"decision key 'k-1' was first used to {first_request}"
            ):
                h.decide(gate.id, decision_key="k-1", **other)  # type: ignore[arg-type]
        assert len(h.approvals.audit(gate.id)) == 1

        other_gate = h.gate(h.start("refund", {"sku": "sku-2"}).run_id)
        with pytest.raises(KeyReused, match="was first used to approve"):
            h.decide(other_gate.id, "approved", decision_key="k-1")
        assert h.approvals.get(other_gate.id).status == "pending"


def test_a_batch_is_refused_whole_with_every_reason(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        runs = [h.start("refund", {"sku": "sku-1"}) for _ in range(3)]
        decided, pending, bad_edit = (h.gate(run.run_id) for run in runs)
        h.decide(decided.id, "approved")

        with pytest.raises(DecisionRefused) as refused:
            h.decide(
                [decided.id, pending.id, bad_edit.id, "apr_nope"],
                "approved",
                edits={bad_edit.id: {"quantity": "lots"}},
            )

        reasons = dict(refused.value.reasons)
        assert reasons[decided.id] == "is already approved by user:test"
        assert reasons["apr_nope"].startswith("is not an approval")
        assert "does not parse as RefundDraft: quantity" in reasons[bad_edit.id]
        assert pending.id not in reasons
        # Nothing of the batch was written: both others still wait, with no audit row.
        for gate in (pending, bad_edit):
            assert h.approvals.get(gate.id).status == "pending"
            assert h.approvals.audit(gate.id) == []
        with h.worker.db.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(decisions)).scalar() == 1

        both = h.decide([pending.id, bad_edit.id], "rejected")
        assert both.batch_id is not None
        assert {d.status for d in both.decided} == {"rejected"}
        assert {h.wait(run.run_id).status for run in runs} == {"done"}
        assert [row["meta"]["batch_id"] for row in h.approvals.audit(pending.id)] == [both.batch_id]


def test_edits_only_go_with_an_approval_and_must_parse(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1"})
        gate = h.gate(run.run_id)
        with pytest.raises(DecisionRefused, match="only an approval carries edits"):
            h.decide(gate.id, "rejected", edits={gate.id: {"quantity": 2}})
        with pytest.raises(DecisionRefused, match="quantity: Input should be a valid integer"):
            h.decide(gate.id, "approved", edits={gate.id: {"quantity": "two"}})
        with pytest.raises(DecisionRefused, match="does not have: quantiy \\(it has: sku,"):
            h.decide(gate.id, "approved", edits={gate.id: {"quantiy": 1}})
        with pytest.raises(DecisionRefused, match="has an edit but is not in the batch"):
            h.decide(gate.id, "approved", edits={"apr_other": {"quantity": 2}})
        assert h.approvals.get(gate.id).status == "pending"


def test_an_edit_to_a_field_the_type_keeps_is_refused_and_changes_nothing(
    database_url: str,
) -> None:
    kept = ApprovalType("refund", draft=RefundDraft, editable=["quantity", "note"])
    app = App(name="shop", workflows=[refund], connectors=[shop], approvals=[kept])
    with Harness(app, database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1", "quantity": 3})
        gate = h.gate(run.run_id)
        assert gate.editable == ("quantity", "note")
        with pytest.raises(DecisionRefused) as refused:
            h.decide(gate.id, "approved", edits={gate.id: {"sku": "sku-2", "quantity": 1}})
        assert refused.value.reasons == [
            (
                gate.id,
                "has an edit changing sku, which approval type `refund` keeps as the run "
                "proposed it: a decider may change only quantity, note",
            )
        ]
        assert not refused.value.by_policy
        assert h.approvals.get(gate.id).status == "pending"
        assert h.approvals.audit(gate.id) == []
        assert h.runs.get(run.run_id).status == "waiting"

        # Named with the value it has, a kept field is no change.
        h.decide(gate.id, "approved", edits={gate.id: {"sku": "sku-1", "quantity": 1}})
        decided = h.approvals.get(gate.id)
        assert decided.edited_draft_json == {"sku": "sku-1", "quantity": 1, "note": ""}
        assert h.wait(run.run_id).output == {
            "status": "approved",
            "order_id": "ord_1",
            "quantity": 1,
        }


def test_an_assigned_gate_is_decided_by_its_assignee_or_an_admin(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        first = h.start("refund", {"sku": "sku-1", "assignee": "user:alice"})
        second = h.start("refund", {"sku": "sku-2", "assignee": "user:alice"})
        gate, other = h.gate(first.run_id), h.gate(second.run_id)
        assert gate.assignee == "user:alice"
        with pytest.raises(DecisionRefused, match="is assigned to user:alice; user:bob is not"):
            h.decide(gate.id, "approved", by="user:bob")
        h.decide(gate.id, "approved", by="user:alice")
        h.client.services.approvals.decide(
            [other.id], "approved", by="user:root", via="test", decision_key="a", admin=True
        )
        assert h.wait(first.run_id).status == "done"
        assert h.approvals.get(other.id).decided_by == "user:root"


def test_a_gate_past_its_expiry_is_expired_by_the_sweep(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=3600) as h:
        run = h.start("refund", {"sku": "sku-1", "expires_in": 3600})
        gate = h.gate(run.run_id)
        assert gate.expires_at == gate.created_at + timedelta(hours=1)
        assert h.client.services.approvals.expire_due() == []  # not yet

        clock.advance(hours=1, seconds=1)
        (expired,) = h.client.services.approvals.expire_due()
        assert h.client.services.approvals.expire_due() == []  # once

        assert (expired.approval_id, expired.status) == (gate.id, "expired")
        done = h.wait(run.run_id)
        assert done.output == {"status": "expired", "by": "remit:expiry"}
        (row,) = h.approvals.audit(gate.id)
        assert (row["actor"], row["meta"]["via"]) == ("remit:expiry", "expiry")
        assert row["meta"]["decision_key"] == f"expire:{gate.id}"
        with pytest.raises(DecisionRefused, match="is already expired by remit:expiry"):
            h.decide(gate.id, "approved")


def test_cancelling_a_waiting_run_cancels_its_gate(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1"})
        gate = h.gate(run.run_id)
        h.client.runs.cancel(run.run_id, by="user:dave")
        cancelled = h.approvals.get(gate.id)
        assert (cancelled.status, cancelled.decided_by, cancelled.decided_via) == (
            "cancelled",
            "user:dave",
            "cancel",
        )
        assert [row["action"] for row in h.approvals.audit(gate.id)] == ["approval.cancelled"]
        with pytest.raises(DecisionRefused, match="is already cancelled"):
            h.decide(gate.id, "approved")
        assert h.runs.get(run.run_id).status == "cancelled"


def test_an_undeclared_approval_type_fails_the_run_saying_what_to_add(database_url: str) -> None:
    from remit import App, Context, workflow
    from tests.support import Refund, RefundDraft

    @workflow(name="bad-gate", input=Refund, uses=[get_item])
    def bad_gate(ctx: Context, input: Refund) -> None:
        ctx.approval("x", type="write-off", title="t", draft=RefundDraft(sku="a", quantity=1))

    base = make_app()
    app = App(
        name="shop",
        workflows=[*base.workflows.values(), bad_gate],
        connectors=base.connectors.values(),
        approvals=base.approval_types.values(),
    )
    with Harness(app, database_url=database_url) as h:
        failed = h.wait(h.start("bad-gate", {"sku": "sku-1"}).run_id)
    assert failed.status == "failed"
    assert "approval type `write-off` is not declared (declared: refund)" in (failed.error or "")
    assert "ApprovalType('write-off', draft=YourModel)" in (failed.error or "")


class Recording:
    """A notifier that records what it was told, failing its first `failures` sends."""

    def __init__(self, name: str, failures: int = 0) -> None:
        self.name = name
        self.failures = failures
        self.notices: list[ApprovalNotice] = []

    def send(self, notice: ApprovalNotice) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("the chat service is down")
        self.notices.append(notice)


def test_notifiers_are_told_once_and_a_failing_one_is_retried(database_url: str) -> None:
    clock = ManualClock()
    steady, flaky = Recording("steady"), Recording("flaky", failures=2)
    with Harness(
        make_app([steady, flaky]), database_url=database_url, clock=clock, sweep_interval=3600
    ) as h:
        run = h.start("refund", {"sku": "sku-1", "assignee": "user:alice"})
        gate = h.gate(run.run_id)
        assert [(n.approval_id, n.run_id, n.workflow, n.assignee) for n in steady.notices] == [
            (gate.id, run.run_id, "refund", "user:alice")
        ]
        assert flaky.notices == []
        status = {row["channel"]: row for row in h.worker.runtime.notifications.status(gate.id)}
        assert status["flaky"]["sent_at"] is None
        assert "the chat service is down" in status["flaky"]["error"]

        notifications = h.worker.runtime.notifications
        assert notifications.send_due() == 0  # its backoff has not passed
        clock.advance(minutes=1, seconds=1)
        assert notifications.send_due() == 0  # failed again: backoff doubles
        clock.advance(minutes=2)
        assert notifications.send_due() == 1
        clock.advance(hours=1)
        assert notifications.send_due() == 0  # sent once, never again

        assert len(flaky.notices) == 1
        assert len(steady.notices) == 1
        status = {row["channel"]: row for row in notifications.status(gate.id)}
        assert status["flaky"]["attempts"] == 3
        assert status["flaky"]["sent_at"] is not None


@pytest.fixture
def webhook_receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks/remit", received
    finally:
        server.shutdown()
        server.server_close()


def test_the_webhook_notifier_posts_a_signed_body(
    database_url: str, webhook_receiver: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    url, received = webhook_receiver
    hook = WebhookNotifier(url, secret="s3cret")
    with Harness(make_app([hook]), database_url=database_url) as h:
        gate = h.gate(h.start("refund", {"sku": "sku-2", "quantity": 4}).run_id)
    ((headers, body),) = received
    payload = json.loads(body)
    assert payload["event"] == "approval.waiting"
    assert payload["approval"]["approval_id"] == gate.id
    assert payload["approval"]["draft"] == {"sku": "sku-2", "quantity": 4, "note": ""}
    expected = hmac.new(
        b"s3cret", f"{headers['x-remit-timestamp']}.".encode() + body, hashlib.sha256
    ).hexdigest()
    assert headers["x-remit-signature"] == f"sha256={expected}"


def test_a_run_waiting_at_two_gates_resumes_whichever_is_decided_first(database_url: str) -> None:
    # The two gates are awaited together: both may be pending at once, or the first to suspend
    # may cancel the other before it opens (it opens on the next attempt). Either way, deciding
    # the later gate first must leave the earlier one decidable, and the run must finish.
    verdicts = {"first": "approved", "second": "rejected"}
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("two-gates", {"sku": "sku-1"})
        while not (current := h.wait(run.run_id, until=("waiting",))).finished:
            pending = h.approvals.list(run_id=run.run_id, status="pending")
            assert pending, f"run {run.run_id} waits with no pending gate"
            later = max(pending, key=lambda a: a.key)  # "second" before "first"
            h.decide(later.id, verdicts[later.key])
            h.wait_moved(run.run_id, current.attempt)

        assert (current.status, current.output) == ("done", ["approved", "rejected"])
        decided = h.approvals.list(run_id=run.run_id)
        assert sorted((a.key, a.status) for a in decided) == [
            ("first", "approved"),
            ("second", "rejected"),
        ]
        assert h.fake("shop", FakeShop).reads == 1


def test_a_key_used_by_an_earlier_gate_fails_the_run_instead_of_reusing_it(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("same-key", {"sku": "sku-1"})
        h.decide(h.gate(run.run_id).id, "approved")
        failed = h.wait(run.run_id)
    assert failed.status == "failed"
    assert "approval key `ok` is taken by an earlier gate of run" in (failed.error or "")
    assert "give each gate its own key" in (failed.error or "")


def test_a_cancelled_run_opens_no_gate(database_url: str) -> None:
    from remit.core.errors import RunMovedOn
    from remit.core.runs import RunInfo

    with Harness(make_app(), database_url=database_url) as h:
        run = h.start("refund", {"sku": "sku-1"})
        h.gate(run.run_id)
        h.client.runs.cancel(run.run_id)
        attempt = RunInfo(run.run_id, 1, f"{run.run_id}:1", "user:test")
        with pytest.raises(RunMovedOn, match="is cancelled"):
            h.worker.runtime.gates.open(
                attempt,
                9,
                key="late",
                type="refund",
                title="late",
                draft={"sku": "sku-1", "quantity": 1, "note": ""},
                assignee=None,
                expires_in=None,
            )
        assert [a.key for a in h.approvals.list(run_id=run.run_id)] == ["refund"]


def test_a_decided_gate_is_not_announced_any_more(database_url: str) -> None:
    clock = ManualClock()
    down = Recording("down", failures=100)
    with Harness(
        make_app([down]), database_url=database_url, clock=clock, sweep_interval=3600
    ) as h:
        run = h.start("refund", {"sku": "sku-1"})
        gate = h.gate(run.run_id)
        assert [row["sent_at"] for row in h.worker.runtime.notifications.status(gate.id)] == [None]
        h.decide(gate.id, "approved")
        h.wait(run.run_id)
        clock.advance(days=1)
        assert h.worker.runtime.notifications.send_due() == 0
        assert h.worker.runtime.notifications.status(gate.id) == []
        assert down.failures == 99  # tried once, at the gate; never after the decision

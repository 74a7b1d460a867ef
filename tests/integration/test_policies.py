"""Policies on the example desk (`examples/acme/policies/`): who may start, call and decide,
checked where remit enforces them, with every refusal recorded in the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from remit import App, DecisionRefused, PolicyDenied, RemitError
from remit.app import load_app
from remit.core.database import Database
from remit.core.schema import denials, ledger, runs
from remit.ops.reconciler import Reconciler
from remit.people.tasks import TaskOpener
from remit.policy.guard import Guard
from remit.testing import Harness, ManualClock

ROOT = Path(__file__).parent.parent.parent
ACME = ROOT / "examples" / "acme"

ANN, BOT, CAROL, DAVE, ROGUE = "user:ann", "agent:ar-bot", "user:carol", "user:dave", "agent:rogue"
PRINCIPALS = (ANN, BOT, CAROL, DAVE, ROGUE)

# Eight actions on the three kinds of resource, each with its context.
ACTIONS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "start chase": ("start", "ar.chase-invoice", {"input": {"invoice_id": "inv_1001"}}),
    "start write-off": ("start", "ar.write-off", {"input": {"invoice_id": "inv_1003"}}),
    "call invoice read": ("call", "payments.invoices.get", {"input": {"invoice_id": "inv_1"}}),
    "call credit note": (
        "call",
        "payments.credit_notes.create",
        {"input": {"invoice_id": "inv_1003", "amount": 100, "memo": "goodwill"}},
    ),
    "approve 612.50": ("decide", "write-off", {"decision": "approved", "draft": {"amount": 61250}}),
    "approve 400.00": ("decide", "write-off", {"decision": "approved", "draft": {"amount": 40000}}),
    "retry write-off": (
        "retry",
        "ar.write-off",
        {"input": {"invoice_id": "inv_1003"}, "status": "failed"},
    ),
    "resolve a task": (
        "resolve",
        "mail.messages.send",
        {"done": True, "workflow": "ar.chase-invoice", "input": {"invoice_id": "inv_1001"}},
    ),
}
A, H, D = "allow", "held", "deny"
EXPECTED: dict[str, tuple[str, ...]] = {
    #        chase wo-start read credit big small retry resolve
    ANN: (A, A, A, H, D, A, D, A),
    BOT: (A, A, A, H, D, A, D, A),
    CAROL: (A, A, A, A, A, A, A, A),
    DAVE: (D, D, D, D, D, D, D, D),
    ROGUE: (D, D, D, D, D, D, D, D),
}


@pytest.fixture(scope="module")
def desk() -> App:
    return load_app(ACME)


def _denials(db: Database) -> list[Any]:
    with db.engine.connect() as conn:
        return conn.execute(sa.select(denials).order_by(denials.c.at)).all()


def test_the_table_of_principals_actions_and_resources(desk: App, db: Database) -> None:
    guard = Guard.of(desk, db)
    got: dict[str, tuple[str, ...]] = {}
    for principal in PRINCIPALS:
        row = []
        for action, resource, context in ACTIONS.values():
            verdict = guard.check(principal, action, resource, context)  # type: ignore[arg-type]
            row.append(H if verdict.held else A if verdict.allowed else D)
        got[principal] = tuple(row)
    assert got == EXPECTED
    # Every refusal was recorded, with who, what and why.
    recorded = _denials(db)
    assert len(recorded) == sum(row.count(D) for row in EXPECTED.values()) == 20
    assert {(r.principal, r.action, r.resource) for r in recorded if r.principal == ANN} == {
        (ANN, "decide", "write-off"),
        (ANN, "retry", "ar.write-off"),
    }
    assert all(r.reason == "no policy permits it" for r in recorded)


def test_clerks_start_the_ar_app_s_workflows_but_credit_notes_and_none_of_the_root_s(
    desk: App, db: Database
) -> None:
    guard = Guard.of(desk, db)
    ar = desk.apps["ar"]
    assert ar == [
        "ar.chase-invoice",
        "ar.credit-line",
        "ar.credit-note",
        "ar.dunning",
        "ar.follow-up",
        "ar.write-off",
    ]
    crediting = ("ar.credit-note", "ar.credit-line")  # a controller's
    for name in ar:
        allowed = guard.check(ANN, "start", name, {"input": {"invoice_id": "inv_1"}}).allowed
        assert allowed == (name not in crediting), name
    for name in crediting:
        assert guard.check(CAROL, "start", name, {"input": {"invoice_id": "inv_1"}}).allowed
    for name in ("apply", "drift"):  # the root's: an admin's to start
        assert not guard.check(ANN, "start", name, {"input": {}}).allowed, name
        assert guard.check("user:sam", "start", name, {"input": {}}).allowed, name


def test_the_billing_system_issues_invoices_and_records_payments_only(
    desk: App, db: Database
) -> None:
    guard = Guard.of(desk, db)
    new = {"invoice_id": "inv_1", "customer_email": "a@b.example", "amount_due": 1}
    assert guard.check("agent:billing", "call", "payments.invoices.create", {"input": new}).allowed
    paid = {"input": {"invoice_id": "inv_1"}}
    assert guard.check("agent:billing", "call", "payments.invoices.pay", paid).allowed
    for action, resource in [
        ("call", "payments.credit_notes.create"),
        ("call", "mail.messages.send"),
        ("start", "ar.chase-invoice"),
    ]:
        assert not guard.check("agent:billing", action, resource, paid).allowed, resource
    # A clerk may neither issue an invoice nor say it was paid.
    assert not guard.check(ANN, "call", "payments.invoices.pay", paid).allowed


def test_unknown_combinations_are_denied(desk: App, db: Database) -> None:
    guard = Guard.of(desk, db)
    for principal, action, resource in [
        (ANN, "start", "no-such-workflow"),  # a resource the app does not have
        (ANN, "call", "mail.messages.send"),  # a write no policy names for clerks
        (ANN, "decide", "ar.chase-invoice"),  # a workflow's name as an approval type
        ("user:Ann", ANN, "x"),  # another spelling of a principal, an unknown action
        ("ann", "start", "ar.chase-invoice"),  # not a principal at all
        ("group:clerks", "start", "ar.chase-invoice"),  # a group does not act
    ]:
        verdict = guard.check(principal, action, resource, {})  # type: ignore[arg-type]
        assert not verdict.allowed, (principal, action, resource)
    assert (
        "not a principal policies know"
        in guard.check("ann", "start", "ar.chase-invoice", {}).reason
    )


def test_a_denied_start_names_who_what_and_which_and_writes_no_run(
    desk: App, database_url: str
) -> None:
    with Harness(desk, database_url=database_url) as h:
        with pytest.raises(PolicyDenied) as denied:
            h.start("ar.chase-invoice", {"invoice_id": "inv_1001"}, by=DAVE)
        assert str(denied.value) == (
            'user:dave may not start Workflow::"ar.chase-invoice": no policy permits it'
        )
        assert (denied.value.principal, denied.value.action, denied.value.resource) == (
            DAVE,
            "start",
            "ar.chase-invoice",
        )
        with h.worker.db.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar() == 0
        [recorded] = _denials(h.worker.db)
        assert recorded.context == {
            "input": {"invoice_id": "inv_1001", "customer_email": None, "as_of": "2026-11-29"}
        }
        run = h.start("ar.chase-invoice", {"invoice_id": "inv_1001"}, by=ANN)
        assert h.wait(run.run_id).status == "done"


def test_a_decision_over_the_clerks_limit_is_refused_and_a_controller_makes_it(
    desk: App, database_url: str
) -> None:
    with Harness(desk, database_url=database_url, actor=ANN) as h:
        run = h.start("ar.write-off", {"invoice_id": "inv_1003"})
        gate = h.gate(run.run_id)
        with pytest.raises(DecisionRefused) as refused:
            h.decide(gate.id, "approved", by=ANN)
        assert refused.value.reasons == [
            (gate.id, 'user:ann may not decide ApprovalType::"write-off": no policy permits it')
        ]
        assert h.approvals.get(gate.id).status == "pending"
        recorded = _denials(h.worker.db)[0]
        assert recorded.context["draft"]["amount"] == 61250
        assert recorded.context["approval"] == gate.id
        # A draft edited to name another invoice is refused, whoever decides.
        with pytest.raises(DecisionRefused) as moved:
            h.decide(gate.id, "approved", by=CAROL, edits={gate.id: {"invoice_id": "inv_1001"}})
        assert "forbidden by policies/acme.cedar:33" in moved.value.reasons[0][1]
        # The same clerk may approve once the edit brings it under the limit: the policy reads
        # the draft as it stands after the edits.
        decided = h.decide(gate.id, "approved", by=ANN, edits={gate.id: {"amount": 40000}})
        assert decided.decided[0].status == "approved"
        done = h.wait(run.run_id)
        assert (done.status, done.output["amount"]) == ("done", 40000)


def test_a_held_call_waits_for_a_controller_and_is_made_exactly_once(
    desk: App, database_url: str
) -> None:
    note = {"invoice_id": "inv_1003", "amount": 2500, "memo": "goodwill"}
    with Harness(desk, database_url=database_url, actor=ANN) as h:
        held = h.call("payments.credit_notes.create", note, by=ANN, key="goodwill-1")
        assert (held.status, held.note) == (
            "held",
            "a credit note issued by hand waits for a controller",
        )
        assert held.run_id is not None
        again = h.call("payments.credit_notes.create", note, by=ANN, key="goodwill-1")
        assert (again.run_id, again.replayed) == (held.run_id, True)
        gate = h.gate(held.run_id)
        assert (gate.type, gate.draft.op) == ("call", "payments.credit_notes.create")
        payments = h.fake("payments")
        assert payments.effects_of("payments.credit_notes.create") == []
        # A clerk may not approve it (only a controller decides a held call).
        with pytest.raises(DecisionRefused) as refused:
            h.decide(gate.id, "approved", by=ANN)
        assert "forbidden by policies/acme.cedar:113" in refused.value.reasons[0][1]
        assert payments.effects_of("payments.credit_notes.create") == []

        h.decide(gate.id, "approved", by=CAROL)
        done = h.wait(held.run_id)
        assert (done.status, done.output["outcome"]) == ("done", "called")
        [effect] = payments.effects_of("payments.credit_notes.create")
        assert effect.input == note
        with pytest.raises(DecisionRefused):
            h.decide(gate.id, "approved", by=CAROL)
        rows = [row for row in h.ledger(held.run_id) if row.op_id.endswith("credit_notes.create")]
        assert [(row.status, row.actor) for row in rows] == [("ok", ANN)]
    # A worker starting again over the same database makes no second call.
    with Harness(desk, database_url=database_url) as h2:
        assert h2.wait(held.run_id).status == "done"
        with h2.worker.db.engine.connect() as conn:
            count = conn.execute(
                sa.select(sa.func.count())
                .select_from(ledger)
                .where(ledger.c.op_id == "payments.credit_notes.create")
            ).scalar()
        assert count == 1


def test_a_direct_call_is_made_once_per_key_and_recorded_in_the_ledger(
    desk: App, database_url: str
) -> None:
    with Harness(desk, database_url=database_url) as h:
        first = h.call("payments.invoices.get", {"invoice_id": "inv_1001"}, by=BOT, key="look-1")
        assert (first.status, first.output["amount_due"]) == ("ok", 128_000)
        again = h.call("payments.invoices.get", {"invoice_id": "inv_1001"}, by=BOT, key="look-1")
        assert (again.output, again.replayed) == (first.output, True)
        [row] = h.ledger_store.list(limit=10)
        assert (row.op_id, row.actor, row.status, row.idempotency_key) == (
            "payments.invoices.get",
            BOT,
            "ok",
            "direct:look-1",
        )
        with pytest.raises(PolicyDenied, match='agent:rogue may not call Op::"payments'):
            h.call("payments.invoices.get", {"invoice_id": "inv_1001"}, by=ROGUE)
        with pytest.raises(PolicyDenied, match="no policy permits it"):
            h.call("mail.messages.send", {"to": "a@b.example", "subject": "s", "body": "b"}, by=ANN)
        assert len(h.ledger_store.list(limit=10)) == 1
        assert [(r.principal, r.action) for r in _denials(h.worker.db)] == [
            (ROGUE, "call"),
            (ANN, "call"),
        ]


def test_a_held_calls_edit_is_checked_as_the_call_will_be(desk: App, database_url: str) -> None:
    note = {"invoice_id": "inv_1003", "amount": 2500, "memo": "goodwill"}
    with Harness(desk, database_url=database_url, actor=ANN) as h:
        held = h.call("payments.credit_notes.create", note, by=ANN)
        assert held.run_id is not None
        gate = h.gate(held.run_id)
        for edit, reason in [
            ({"op": "mail.messages.send"}, "changing the op of a held call"),
            ({"input": {"amount": "lots"}}, "input.amount"),
            ({"input": {"nope": 1}}, "does not parse"),
        ]:
            with pytest.raises(DecisionRefused) as refused:
                h.decide(gate.id, "approved", by=CAROL, edits={gate.id: edit})
            assert reason in refused.value.reasons[0][1], (edit, refused.value.reasons)
        # An edit of one field keeps the others, and is what the call is made with.
        h.decide(gate.id, "approved", by=CAROL, edits={gate.id: {"input": {"amount": "1500"}}})
        assert h.wait(held.run_id).status == "done"
        [effect] = h.fake("payments").effects_of("payments.credit_notes.create")
        assert effect.input == {**note, "amount": 1500}


def test_the_call_workflow_is_not_started_by_hand(desk: App, database_url: str) -> None:
    with Harness(desk, database_url=database_url) as h:
        held = {
            "op": "mail.messages.send",
            "input": {"to": "a@b.example", "subject": "s", "body": "b"},
        }
        with pytest.raises(
            RemitError, match="is not started by hand: call the op with `remit call"
        ):
            h.start("call", held, by=CAROL)
        with pytest.raises(RemitError, match="principals are remit's own"):
            h.start("ar.chase-invoice", {"invoice_id": "inv_1001"}, by="remit:schedule")


def test_keyed_direct_calls_replay_refuse_conflicts_and_never_guess(
    desk: App, database_url: str
) -> None:
    with Harness(desk, database_url=database_url, actor=CAROL) as h:
        payments = h.fake("payments")
        read = {"invoice_id": "inv_1001"}
        h.call("payments.invoices.get", read, key="r1")
        again = h.call("payments.invoices.get", read, key="r1")
        assert again.replayed
        assert payments.calls.count(("payments.invoices.get", "direct:r1")) == 1
        with pytest.raises(RemitError, match="--key r1 was used for a call of other input"):
            h.call("payments.invoices.get", {"invoice_id": "inv_1003"}, key="r1")
        mail = {"to": "a@b.example", "subject": "s", "body": "b"}
        with pytest.raises(RemitError, match="--key r1 was used for a call of `payments"):
            h.call("mail.messages.send", mail, key="r1")
        # A non-idempotent write whose row says it started and never finished is not guessed at.
        h.call("mail.messages.send", mail, key="m1")
        with h.worker.db.begin() as conn:
            conn.execute(
                sa.update(ledger)
                .where(ledger.c.idempotency_key == "direct:m1")
                .values(status="started")
            )
        with pytest.raises(
            RemitError, match=r"outcome is not recorded \(started\): it may still be"
        ):
            h.call("mail.messages.send", mail, key="m1")
        assert len(h.fake("mail").effects_of("mail.messages.send")) == 1


def test_a_held_key_reused_for_another_call_is_refused(desk: App, database_url: str) -> None:
    note = {"invoice_id": "inv_1003", "amount": 2500, "memo": "goodwill"}
    with Harness(desk, database_url=database_url, actor=ANN) as h:
        h.call("payments.credit_notes.create", note, key="k")
        with pytest.raises(RemitError, match="--key k was used for a held call"):
            h.call("payments.credit_notes.create", {**note, "amount": 9999}, key="k")


def test_remits_own_channels_go_with_remits_own_principals(desk: App, database_url: str) -> None:
    with Harness(desk, database_url=database_url, actor=ANN) as h:
        run = h.start("ar.write-off", {"invoice_id": "inv_1003"})
        gate = h.gate(run.run_id)
        for by, via in [(ANN, "system"), ("remit:expiry", "cli")]:
            with pytest.raises(DecisionRefused, match="are remit's own, and go together"):
                h.decide(gate.id, "approved", by=by, via=via)
        assert h.approvals.get(gate.id).status == "pending"


def test_a_direct_write_cut_off_becomes_uncertain_with_one_task(
    desk: App, database_url: str
) -> None:
    clock = ManualClock()
    mail = {"to": "a@b.example", "subject": "s", "body": "b"}
    with Harness(desk, database_url=database_url, actor=CAROL, clock=clock) as h:
        h.call("mail.messages.send", mail, key="m1")
        # As if the process making it had died mid-call: its row still says `started`.
        with h.worker.db.begin() as conn:
            conn.execute(
                sa.update(ledger)
                .where(ledger.c.idempotency_key == "direct:m1")
                .values(status="started", finished_at=None)
            )
        reconciler = Reconciler(
            h.run_store,
            h.worker.client,
            version=h.app.version,
            live_versions=h.worker.live_versions,
            tasks=TaskOpener(h.worker.db, h.app.name),
        )
        assert [a.kind for a in reconciler.run_pass().actions] == []  # it may still be going
        clock.advance(hours=2)
        [action] = reconciler.run_pass().actions
        assert action.kind == "uncertain"
        assert "called directly by user:carol" in action.reason
        assert reconciler.run_pass().actions == []  # one task, not one per pass
        [task] = h.tasks.list()
        assert (task.op_id, task.idempotency_key, task.status) == (
            "mail.messages.send",
            "direct:m1",
            "open",
        )
        resolved = h.resolve(task.id, done=True, output={"message_id": "m-1", "to": "a@b.example"})
        assert resolved.resumed_workflow_id is None  # no run waits: the answer is recorded
        assert h.ledger_store.get("direct:m1").status == "ok"  # type: ignore[union-attr]

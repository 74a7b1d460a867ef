"""A record's activity: runs, gates and tasks that name a business record (an invoice) write
what happened about it, in the transaction that did it, and `Client.activity` reads it back in
order. Archiving a record cancels its pending gates as a decision the policies check."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from examples.acme.connectors.mail import FakeMail, Message, Sent
from pydantic import BaseModel

from remit import (
    App,
    AppError,
    ApprovalType,
    AsyncContext,
    CallContext,
    Context,
    DecisionRefused,
    DriverError,
    InputInvalid,
    load_app,
    workflow,
)
from remit.core.schema import activity as activity_table
from remit.core.schema import denials
from remit.testing import Harness
from tests.e2e.cli_support import ACME

INVOICE = {"invoice_id": "inv_1003", "reason": "customer in administration"}


class _TimedOutMail(FakeMail):
    """A mail API that sends the email but times out before it says so."""

    def send(self, input: Message, call: CallContext) -> Sent:
        super().send(input, call)
        raise DriverError("the mail API did not answer in time", retryable=True, status=504)


def _kinds(rows: list[Any]) -> list[tuple[str, str]]:
    return [(row.kind, row.actor) for row in rows]


def _count(harness: Harness) -> int:
    with harness.client.db.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(activity_table)).scalar())


def test_a_write_off_proposed_approved_with_edits_and_done_is_on_its_invoice(
    database_url: str,
) -> None:
    desk = load_app(ACME)
    with Harness(desk, database_url=database_url, actor="user:ann") as harness:
        run = harness.start("ar.write-off", INVOICE)
        gate = harness.gate(run.run_id)
        harness.decide(
            gate.id, "approved", by="user:carol", edits={"amount": 50000}, reason="settled"
        )
        assert harness.wait(run.run_id).status == "done"

        rows = harness.client.records.activity("invoice", "inv_1003")

    assert _kinds(rows) == [
        ("run.started", "user:ann"),
        ("approval.opened", "user:ann"),
        ("approval.approved", "user:carol"),
        ("run.done", "remit:run"),
    ]
    assert [row.id for row in rows] == sorted(row.id for row in rows)
    assert [row.at for row in rows] == sorted(row.at for row in rows)
    assert {row.run_id for row in rows} == {run.run_id}
    assert [row.target for row in rows] == [None, gate.id, gate.id, None]
    assert {(row.app, row.record_type, row.record_id) for row in rows} == {
        ("acme", "invoice", "inv_1003")
    }
    approved = rows[2]
    assert "approved with edits" in approved.summary
    assert "settled" in approved.summary
    assert approved.meta["edited_draft"]["amount"] == 50000
    assert approved.meta["via"] == "test"
    assert rows[3].summary == "ar.write-off done"
    # Served as it is: JSON, its time as text.
    served = json.loads(json.dumps([row.as_json() for row in rows]))
    assert served[0]["kind"] == "run.started"
    assert served[0]["at"] == rows[0].at.isoformat()


def test_a_write_whose_outcome_is_unknown_and_its_answer_are_on_the_invoice(
    database_url: str,
) -> None:
    desk = load_app(ACME)
    mail = _TimedOutMail()
    with Harness(
        desk, database_url=database_url, actor="user:ann", implementations={"mail": mail}
    ) as harness:
        run = harness.start("ar.write-off", INVOICE)
        gate = harness.gate(run.run_id)
        harness.decide(gate.id, "approved", by="user:carol", edits={"amount": 50000})
        task = harness.task(run.run_id)
        sent = {"message_id": "msg_8812", "to": "finance@fabrikam.example"}
        harness.resolve(task.id, done=True, output=sent)
        assert harness.wait(run.run_id).status == "done"

        rows = harness.client.records.activity("invoice", "inv_1003")

    assert _kinds(rows) == [
        ("run.started", "user:ann"),
        ("approval.opened", "user:ann"),
        ("approval.approved", "user:carol"),
        ("task.opened", "remit:ledger"),
        ("task.done", "user:ann"),
        ("run.done", "remit:run"),
    ]
    opened, answered = rows[3], rows[4]
    assert opened.target == answered.target == task.id
    assert opened.meta["op"] == "mail.messages.send"
    assert "mail.messages.send" in opened.summary
    assert task.id in opened.summary
    assert answered.meta["output"] == sent
    assert answered.summary.startswith("mail.messages.send happened, as user:ann confirmed")
    assert len(mail.outbox) == 1


def test_a_record_nothing_happened_about_has_no_activity(database_url: str) -> None:
    desk = load_app(ACME)
    with Harness(desk, database_url=database_url, actor="user:ann") as harness:
        harness.run("ar.chase-invoice", {"invoice_id": "inv_1001"})
        assert harness.client.records.activity("invoice", "inv_9999") == []
        assert harness.client.records.activity("customer", "inv_1001") == []
        # The chase is on its own invoice, started and done, and paged on by row id.
        first, second = harness.client.records.activity("invoice", "inv_1001")
        assert (first.kind, second.kind) == ("run.started", "run.done")
        assert harness.client.records.activity("invoice", "inv_1001", limit=1) == [first]
        assert harness.client.records.activity("invoice", "inv_1001", after=first.id) == [second]


# A small app: a workflow that names no record, one whose gates name their own, and an async
# one that names its run's record on its gate.


class OrderIn(BaseModel):
    order_id: str
    record: list[str] | None = None


class Check(BaseModel):
    order_id: str


@workflow(name="plain", input=OrderIn)
def plain(ctx: Context, input: OrderIn) -> dict[str, str]:
    decision = ctx.approval(
        "check", type="check", title=f"Check {input.order_id}", draft=Check(order_id=input.order_id)
    )
    return {"status": decision.status}


@workflow(name="gated", input=OrderIn)
def gated(ctx: Context, input: OrderIn) -> dict[str, str]:
    record = ("order", input.order_id) if input.record is None else tuple(input.record)
    decision = ctx.approval(
        "check",
        type="check",
        title=f"Check {input.order_id}",
        draft=Check(order_id=input.order_id),
        record=record,  # type: ignore[arg-type]
    )
    return {"status": decision.status}


@workflow(name="gated-async", input=OrderIn, record=lambda input: ("order", input.order_id))
async def gated_async(ctx: AsyncContext, input: OrderIn) -> dict[str, str]:
    decision = await ctx.approval(
        "check",
        type="check",
        title=f"Check {input.order_id}",
        draft=Check(order_id=input.order_id),
        record=("customer", "c-7"),
    )
    return {"status": decision.status}


@workflow(name="derives-badly", input=OrderIn, record=lambda input: ("order", ""))
def derives_badly(ctx: Context, input: OrderIn) -> None:
    return None


@workflow(name="derives-with-error", input=OrderIn, record=lambda input: input.missing)  # type: ignore[attr-defined]
def derives_with_error(ctx: Context, input: OrderIn) -> None:
    return None


def _orders() -> App:
    return App(
        name="orders",
        workflows=[plain, gated, gated_async, derives_badly, derives_with_error],
        approvals=[ApprovalType("check", draft=Check)],
    )


def test_a_run_that_names_no_record_writes_no_activity(database_url: str) -> None:
    with Harness(_orders(), database_url=database_url) as harness:
        run = harness.start("plain", {"order_id": "o-1"})
        gate = harness.gate(run.run_id)
        harness.decide(gate.id, "approved")
        assert harness.wait(run.run_id).status == "done"
        cancelled = harness.start("plain", {"order_id": "o-2"})
        harness.gate(cancelled.run_id)
        harness.client.runs.cancel(cancelled.run_id)

        assert _count(harness) == 0
        assert harness.client.records.activity("order", "o-1") == []


def test_a_run_started_with_a_record_passes_it_to_its_gates(database_url: str) -> None:
    with Harness(_orders(), database_url=database_url) as harness:
        run = harness.client.runs.start_row("plain", {"order_id": "o-1"}, record=("order", "o-1"))
        gate = harness.gate(run.run_id)
        harness.decide(gate.id, "rejected", by="user:olga", reason="no stock")
        assert harness.wait(run.run_id).status == "done"
        cancelled = harness.client.runs.start_row(
            "plain", {"order_id": "o-1"}, record=("order", "o-1")
        )
        harness.gate(cancelled.run_id)
        harness.client.runs.cancel(cancelled.run_id, by="user:olga")

        rows = harness.client.records.activity("order", "o-1")

    assert [(row.kind, row.actor, row.run_id) for row in rows] == [
        ("run.started", "user:test", run.run_id),
        ("approval.opened", "user:test", run.run_id),
        ("approval.rejected", "user:olga", run.run_id),
        ("run.done", "remit:run", run.run_id),
        ("run.started", "user:test", cancelled.run_id),
        ("approval.opened", "user:test", cancelled.run_id),
        ("approval.cancelled", "user:olga", cancelled.run_id),
        ("run.cancelled", "user:olga", cancelled.run_id),
    ]
    assert "no stock" in rows[2].summary


def test_a_gate_that_names_its_own_record_is_on_that_record_only(database_url: str) -> None:
    with Harness(_orders(), database_url=database_url) as harness:
        # A sync run with no record; its gate names the order.
        run = harness.start("gated", {"order_id": "o-5"})
        gate = harness.gate(run.run_id)
        harness.decide(gate.id, "approved", by="user:olga")
        assert harness.wait(run.run_id).status == "done"
        # An async run on the order (its workflow derives it); its gate names the customer.
        other = harness.start("gated-async", {"order_id": "o-6"})
        other_gate = harness.gate(other.run_id)
        harness.decide(other_gate.id, "rejected", by="user:olga")
        assert harness.wait(other.run_id).status == "done"

        assert _kinds(harness.client.records.activity("order", "o-5")) == [
            ("approval.opened", "user:test"),
            ("approval.approved", "user:olga"),
        ]
        assert _kinds(harness.client.records.activity("order", "o-6")) == [
            ("run.started", "user:test"),
            ("run.done", "remit:run"),
        ]
        customer = harness.client.records.activity("customer", "c-7")
        assert _kinds(customer) == [
            ("approval.opened", "user:test"),
            ("approval.rejected", "user:olga"),
        ]
        assert {row.run_id for row in customer} == {other.run_id}


def test_archiving_a_record_cancels_its_pending_gates_as_the_policies_allow(
    database_url: str,
) -> None:
    desk = load_app(ACME)
    with Harness(desk, database_url=database_url, actor="user:ann") as harness:
        runs = [harness.start("ar.write-off", INVOICE) for _ in range(2)]
        gates = sorted(harness.gate(run.run_id).id for run in runs)
        client = harness.client
        before = _count(harness)

        # dave is no one at the desk, and a clerk may not cancel a write-off over 500.00.
        for who in ("user:dave", "user:ann"):
            with pytest.raises(DecisionRefused) as refused:
                client.records.archive("invoice", "inv_1003", by=who, reason="closed")
            assert refused.value.by_policy
            assert {approval_id for approval_id, _ in refused.value.reasons} == set(gates)
        assert {client.services.approvals.get(g).status for g in gates} == {"pending"}
        assert _count(harness) == before
        with client.db.engine.connect() as conn:
            refusals = conn.execute(
                sa.select(denials.c.principal, denials.c.action, denials.c.context)
            ).all()
        assert {(row.principal, row.action) for row in refusals} == {
            ("user:dave", "decide"),
            ("user:ann", "decide"),
        }
        assert {row.context["decision"] for row in refusals} == {"cancelled"}

        archived = client.records.archive(
            "invoice", "inv_1003", by="user:carol", reason="customer dissolved"
        )

        assert not archived.replayed
        assert sorted(d.approval_id for d in archived.cancelled) == gates
        assert {d.status for d in archived.cancelled} == {"cancelled"}
        for gate_id in gates:
            approval = client.services.approvals.get(gate_id)
            assert (approval.status, approval.decided_by, approval.decided_via) == (
                "cancelled",
                "user:carol",
                "archive",
            )
            assert approval.reason == "customer dissolved"
            (audited,) = client.services.approvals.audit(gate_id)
            assert (audited["action"], audited["actor"]) == ("approval.cancelled", "user:carol")
            assert audited["meta"]["via"] == "archive"
        # Each run resumes, sees its gate cancelled, and ends as its code says.
        for run in runs:
            done = harness.wait(run.run_id)
            assert done.status == "done"
            assert done.output["outcome"] == "not written off (cancelled)"

        rows = client.records.activity("invoice", "inv_1003")
        assert [row.kind for row in rows].count("record.archived") == 1
        (row,) = [row for row in rows if row.kind == "record.archived"]
        assert row.actor == "user:carol"
        assert sorted(row.meta["cancelled"]) == gates
        assert "customer dissolved" in row.summary
        kinds = [row.kind for row in rows]
        assert kinds.index("record.archived") > max(
            i for i, kind in enumerate(kinds) if kind == "approval.cancelled"
        )
        assert kinds.count("run.done") == 2

        # A second archive finds nothing pending, and does nothing.
        count = _count(harness)
        again = client.records.archive("invoice", "inv_1003", by="user:carol")
        assert again.cancelled == ()
        assert not again.replayed
        assert _count(harness) == count
        assert again.as_json() == {
            "record_type": "invoice",
            "record_id": "inv_1003",
            "cancelled": [],
            "replayed": False,
        }


def test_a_record_no_one_could_name_is_refused_saying_what_to_change(
    database_url: str,
) -> None:
    with Harness(_orders(), database_url=database_url) as harness:
        client = harness.client
        bad = [
            (("order", ""), "its id is empty"),
            (("", "o-1"), "its type is empty"),
            (("   ", "o-1"), "its type is empty"),
            (("o" * 101, "o-1"), "its type is 101 characters long: give one of at most 100"),
            (("order", "o" * 201), "its id is 201 characters long: give one of at most 200"),
            (("order", "o-1\x1b[2J"), "its id holds control characters"),
            (("order",), "is not a (type, id) pair of strings"),
            (("order", 7), "is not a (type, id) pair of strings"),
        ]
        for record, problem in bad:
            with pytest.raises(InputInvalid) as refused:
                client.runs.start_row("plain", {"order_id": "o-1"}, record=record)  # type: ignore[arg-type]
            assert problem in str(refused.value), str(refused.value)
            assert "('invoice', 'inv_1003')" in str(refused.value)
        with pytest.raises(InputInvalid, match="its id is empty"):
            client.records.activity("order", "")
        with pytest.raises(InputInvalid, match="its type holds control characters"):
            client.records.archive("ord\ner", "o-1", by="user:olga")
        # What the workflow derives is checked as well, naming the workflow.
        with pytest.raises(InputInvalid, match=r"workflow `derives-badly`.*its id is empty"):
            client.runs.start_row("derives-badly", {"order_id": "o-1"})
        with pytest.raises(InputInvalid, match=r"workflow `derives-with-error`.*AttributeError"):
            client.runs.start_row("derives-with-error", {"order_id": "o-1"})
        assert client.runs.list() == []
        assert _count(harness) == 0

        # A gate naming a record no one could name fails its run, saying why.
        run = harness.run("gated", {"order_id": "o-1", "record": ["order", ""]})
        assert run.status == "failed"
        assert "approval `check`" in (run.error or "")
        assert "its id is empty" in (run.error or "")
        assert _count(harness) == 0


def test_a_workflow_record_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(AppError, match="record='order' is not a function"):
        workflow(name="odd", input=OrderIn, record="order")  # type: ignore[arg-type]

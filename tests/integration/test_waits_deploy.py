"""A deploy under runs that wait for a message or for their children: new code that puts a
`ctx.wait_for` or a `ctx.start` before where a run waits is named by the deploy check, and the
run fails on resuming with the check's words, having run nothing new: no message taken, no
child started, no op called. Behind `ctx.patch`, the same insert is the waiting run's past and
is skipped."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
import sqlalchemy as sa

from remit import App, Context, workflow
from remit.app import load_app
from remit.core.schema import waits
from remit.ops.deploy import DeployReport
from remit.testing import Harness
from tests.forked import run_remit
from tests.support import create_order, get_item, shop
from tests.waits_app import Awaiting, CreditNote, FakeShop, Line, Paid, refund_line
from tests.waits_workers import WAITS_CRASH_APP

# A payment: a read, a wait for the payment, an order. Versions differ before the wait.


@workflow(name="pay", input=Awaiting, uses=[get_item, create_order])
def pay_v1(ctx: Context, input: Awaiting) -> str:
    ctx.call(get_item, sku="sku-1")
    paid = ctx.wait_for("paid", model=Paid)
    assert paid is not None
    return ctx.call(create_order, sku="sku-1", quantity=1).order_id + f" {paid.reference}"


@workflow(name="pay", input=Awaiting, uses=[get_item, create_order])
def pay_waits_first(ctx: Context, input: Awaiting) -> str:
    ctx.call(get_item, sku="sku-1")
    ctx.wait_for("approved")
    paid = ctx.wait_for("paid", model=Paid)
    assert paid is not None
    return ctx.call(create_order, sku="sku-1", quantity=1).order_id + f" {paid.reference}"


@workflow(name="pay", input=Awaiting, uses=[get_item, create_order])
def pay_starts_first(ctx: Context, input: Awaiting) -> str:
    ctx.call(get_item, sku="sku-1")
    ctx.start(refund_line, Line(n=0), key="deposit")
    paid = ctx.wait_for("paid", model=Paid)
    assert paid is not None
    return ctx.call(create_order, sku="sku-1", quantity=1).order_id + f" {paid.reference}"


@workflow(name="pay", input=Awaiting, uses=[get_item, create_order])
def pay_patched(ctx: Context, input: Awaiting) -> str:
    ctx.call(get_item, sku="sku-1")
    if ctx.patch("approval"):
        ctx.wait_for("approved")
    paid = ctx.wait_for("paid", model=Paid)
    assert paid is not None
    return ctx.call(create_order, sku="sku-1", quantity=1).order_id + f" {paid.reference}"


# A split: a read, two children, then the wait for them. Versions differ before the wait.


@workflow(name="split", input=CreditNote, uses=[get_item])
def split_v1(ctx: Context, input: CreditNote) -> int:
    ctx.call(get_item, sku="sku-1")
    handles = [ctx.start(refund_line, Line(n=n, hold=True), key=f"line-{n}") for n in range(2)]
    return sum(r.doubled for r in ctx.wait_all(handles))


@workflow(name="split", input=CreditNote, uses=[get_item])
def split_starts_more(ctx: Context, input: CreditNote) -> int:
    ctx.call(get_item, sku="sku-1")
    handles = [ctx.start(refund_line, Line(n=n, hold=True), key=f"line-{n}") for n in range(2)]
    handles.append(ctx.start(refund_line, Line(n=9), key="line-extra"))
    return sum(r.doubled for r in ctx.wait_all(handles))


@workflow(name="split", input=CreditNote, uses=[get_item])
def split_waits_first(ctx: Context, input: CreditNote) -> int:
    ctx.call(get_item, sku="sku-1")
    handles = [ctx.start(refund_line, Line(n=n, hold=True), key=f"line-{n}") for n in range(2)]
    ctx.wait_for("approved")
    return sum(r.doubled for r in ctx.wait_all(handles))


def _app(*workflows: Any) -> App:
    return App(name="ledger", workflows=[*workflows, refund_line], connectors=[shop])


def _failing(report: DeployReport) -> dict[str, str]:
    return {c.run_id: c.failure or "" for c in report.failing}


def _message_waits(h: Harness, run_id: str) -> list[tuple[int, str | None]]:
    with h.worker.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(waits.c.step_id, waits.c.topic)
            .where(waits.c.run_id == run_id, waits.c.kind == "message")
            .order_by(waits.c.step_id)
        )
        return [(row.step_id, row.topic) for row in rows]


@pytest.mark.parametrize(
    ("version", "now_runs"),
    [
        (pay_waits_first, "a wait for a message on `approved`"),
        (pay_starts_first, "the start of a child run of `refund-line`"),
    ],
    ids=["wait_for", "start"],
)
def test_a_wait_or_start_inserted_before_a_waiting_message_fails_the_run_having_run_nothing(
    database_url: str, version: Any, now_runs: str
) -> None:
    fake = FakeShop()
    with Harness(_app(pay_v1), database_url=database_url, implementations={"shop": fake}) as h:
        run_id = h.start("pay", {}).run_id
        h.wait(run_id, until=("waiting",))
        h.wait_attempt_ended(run_id, 1)

    with Harness(_app(version), database_url=database_url, implementations={"shop": fake}) as h:
        report = h.deploy_check()
        failure = _failing(report)[run_id]
        assert "its step 2 ran a wait for a message on `paid`" in failure, failure
        assert f"now runs {now_runs} there" in failure, failure
        assert h.deploy_check(_app(pay_v1)).ok

        h.client.send(run_id, "paid", {"amount": "10", "reference": "pi_1"})
        run = h.wait(run_id)
        assert (run.status, run.error, run.attempt) == ("failed", failure, 2)
        # Nothing new ran: no order, no other wait, no child; the message is kept, not taken.
        assert (fake.reads, fake.orders) == (1, 0)
        assert _message_waits(h, run_id) == [(2, "paid")]
        assert h.client.runs.children(run_id) == []
        assert [m.status for m in h.client.runs.messages(run_id)] == ["queued"]
        assert [r.op_id for r in h.ledger(run_id)] == [get_item.id]


def test_a_patched_wait_before_a_waiting_message_is_skipped(database_url: str) -> None:
    fake = FakeShop()
    with Harness(_app(pay_v1), database_url=database_url, implementations={"shop": fake}) as h:
        run_id = h.start("pay", {}).run_id
        h.wait(run_id, until=("waiting",))
        h.wait_attempt_ended(run_id, 1)

    with Harness(_app(pay_patched), database_url=database_url, implementations={"shop": fake}) as h:
        assert h.deploy_check().ok
        h.client.send(run_id, "paid", {"amount": "10", "reference": "pi_1"})
        run = h.wait(run_id)
        assert (run.status, run.output) == ("done", "ord_1 pi_1"), run.error
        assert _message_waits(h, run_id) == [(2, "paid")]  # it never waited for `approved`
        assert fake.reads == 1


@pytest.mark.parametrize(
    ("version", "now_runs"),
    [
        (split_starts_more, "the start of a child run of `refund-line`"),
        (split_waits_first, "a wait for a message on `approved`"),
    ],
    ids=["start", "wait_for"],
)
def test_a_start_or_wait_inserted_before_a_wait_for_children_fails_the_parent_having_run_nothing(
    database_url: str, version: Any, now_runs: str
) -> None:
    fake = FakeShop()
    with Harness(_app(split_v1), database_url=database_url, implementations={"shop": fake}) as h:
        parent = h.start("split", {}).run_id
        h.wait(parent, until=("waiting",))
        h.wait_attempt_ended(parent, 1)
        kids = [k.run_id for k in h.client.runs.children(parent)]
        for kid in kids:
            h.wait(kid, until=("waiting",))

    with Harness(_app(version), database_url=database_url, implementations={"shop": fake}) as h:
        failure = _failing(h.deploy_check())[parent]
        assert "its step 4 ran a wait for child runs" in failure, failure
        assert f"now runs {now_runs} there" in failure, failure

        for kid in kids:  # the children end: their parent resumes, on the new code
            h.client.send(kid, "go", True)
            assert h.wait(kid).status == "done"
        run = h.wait(parent)
        assert (run.status, run.error, run.attempt) == ("failed", failure, 2)
        assert [k.run_id for k in h.client.runs.children(parent)] == kids  # none started
        assert _message_waits(h, parent) == []
        assert fake.reads == 1


def test_remit_deploy_check_names_an_inserted_wait_or_start(database_url: str) -> None:
    """`remit deploy check`, on the app folder's new code, names the waiting run and the step
    that differs, and exits 1."""
    with Harness(load_app(WAITS_CRASH_APP), database_url=database_url) as h:
        run_id = h.start("collect", {"count": 1}).run_id
        h.wait(run_id, until=("waiting",))
        h.wait_attempt_ended(run_id, 1)

    def check(variant: str) -> subprocess.CompletedProcess[Any]:
        env = {**os.environ, "REMIT_DATABASE_URL": database_url, "WAITS_VARIANT": variant}
        return run_remit(["--app", str(WAITS_CRASH_APP), "deploy", "check"], env=env)

    for variant, now_runs in [
        ("waits-first", "a wait for a message on `approved`"),
        ("starts-first", "the start of a child run of `line`"),
    ]:
        found = check(variant)
        assert found.returncode == 1, (variant, found.stdout, found.stderr)
        said = " ".join(found.stdout.split())
        assert f"would fail {run_id} (collect, waiting, resumes at step 1)" in said, said
        assert "its step 1 ran a wait for a message on `item`" in said, said
        assert f"now runs {now_runs} there" in said, said

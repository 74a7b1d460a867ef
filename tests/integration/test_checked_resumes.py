"""A deploy never runs a step a waiting run has passed.

Runs wait at a gate, sleep, hold a task or park on one version of the code; a new version adds,
removes, reorders or renames steps before where they wait; then they resume. Each either
carries on without running anything it had passed (a new step behind `ctx.patch` is skipped),
or fails naming the step, having run nothing new. A failed run carries on by `retry` once the
code is fixed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import (
    App,
    AsyncContext,
    Context,
    DriverError,
    PolicyDenied,
    RetryRefused,
    TaskRefused,
    workflow,
)
from remit.core.schema import audit, timers
from remit.people.tasks import Task
from remit.testing import Harness, ManualClock
from tests.integration.test_approval_outbox import decide_in_a_process_that_dies
from tests.support import (
    REFUND,
    FakeShop,
    Nap,
    Purchase,
    Refund,
    RefundDraft,
    create_order,
    get_item,
    make_app,
    send_email,
    shop,
)

GATE = {"sku": "sku-1", "quantity": 2}


def _draft(input: Refund) -> RefundDraft:
    return RefundDraft(sku=input.sku, quantity=input.quantity)


# The payout: a read, a gate, then the order. Versions differ before the gate.


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_v1(ctx: Context, input: Refund) -> dict[str, Any]:
    ctx.call(get_item, sku=input.sku)
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_patched(ctx: Context, input: Refund) -> dict[str, Any]:
    ctx.call(get_item, sku=input.sku)
    if ctx.patch("penny-test"):
        ctx.call(create_order, sku="penny", quantity=1)
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_inserted(ctx: Context, input: Refund) -> dict[str, Any]:
    ctx.call(get_item, sku=input.sku)
    ctx.call(create_order, sku="penny", quantity=1)
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_removed(ctx: Context, input: Refund) -> dict[str, Any]:
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_renamed(ctx: Context, input: Refund) -> dict[str, Any]:
    ctx.call(get_item, sku=input.sku)
    decision = ctx.approval("payout-2", type="refund", title="payout", draft=_draft(input))
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_reordered(ctx: Context, input: Refund) -> dict[str, Any]:
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    ctx.call(get_item, sku=input.sku)
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


@workflow(name="payout", input=Refund, uses=[get_item, create_order])
def payout_after(ctx: Context, input: Refund) -> dict[str, Any]:
    """A change after the gate only: the run's future, which new code may change freely."""
    ctx.call(get_item, sku=input.sku)
    decision = ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    ctx.call(create_order, sku="penny", quantity=1)
    order = ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)
    return {"order": order.order_id}


def _app(*workflows: Any) -> App:
    return App(name="shop", workflows=list(workflows), connectors=[shop], approvals=[REFUND])


def _pennies(fake: FakeShop) -> list[str]:
    return [e.idempotency_key for e in fake.effects if e.input.get("sku") == "penny"]


def _waiting_at_gate(database_url: str, count: int = 1) -> tuple[list[str], FakeShop]:
    with Harness(_app(payout_v1), database_url=database_url) as h:
        run_ids = [h.start("payout", GATE).run_id for _ in range(count)]
        for run_id in run_ids:
            h.gate(run_id)
        return run_ids, h.fake("shop", FakeShop)


def test_a_patched_step_before_the_gate_is_skipped_by_the_waiting_run(database_url: str) -> None:
    (run_id,), fake = _waiting_at_gate(database_url)
    with Harness(
        _app(payout_patched), database_url=database_url, implementations={"shop": fake}
    ) as h:
        h.decide(h.gate(run_id).id, "approved")
        run = h.wait(run_id)
        assert (run.status, run.attempt) == ("done", 2), run.error
        assert _pennies(fake) == []  # it had passed that point
        fresh = h.start("payout", GATE)
        h.decide(h.gate(fresh.run_id).id, "approved")
        assert h.wait(fresh.run_id).status == "done"
        assert _pennies(fake) == [f"{fresh.run_id}:3"]  # a run started after the deploy makes it
        # The gate passed with its decision: the order is for the approved quantity, once.
        assert [e.input["quantity"] for e in fake.effects if e.input["sku"] == "sku-1"] == [2, 2]


def test_an_unguarded_step_before_the_gate_fails_the_run_with_nothing_run(
    database_url: str,
) -> None:
    (run_id,), fake = _waiting_at_gate(database_url)
    with Harness(
        _app(payout_inserted), database_url=database_url, implementations={"shop": fake}
    ) as h:
        approval = h.gate(run_id)
        h.decide(approval.id, "approved")
        run = h.wait(run_id)
        assert run.status == "failed"
        assert run.error is not None
        assert f"code changed under run {run_id}: its step 2 ran the approval gate" in run.error
        assert "now runs `shop.orders.create` (an op call" in run.error
        assert "Nothing ran at that step" in run.error
        assert "ctx.patch" in run.error
        assert fake.effects == []  # no penny, no order
        assert [row.op_id for row in h.ledger(run_id)] == ["shop.items.get"]

    # Fixed by guarding the new step: a retry carries the run on from the gate, decided.
    with Harness(
        _app(payout_patched), database_url=database_url, implementations={"shop": fake}
    ) as h:
        retried = h.retry(run_id)
        assert (retried.attempt, retried.from_step, retried.replayed) == (3, 2, False)
        run = h.wait(run_id)
        assert (run.status, run.attempt) == ("done", 3), run.error
        assert _pennies(fake) == []
        assert [e.input for e in fake.effects] == [{"sku": "sku-1", "quantity": 2}]
        assert fake.reads == 1  # the read before the gate never ran again


@pytest.mark.parametrize(
    ("version", "step", "recorded", "now"),
    [
        (payout_removed, 1, "`shop.items.get` (an op call", "the approval gate `payout`"),
        (payout_renamed, 2, "the approval gate `payout`", "the approval gate `payout-2`"),
        (payout_reordered, 1, "`shop.items.get` (an op call", "the approval gate `payout`"),
    ],
    ids=["removed", "renamed", "reordered"],
)
def test_a_removed_renamed_or_reordered_step_fails_the_run_naming_it(
    database_url: str, version: Any, step: int, recorded: str, now: str
) -> None:
    (run_id,), fake = _waiting_at_gate(database_url)
    with Harness(_app(version), database_url=database_url, implementations={"shop": fake}) as h:
        h.decide(h.gate(run_id).id, "approved")
        run = h.wait(run_id)
        assert run.status == "failed"
        assert f"its step {step} ran {recorded}" in (run.error or "")
        assert f"now runs {now} there" in (run.error or "")
        assert (fake.effects, fake.reads) == ([], 1)


def test_a_change_after_the_gate_is_the_runs_future(database_url: str) -> None:
    (run_id,), fake = _waiting_at_gate(database_url)
    with Harness(
        _app(payout_after), database_url=database_url, implementations={"shop": fake}
    ) as h:
        h.decide(h.gate(run_id).id, "approved")
        run = h.wait(run_id)
        assert run.status == "done", run.error
        assert _pennies(fake) == [f"{run_id}:3"]


# A sleep: the wake time stays the one the run went to sleep with.


@workflow(name="rest", input=Nap, uses=[get_item, create_order])
def rest_v1(ctx: Context, input: Nap) -> str:
    ctx.call(get_item, sku=input.sku)
    ctx.sleep(input.seconds)
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


@workflow(name="rest", input=Nap, uses=[get_item, create_order])
def rest_patched(ctx: Context, input: Nap) -> str:
    ctx.call(get_item, sku=input.sku)
    if ctx.patch("penny-test"):
        ctx.call(create_order, sku="penny", quantity=1)
    ctx.sleep(input.seconds)
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


@workflow(name="rest", input=Nap, uses=[get_item, create_order])
def rest_inserted(ctx: Context, input: Nap) -> str:
    ctx.call(get_item, sku=input.sku)
    ctx.step("note", lambda: "a new step")
    ctx.sleep(input.seconds)
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


def _wake_times(h: Harness, run_id: str) -> list[Any]:
    with h.worker.db.engine.connect() as conn:
        return list(conn.execute(sa.select(timers.c.wake_at).where(timers.c.run_id == run_id)))


@pytest.mark.parametrize("guarded", [True, False], ids=["patched", "unguarded"])
def test_a_sleeping_run_wakes_at_its_own_time_past_a_new_step(
    database_url: str, guarded: bool
) -> None:
    clock = ManualClock()
    with Harness(_app(rest_v1), database_url=database_url, clock=clock) as h:
        run_id = h.start("rest", {"seconds": 3600}).run_id
        h.wait(run_id, until=("sleeping",))
        slept = _wake_times(h, run_id)
        fake = h.fake("shop", FakeShop)
    clock.advance(seconds=3601)
    version = rest_patched if guarded else rest_inserted
    with Harness(
        _app(version),
        database_url=database_url,
        clock=clock,
        sweep_interval=0.05,
        implementations={"shop": fake},
    ) as h:
        run = h.wait(run_id)
        assert _wake_times(h, run_id) == slept  # the one timer, with its first wake time
    if guarded:
        assert run.status == "done", run.error
        assert _pennies(fake) == []
        assert [e.input["sku"] for e in fake.effects] == ["sku-1"]
    else:
        assert run.status == "failed"
        assert (
            "its step 2 ran a sleep that suspends the run (longer than REMIT_SUSPEND_AFTER), and "
            "the code now runs `note` (a step)"
        ) in (run.error or "")
        assert fake.effects == []


# A task: the answer carries the run on past a new step it had passed.


def _mail(text: Callable[[Context], str]) -> Any:
    """A `mail` workflow whose email says `text(ctx)`."""

    @workflow(name="mail", input=Purchase, uses=[get_item, create_order, send_email])
    def mail(ctx: Context, input: Purchase) -> str:
        ctx.call(get_item, sku=input.sku)
        sent = ctx.call(send_email, to=input.email, text=text(ctx))
        ctx.call(create_order, sku=input.sku, quantity=1)
        return sent.message_id

    return mail


mail_v1 = _mail(lambda ctx: "hello")


@workflow(name="mail", input=Purchase, uses=[get_item, create_order, send_email])
def mail_patched(ctx: Context, input: Purchase) -> str:
    ctx.call(get_item, sku=input.sku)
    if ctx.patch("penny-test"):
        ctx.call(create_order, sku="penny", quantity=1)
    sent = ctx.call(send_email, to=input.email, text="hello")
    ctx.call(create_order, sku=input.sku, quantity=1)
    return sent.message_id


def _held_at_a_task(h: Harness) -> tuple[str, Task, FakeShop]:
    """A `mail` run whose email timed out: it waits at the task that asks whether it was sent."""
    fake = h.fake("shop", FakeShop)
    fake.failures[send_email.id].append(DriverError("gateway timeout", retryable=True, status=504))
    run_id = h.start("mail", {"sku": "sku-1"}).run_id
    return run_id, h.task(run_id), fake


def test_a_tasks_answer_carries_the_run_on_past_a_patched_step(database_url: str) -> None:
    with Harness(_app(mail_v1), database_url=database_url) as h:
        run_id, task, fake = _held_at_a_task(h)
    with Harness(
        _app(mail_patched), database_url=database_url, implementations={"shop": fake}
    ) as h:
        h.resolve(task.id, done=True, output={"message_id": "msg-by-hand"})
        run = h.wait(run_id)
    assert run.status == "done", run.error
    assert run.output == "msg-by-hand"
    assert _pennies(fake) == []
    assert [e.input["sku"] for e in fake.effects if e.op == create_order.id] == ["sku-1"]


mail_new_text = _mail(lambda ctx: "hello again")
mail_new_text_patched = _mail(lambda ctx: "hello again" if ctx.patch("new-text") else "hello")


@pytest.mark.parametrize("guarded", [True, False], ids=["patched", "unguarded"])
def test_a_call_held_at_a_task_resumes_on_the_input_it_began_with(
    database_url: str, guarded: bool
) -> None:
    """The check and the resume compare the call's input where it runs again: new code that
    gives it other input is refused by both, with the same message, and nothing is sent."""
    new = mail_new_text_patched if guarded else mail_new_text
    with Harness(_app(mail_v1), database_url=database_url) as h:
        run_id, task, fake = _held_at_a_task(h)
        check = h.deploy_check(_app(new))
    with Harness(_app(new), database_url=database_url, implementations={"shop": fake}) as h:
        h.resolve(task.id, done=True, output={"message_id": "msg-by-hand"})
        run = h.wait(run_id)
        later = h.wait(h.start("mail", {"sku": "sku-2"}).run_id)
    texts = [e.input["text"] for e in fake.effects if e.op == send_email.id]
    if guarded:
        assert check.ok, check.failing
        assert run.status == "done", run.error
        assert run.output == "msg-by-hand"
        assert texts == ["hello again"]  # the later run's, on the new path
    else:
        assert not check.ok
        [failing] = check.failing
        assert (failing.run_id, failing.resume_at) == (run_id, 2)
        said = (
            f"its step 2 began `{send_email.id}` (an op call, key {run_id}:2) on other input than "
            "it is given now (the code changed"
        )
        assert said in (failing.failure or "")
        assert run.status == "failed"
        assert run.error is not None
        assert said in run.error
        assert "ctx.patch('name')" in run.error
        assert texts == ["hello again"]  # the later run's only
    assert later.status == "done", later.error


# Pause: a parked run resumes past a new step before where it parked.


@workflow(name="steps", input=Purchase, uses=[create_order])
def steps_v1(ctx: Context, input: Purchase) -> str:
    first = ctx.call(create_order, sku=input.sku, quantity=1)
    ctx.step("after", lambda: "after")
    return first.order_id


@workflow(name="steps", input=Purchase, uses=[create_order])
def steps_patched(ctx: Context, input: Purchase) -> str:
    if ctx.patch("penny-test"):
        ctx.call(create_order, sku="penny", quantity=1)
    first = ctx.call(create_order, sku=input.sku, quantity=1)
    ctx.step("after", lambda: "after")
    return first.order_id


def test_a_parked_run_resumes_past_a_patched_step(database_url: str) -> None:
    with Harness(_app(steps_v1), database_url=database_url, sweep_interval=0.05) as h:
        fake = h.fake("shop", FakeShop)
        fake.gate = threading.Event()
        run_id = h.start("steps", {"sku": "sku-1"}).run_id
        assert fake.entered.wait(10)
        h.worker.app_state.pause(by="user:ops")
        h.worker.runtime.paused.set()
        fake.gate.set()
        assert h.wait(run_id, until=("paused",)).status == "paused"
    with Harness(
        _app(steps_patched),
        database_url=database_url,
        sweep_interval=0.05,
        implementations={"shop": fake},
    ) as h:
        h.worker.app_state.resume(by="user:ops")
        run = h.wait(run_id)
    assert (run.status, run.attempt) == ("done", 2), run.error
    assert _pennies(fake) == []
    assert fake.orders == 1


# Retry.


@workflow(name="flaky", input=Purchase, uses=[get_item, create_order, send_email])
def flaky_v1(ctx: Context, input: Purchase) -> str:
    ctx.call(get_item, sku=input.sku)
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    ctx.call(send_email, to=input.email, text=f"ordered {order.order_id}")
    return order.order_id


def test_retry_carries_a_failed_run_on_after_its_last_finished_step(database_url: str) -> None:
    with Harness(_app(flaky_v1), database_url=database_url) as h:
        fake = h.fake("shop", FakeShop)
        fake.failures[create_order.id].append(DriverError("no stock", retryable=False, status=409))
        run = h.run("flaky", {"sku": "sku-1"})
        assert run.status == "failed"
        assert fake.orders == 0

        with pytest.raises(RetryRefused, match="cannot carry on from step 3"):
            h.retry(run.run_id, from_step=3)
        retried = h.retry(run.run_id, key="retry-1")
        assert (retried.attempt, retried.from_step) == (2, 2)
        done = h.wait(run.run_id)
        assert (done.status, done.attempt, done.error) == ("done", 2, None), done.error
        assert (fake.reads, fake.orders) == (1, 1)  # the read was copied; the order called again

        again = h.retry(run.run_id, key="retry-1")  # the same key: the first result
        assert (again.replayed, again.workflow_id) == (True, retried.workflow_id)
        with pytest.raises(RetryRefused, match="is done: only a failed or cancelled"):
            h.retry(run.run_id, key="retry-2")
        with h.worker.db.engine.connect() as conn:
            rows = list(conn.execute(sa.select(audit).where(audit.c.action == "run.retry")))
        assert [(row.actor, row.target, row.meta["from_step"]) for row in rows] == [
            ("user:test", run.run_id, 2)
        ]


class Checked(BaseModel):
    sku: str
    checked: bool = False


@workflow(name="checked", input=Checked, uses=[get_item, create_order])
def checked_v1(ctx: Context, input: Checked) -> str:
    ctx.call(get_item, sku=input.sku)
    ctx.step("check", lambda: _must_be_checked(input.checked))
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


@workflow(name="checked", input=Checked, uses=[get_item, create_order])
def checked_fixed(ctx: Context, input: Checked) -> str:
    ctx.call(get_item, sku=input.sku)
    checked = input.checked
    if ctx.patch("look-it-up"):
        checked = ctx.step("look it up", lambda: True)
    ctx.step("check", lambda: _must_be_checked(checked))
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


def _must_be_checked(checked: bool) -> bool:
    if not checked:
        raise ValueError("not checked")
    return True


def test_a_patch_before_the_step_a_run_failed_at_is_taken_by_its_retry(
    database_url: str,
) -> None:
    """The run stopped at the failed step's end, and nothing began after it: the fix behind
    `ctx.patch`, placed where the run resumes, runs, as the failure's message advises."""
    with Harness(_app(checked_v1), database_url=database_url) as h:
        run = h.run("checked", {"sku": "sku-1"})
        assert run.status == "failed"
        assert "not checked" in (run.error or "")
    with Harness(_app(checked_fixed), database_url=database_url) as h:
        h.retry(run.run_id)
        done = h.wait(run.run_id)
        names = [s["function_name"] for s in h.steps(run.run_id, 2)]
    assert done.status == "done", done.error
    assert names == [get_item.id, "DBOS.patch-look-it-up", "look it up", "check", create_order.id]


def test_retry_from_a_step_replays_a_write_that_succeeded(database_url: str) -> None:
    with Harness(_app(flaky_v1), database_url=database_url) as h:
        fake = h.fake("shop", FakeShop)
        fake.failures[send_email.id].append(
            DriverError("mailbox full", retryable=False, status=422)
        )
        run = h.run("flaky", {"sku": "sku-1"})
        assert run.status == "failed"
        assert [row.status for row in h.ledger(run.run_id)] == ["ok", "ok", "failed"]

        h.retry(run.run_id, from_step=1)
        done = h.wait(run.run_id)
        assert (done.status, done.attempt) == ("done", 2), done.error
        # From step 1: the read runs again, the order that succeeded replays its result (not
        # made again), and the email that failed is sent, once.
        assert (fake.reads, fake.orders) == (2, 1)
        assert [e.op for e in fake.effects] == [create_order.id, send_email.id]
        assert [row.status for row in h.ledger(run.run_id)] == ["ok", "ok", "ok"]


def test_a_cancelled_run_retried_waits_at_its_gate_again(database_url: str) -> None:
    with Harness(_app(payout_v1), database_url=database_url) as h:
        run_id = h.start("payout", GATE).run_id
        approval = h.gate(run_id)
        h.client.runs.cancel(run_id, by="user:ops")
        assert h.approvals.get(approval.id).status == "cancelled"
        retried = h.retry(run_id)
        assert retried.from_step == 2
        again = h.gate(run_id)
        assert (again.id, again.status) == (approval.id, "pending")
        h.decide(again.id, "approved", edits={"quantity": 3})  # one approval: its fields alone
        run = h.wait(run_id)
        assert (run.status, run.attempt) == ("done", 3), run.error
        fake = h.fake("shop", FakeShop)
        assert (fake.reads, [e.input["quantity"] for e in fake.effects]) == (1, [3])


def test_retry_is_refused_by_the_policies(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "runs.cedar").write_text(
        'permit (principal == User::"ann", action == Action::"start", resource);\n'
        'permit (principal == User::"carol", action, resource);\n'
    )
    app = _app(flaky_v1)
    app.use_policies(tmp_path / "policies")
    with Harness(app, database_url=database_url, actor="user:ann") as h:
        h.fake("shop", FakeShop).failures[create_order.id] += [
            DriverError("no", retryable=False, status=409)
        ]
        run = h.run("flaky", {"sku": "sku-1"})
        with pytest.raises(PolicyDenied, match='user:ann may not retry Workflow::"flaky"'):
            h.retry(run.run_id)
        assert h.runs.get(run.run_id).status == "failed"
        assert h.retry(run.run_id, by="user:carol").attempt == 2
        assert h.wait(run.run_id).status == "done"


# An async workflow is checked the same way.


@workflow(name="payout-async", input=Refund, uses=[get_item, create_order])
async def payout_async_v1(ctx: AsyncContext, input: Refund) -> str:
    await ctx.call(get_item, sku=input.sku)
    decision = await ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    return (await ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)).order_id


@workflow(name="payout-async", input=Refund, uses=[get_item, create_order])
async def payout_async_patched(ctx: AsyncContext, input: Refund) -> str:
    await ctx.call(get_item, sku=input.sku)
    if await ctx.patch("penny-test"):
        await ctx.call(create_order, sku="penny", quantity=1)
    decision = await ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    return (await ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)).order_id


@workflow(name="payout-async", input=Refund, uses=[get_item, create_order])
async def payout_async_inserted(ctx: AsyncContext, input: Refund) -> str:
    await ctx.call(get_item, sku=input.sku)
    await ctx.step("note", lambda: "a new step")
    decision = await ctx.approval("payout", type="refund", title="payout", draft=_draft(input))
    return (await ctx.call(create_order, sku=input.sku, quantity=decision.draft.quantity)).order_id


def test_an_async_run_is_checked_too(database_url: str) -> None:
    with Harness(_app(payout_async_v1), database_url=database_url) as h:
        run_ids = [h.start("payout-async", GATE).run_id for _ in range(2)]
        gates = [h.gate(run_id) for run_id in run_ids]
        fake = h.fake("shop", FakeShop)
        report = h.deploy_check(_app(payout_async_inserted))
        assert [bool(check.failure) for check in report.checked] == [True, True]
        assert h.deploy_check(_app(payout_async_patched)).ok
    with Harness(
        _app(payout_async_inserted), database_url=database_url, implementations={"shop": fake}
    ) as h:
        h.decide(gates[0].id, "approved")
        failed = h.wait(run_ids[0])
    assert failed.status == "failed"
    assert failed.error == report.checked[0].failure
    with Harness(
        _app(payout_async_patched), database_url=database_url, implementations={"shop": fake}
    ) as h:
        h.decide(gates[1].id, "approved")
        done = h.wait(run_ids[1])
    assert done.status == "done", done.error
    assert fake.effects[0].input == {"sku": "sku-1", "quantity": 2}
    assert (len(fake.effects), _pennies(fake)) == (1, [])


def test_a_tasks_answer_is_checked_by_the_policies(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "tasks.cedar").write_text(
        'permit (principal, action == Action::"start", resource);\n'
        'permit (principal == User::"carol", action == Action::"resolve", resource)\n'
        "when { context.done };\n"
    )
    app = _app(mail_v1)
    app.use_policies(tmp_path / "policies")
    with Harness(app, database_url=database_url, actor="user:ann") as h:
        fake = h.fake("shop", FakeShop)
        fake.failures[send_email.id].append(DriverError("timeout", retryable=True, status=504))
        run_id = h.start("mail", {"sku": "sku-1"}).run_id
        task = h.task(run_id)
        with pytest.raises(
            TaskRefused, match=re.escape('user:ann may not resolve Op::"shop.emails.send"')
        ) as refused:
            h.resolve(task.id, done=True, output={"message_id": "m-1"})
        assert refused.value.by_policy  # the policies' is the only reason: 403 over HTTP
        with pytest.raises(
            TaskRefused, match=re.escape('user:carol may not resolve Op::"shop.emails.send"')
        ):
            h.resolve(task.id, done=False, by="user:carol")
        assert h.tasks.get(task.id).status == "open"
        assert [(d.principal, d.action, d.resource) for d in h.worker.guard.denials()] == [
            ("user:carol", "resolve", "shop.emails.send"),
            ("user:ann", "resolve", "shop.emails.send"),
        ]
        h.resolve(task.id, done=True, output={"message_id": "m-1"}, by="user:carol")
        assert h.wait(run_id).output == "m-1"


# Retrying from an earlier step: the steps after it that the run had passed stay as they were.


@workflow(name="order-mail-gate", input=Purchase, uses=[get_item, create_order, send_email])
def omg_v1(ctx: Context, input: Purchase) -> str:
    ctx.call(get_item, sku=input.sku)
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    ctx.call(send_email, to=input.email, text=f"ordered {order.order_id}")
    ctx.approval("close", type="refund", title="close", draft=RefundDraft(sku="x", quantity=1))
    return order.order_id


@workflow(name="order-mail-gate", input=Purchase, uses=[get_item, create_order, send_email])
def omg_patched(ctx: Context, input: Purchase) -> str:
    ctx.call(get_item, sku=input.sku)
    if ctx.patch("note"):
        ctx.step("note", lambda: RAN_NOTES.append(ctx.run_id))
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    ctx.call(send_email, to=input.email, text=f"ordered {order.order_id}")
    ctx.approval("close", type="refund", title="close", draft=RefundDraft(sku="x", quantity=1))
    return order.order_id


RAN_NOTES: list[str] = []


def test_a_retry_from_an_earlier_step_keeps_the_passed_writes_where_they_were(
    database_url: str,
) -> None:
    with Harness(_app(omg_v1), database_url=database_url) as h:
        fake = h.fake("shop", FakeShop)
        fake.failures[send_email.id].append(DriverError("full", retryable=False, status=422))
        run_id = h.start("order-mail-gate", {"sku": "sku-1"}).run_id
        assert h.wait(run_id).status == "failed"
    with Harness(_app(omg_patched), database_url=database_url, implementations={"shop": fake}) as h:
        h.retry(run_id, from_step=1)
        gate = h.gate(run_id)  # attempt 2 waits at the gate, past the order and the email
        assert h.deploy_check().ok  # the same code resumes it: nothing stale stands in the way
        h.decide(gate.id, "approved")
        run = h.wait(run_id)
    assert (run.status, run.attempt) == ("done", 3), run.error
    # The patch is False where the run had ordered: no note, and the order is made once.
    assert run_id not in RAN_NOTES
    assert [e.idempotency_key for e in fake.effects if e.op == create_order.id] == [f"{run_id}:2"]
    assert [e.op for e in fake.effects].count(send_email.id) == 1


def test_retrying_a_cancelled_run_whose_resume_was_still_in_the_outbox(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url, sweep_interval=3600) as h:
        run_id = h.start("refund", {"sku": "sku-1"}).run_id
        gate = h.gate(run_id)
        # The decider dies between its commit and the fork: attempt 2 is only in the outbox.
        decide_in_a_process_that_dies(database_url, gate.id, "dies-1")
        h.client.runs.cancel(run_id, by="user:ops")
        retried = h.retry(run_id)
        assert (retried.from_step, retried.attempt) == (2, 3)  # from the gate, not step 1
        run = h.wait(run_id)
    assert (run.status, run.attempt) == ("done", 3), run.error
    fake = h.fake("shop", FakeShop)
    assert (fake.reads, [e.input["quantity"] for e in fake.effects]) == (1, [3])

"""A deploy is a non-event: runs stopped mid-attempt by a redeploy carry on under the new code
from their last finished step, and a change that no longer matches a run's steps fails the run
saying where, having run nothing at that step."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remit import App, Context, workflow
from remit.core.ledger import LedgerStore
from remit.testing import Harness, ManualClock
from tests.forked import run_remit
from tests.processes import Workers
from tests.support import (
    REFUND,
    FakeShop,
    Nap,
    Refund,
    RefundDraft,
    create_order,
    get_item,
    make_app,
    shop,
)

# Half a minute or more of worker processes: `make check` leaves these to `make test`.
pytestmark = pytest.mark.slow

FAST = {
    "REMIT_HEARTBEAT_INTERVAL": "0.25",
    "REMIT_DEAD_AFTER": "1.5",
    "REMIT_RECONCILE_INTERVAL": "0.5",
}


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    procs = Workers(database_url, tmp_path, **FAST)
    yield procs
    procs.close()


def stopped_mid_run(workers: Workers) -> str:
    """A payout under the first code, stopped (its worker killed) at its `between` step, after
    the first transfer."""
    workers.hold_at("between")
    old = workers.start("old")
    run_id = workers.remit("start", "payout", "--input", '{"account": "acc-1", "amount": 100}')
    workers.wait_reached("between", old)
    old.send_signal(signal.SIGKILL)
    old.wait(10)
    workers.release("between")
    return run_id


def test_a_run_stopped_by_a_redeploy_finishes_on_the_new_code(workers: Workers) -> None:
    run_id = stopped_mid_run(workers)
    workers.wait_serving(workers.start("new", CRASH_VARIANT="thanks"))

    run = workers.wait_finished(run_id)

    assert run.status == "done", run.error
    assert run.output is not None
    assert run.output["note"] == "thanks"  # the new code's step ran
    assert run.attempt == 2
    keys = sorted(e["idempotency_key"] for e in workers.effects())
    assert keys == [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]  # each write once
    rows = LedgerStore(workers.db).list(run_id=run_id)
    assert [(row.op_id, row.attempt) for row in rows] == [
        ("bank.accounts.read", 1),
        ("bank.transfers.create", 1),
        ("bank.transfers.create", 2),
        ("bank.letters.post", 2),
    ]
    workers.wait_in_log(1, "reattempt")  # logged once the fork it made has returned


def test_a_change_that_no_longer_matches_the_steps_fails_the_run_saying_where(
    workers: Workers,
) -> None:
    run_id = stopped_mid_run(workers)
    workers.wait_serving(workers.start("new", CRASH_VARIANT="reordered"))

    run = workers.wait_finished(run_id)

    assert run.status == "failed"
    assert f"code changed under run {run_id}: its step 2 ran `bank.transfers.create`" in (
        run.error or ""
    )
    assert "now runs `audit` (a step) there. Nothing ran at that step" in (run.error or "")
    assert "ctx.patch" in (run.error or "")
    # Only the write made before the redeploy happened; nothing was re-run or run out of order.
    assert [e["idempotency_key"] for e in workers.effects()] == [f"{run_id}:2"]


def finish_old_and_new(workers: Workers, run_id: str) -> tuple[str, list[str], list[str]]:
    """Wait for the stopped run to finish on the new code, start a new run and wait for it:
    the new run's id, and the steps of the old run's second attempt and of the new run."""
    old_run = workers.wait_finished(run_id)
    new_run_id = workers.remit("start", "payout", "--input", '{"account": "acc-2", "amount": 10}')
    new_run = workers.wait_finished(new_run_id)
    assert (old_run.status, new_run.status) == ("done", "done"), (old_run.error, new_run.error)
    client = workers.db.client("crash-app")
    try:
        old_steps = [s["function_name"] for s in client.list_workflow_steps(f"{run_id}:2")]
        new_steps = [s["function_name"] for s in client.list_workflow_steps(f"{new_run_id}:1")]
    finally:
        client.destroy()
    return new_run_id, old_steps, new_steps


def test_a_patched_change_keeps_old_runs_on_their_path(workers: Workers) -> None:
    run_id = stopped_mid_run(workers)
    new = workers.start("new", CRASH_VARIANT="patched")
    workers.wait_serving(new)

    new_run_id, old_steps, new_steps = finish_old_and_new(workers, run_id)
    assert "audit" not in old_steps  # it had passed that point before the change
    assert "audit" in new_steps
    keys = sorted(e["idempotency_key"] for e in workers.effects())
    old_keys = [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]
    assert keys == sorted([*old_keys, f"{new_run_id}:4", f"{new_run_id}:6", f"{new_run_id}:7"])


def test_a_patch_where_a_step_was_cut_off_keeps_the_run_on_its_old_path(
    workers: Workers,
) -> None:
    """The run was killed inside `between`, which recorded nothing: it had reached that
    position, so a patch placed there is False for it, and the check replays it the same way."""
    run_id = stopped_mid_run(workers)
    variant = {**workers.env, "CRASH_VARIANT": "patched-between"}
    check = run_remit(["--app", str(workers.app), "deploy", "check"], env=variant)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 of 1 unfinished run would carry on, 0 would fail" in check.stdout
    workers.wait_serving(workers.start("new", CRASH_VARIANT="patched-between"))

    new_run_id, old_steps, new_steps = finish_old_and_new(workers, run_id)
    assert "audit" not in old_steps
    assert old_steps[2] == "between"
    assert "audit" in new_steps
    keys = sorted(e["idempotency_key"] for e in workers.effects())
    old_keys = [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]
    new_keys = [f"{new_run_id}:2", f"{new_run_id}:6", f"{new_run_id}:7"]  # after the patch
    assert keys == sorted([*old_keys, *new_keys])


def cut_off_in_a_write(workers: Workers) -> str:
    """A payout under the first code, its worker killed inside its first transfer: the bank
    applied it (the fake's journal), the worker never recorded it."""
    workers.hold_at("bank.transfers.create")
    old = workers.start("old")
    run_id = workers.remit("start", "payout", "--input", '{"account": "acc-1", "amount": 100}')
    workers.kill_when_reached(old, "bank.transfers.create")
    old.wait(10)
    workers.release("bank.transfers.create")
    assert [e["idempotency_key"] for e in workers.effects()] == [f"{run_id}:2"]
    return run_id


def test_a_write_cut_off_then_a_step_inserted_before_it_fails_without_calling_it(
    workers: Workers,
) -> None:
    run_id = cut_off_in_a_write(workers)
    workers.wait_serving(workers.start("new", CRASH_VARIANT="reordered"))

    run = workers.wait_finished(run_id)

    assert run.status == "failed"
    assert (
        f"its step 2 ran `bank.transfers.create` (an op call, key {run_id}:2), and the code now "
        "runs `audit` (a step) there"
    ) in (run.error or "")
    # The key cannot move: the write is not made again under another one.
    assert [e["idempotency_key"] for e in workers.effects()] == [f"{run_id}:2"]
    rows = LedgerStore(workers.db).list(run_id=run_id)
    assert [row.idempotency_key for row in rows] == [f"{run_id}:1", f"{run_id}:2"]
    # The cut-off write stays unknown: `started`, or `uncertain` (with its task) once a
    # reconciler pass has seen the run fail.
    assert rows[0].status == "ok"
    assert rows[1].status in ("started", "uncertain")


def test_a_write_cut_off_then_a_patched_step_before_it_is_applied_once(workers: Workers) -> None:
    run_id = cut_off_in_a_write(workers)
    workers.wait_serving(workers.start("new", CRASH_VARIANT="patched"))

    run = workers.wait_finished(run_id)

    assert run.status == "done", run.error
    keys = [e["idempotency_key"] for e in workers.effects()]
    assert sorted(set(keys)) == [f"{run_id}:2", f"{run_id}:4", f"{run_id}:5"]
    assert keys.count(f"{run_id}:2") == 1  # called again with its key: applied once


def test_a_write_cut_off_then_given_other_input_fails_at_the_check_and_the_resume_alike(
    workers: Workers,
) -> None:
    """An idempotent write cut off mid-call is called again under its key on resume, with the
    input it began with: new code that changes that input is refused by `remit deploy check`
    and by the resume, with one message, and the vendor is not called again."""
    run_id = cut_off_in_a_write(workers)
    variant = {**workers.env, "CRASH_VARIANT": "rounded"}
    check = run_remit(["--app", str(workers.app), "deploy", "check"], env=variant)
    said = (
        f"its step 2 began `bank.transfers.create` (an op call, key {run_id}:2) on other input "
        "than it is given now"
    )
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"would fail {run_id} (payout, running, resumes at step 2)" in check.stdout
    assert said in check.stdout.replace("\n", "")
    workers.wait_serving(workers.start("new", CRASH_VARIANT="rounded"))

    run = workers.wait_finished(run_id)

    assert run.status == "failed"
    assert said in (run.error or "")
    assert [e["idempotency_key"] for e in workers.effects()] == [f"{run_id}:2"]


def test_a_build_version_recovered_on_other_code_is_checked_too(workers: Workers) -> None:
    """REMIT_VERSION gives two builds one version, so DBOS recovers the first attempt on the
    new code: the write cut off at step 2 still stands there, and the inserted step does not
    run in its place."""
    workers.hold_at("bank.transfers.create")
    old = workers.start("w-same", REMIT_VERSION="build-7")
    run_id = workers.remit("start", "payout", "--input", '{"account": "acc-1", "amount": 100}')
    workers.kill_when_reached(old, "bank.transfers.create")
    old.wait(10)
    workers.release("bank.transfers.create")
    workers.wait_serving(
        workers.start("w-same", REMIT_VERSION="build-7", CRASH_VARIANT="reordered")
    )

    run = workers.wait_finished(run_id)

    assert (run.status, run.attempt, run.version) == ("failed", 1, "build-7")
    assert "its step 2 ran `bank.transfers.create`" in (run.error or "")
    assert "now runs `audit` (a step) there" in (run.error or "")
    assert [e["idempotency_key"] for e in workers.effects()] == [f"{run_id}:2"]


@workflow(name="refund", input=Refund, uses=[get_item, create_order])
def refund_v2(ctx: Context, input: Refund) -> dict[str, Any]:
    """`refund` redeployed: the same steps, and a receipt step at the end."""
    item = ctx.call(get_item, sku=input.sku)
    decision = ctx.approval(
        "refund",
        type="refund",
        title=f"Refund {input.quantity} x {input.sku} at {item.price}",
        draft=RefundDraft(sku=input.sku, quantity=input.quantity),
    )
    order = ctx.call(create_order, sku=decision.draft.sku, quantity=decision.draft.quantity)
    receipt = ctx.step("receipt", lambda: f"receipt for {order.order_id}")
    return {"status": decision.status, "receipt": receipt}


@workflow(name="nap", input=Nap, uses=[get_item, create_order])
def nap_v2(ctx: Context, input: Nap) -> dict[str, Any]:
    """`nap` redeployed: the same steps, and a note at the end."""
    ctx.call(get_item, sku=input.sku)
    ctx.sleep(input.seconds)
    order = ctx.call(create_order, sku=input.sku, quantity=1)
    return {"order_id": order.order_id, "note": ctx.step("note", lambda: "v2")}


def test_runs_parked_at_gates_and_asleep_finish_on_redeployed_code(database_url: str) -> None:
    clock = ManualClock()
    v1 = make_app()
    v2 = App(name="shop", workflows=[refund_v2, nap_v2], connectors=[shop], approvals=[REFUND])
    assert v1.version != v2.version
    with Harness(v1, database_url=database_url, clock=clock, sweep_interval=0.05) as h:
        gated = [h.start("refund", {"sku": "sku-1"}).run_id for _ in range(20)]
        asleep = [h.start("nap", {}).run_id for _ in range(20)]
        for run_id in gated:
            h.gate(run_id)
        for run_id in asleep:
            h.wait(run_id, until=("sleeping",))
        fake = h.fake("shop", FakeShop)
        assert (fake.reads, fake.orders) == (40, 0)

    with Harness(
        v2,
        database_url=database_url,
        clock=clock,
        sweep_interval=0.05,
        implementations={"shop": fake},
    ) as h:
        pending = h.approvals.list(status="pending")
        assert len(pending) == 20
        h.decide([gate.id for gate in pending], "approved")
        clock.advance(days=31)
        finished = [h.wait(run_id, timeout=60) for run_id in gated + asleep]

    assert {run.status for run in finished} == {"done"}, [r.error for r in finished]
    assert {run.attempt for run in finished} == {2}
    assert {run.version for run in finished} == {v2.version}
    assert all(
        run.output and run.output["receipt"].startswith("receipt for") for run in finished[:20]
    )
    assert all(run.output and run.output["note"] == "v2" for run in finished[20:])
    # Each write once, and nothing before a gate or a sleep ran again.
    assert (fake.reads, fake.orders) == (40, 40)
    assert len({effect.idempotency_key for effect in fake.effects}) == 40

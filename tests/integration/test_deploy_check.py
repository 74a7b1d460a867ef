"""The deploy check replays every unfinished run against new code, executing nothing, and says
which would fail on resuming, with the message the run would fail with."""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from remit import Context, DriverError, workflow
from remit.core.database import Database
from remit.core.schema import approvals as approvals_table
from remit.ops.deploy import DeployCheck, DeployReport
from remit.testing import Harness, ManualClock
from tests.integration.test_checked_resumes import (
    GATE,
    _app,
    mail_patched,
    mail_v1,
    payout_after,
    payout_inserted,
    payout_patched,
    payout_renamed,
    payout_v1,
    rest_inserted,
    rest_patched,
    rest_v1,
)
from tests.support import FakeShop, Purchase, create_order, send_email


def dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, remit's and DBOS's."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    schemas: list[str | None] = [None] if db.is_sqlite else [None, "dbos"]
    with db.engine.connect() as conn:
        for schema in schemas:
            meta = sa.MetaData()
            meta.reflect(conn, schema=schema)
            for table in meta.sorted_tables:
                rows = conn.execute(sa.select(table)).all()
                tables[table.fullname] = sorted(tuple(map(repr, row)) for row in rows)
    return tables


@workflow(name="steps", input=Purchase, uses=[create_order])
def steps_v1(ctx: Context, input: Purchase) -> str:
    return ctx.call(create_order, sku=input.sku, quantity=1).order_id


def _unfinished(h: Harness, fake: FakeShop) -> dict[str, list[str]]:
    """Runs at a gate, asleep, at a task, and queued (the app paused), on the first code."""
    gated = [h.start("payout", GATE).run_id for _ in range(3)]
    asleep = [h.start("rest", {"seconds": 3600}).run_id for _ in range(2)]
    fake.failures[send_email.id].append(DriverError("timeout", retryable=True, status=504))
    tasked = [h.start("mail", {"sku": "sku-1"}).run_id]
    for run_id in gated:
        h.gate(run_id)
    for run_id in asleep:
        h.wait(run_id, until=("sleeping",))
    h.task(tasked[0])
    h.worker.app_state.pause(by="user:ops")
    deadline = time.monotonic() + 10
    while not h.worker.runtime.paused.is_set():  # the worker has seen it: the run stays put
        assert time.monotonic() < deadline
        time.sleep(0.02)
    queued = [h.start("steps", {"sku": "sku-1"}).run_id]
    return {"gated": gated, "asleep": asleep, "tasked": tasked, "queued": queued}


def test_the_check_predicts_the_resume_and_writes_nothing(database_url: str) -> None:
    clock = ManualClock()
    v1 = _app(payout_v1, rest_v1, mail_v1, steps_v1)
    with Harness(v1, database_url=database_url, clock=clock) as h:
        fake = h.fake("shop", FakeShop)
        runs = _unfinished(h, fake)
        from_harness = h.deploy_check(_app(payout_inserted, rest_inserted, mail_v1, steps_v1))

    # As `remit deploy check` does it: no worker, the new code loaded, the database read.
    db = Database(database_url)
    client = db.client("shop")
    try:
        before, effects, reads = dump(db), list(fake.effects), fake.reads

        def check(*workflows: Any) -> DeployReport:
            return DeployCheck(_app(*workflows), db, client).run()

        same = check(payout_v1, rest_v1, mail_v1, steps_v1)
        unguarded = check(payout_inserted, rest_inserted, mail_v1, steps_v1)
        guarded = check(payout_patched, rest_patched, mail_patched, steps_v1)
        later = check(payout_after, rest_v1, mail_v1, steps_v1)
        renamed = check(payout_renamed, rest_v1, mail_v1, steps_v1)

        # Nothing ran and nothing was written: no op, no row, no DBOS workflow.
        assert (fake.effects, fake.reads) == (effects, reads)
        assert dump(db) == before
    finally:
        client.destroy()
        db.dispose()

    # The harness's check says the same.
    assert [(c.run_id, c.failure) for c in from_harness.checked] == [
        (c.run_id, c.failure) for c in unguarded.checked
    ]
    assert len(same.checked) == 7
    assert (same.ok, same.carrying_on) == (True, 7)
    assert (guarded.ok, later.ok) == (True, True)
    assert {c.run_id for c in unguarded.failing} == {*runs["gated"], *runs["asleep"]}
    assert {c.run_id for c in renamed.failing} == set(runs["gated"])
    by_run = {c.run_id: c for c in unguarded.checked}
    assert {by_run[r].resume_at for r in runs["gated"]} == {2}
    assert {by_run[r].resume_at for r in runs["tasked"]} == {2}
    assert {by_run[r].resume_at for r in runs["queued"]} == {1}

    # Resumed on the unguarded code, the runs the check named fail with its words, and the
    # others carry on.
    clock.advance(seconds=3601)
    v2 = _app(payout_inserted, rest_inserted, mail_v1, steps_v1)
    with Harness(
        v2,
        database_url=database_url,
        clock=clock,
        sweep_interval=0.05,
        implementations={"shop": fake},
    ) as h:
        h.worker.app_state.resume(by="user:ops")
        for run_id in runs["gated"]:
            h.decide(h.gate(run_id).id, "approved")
        (task,) = h.tasks.list(status="open")
        h.resolve(task.id, done=True, output={"message_id": "by-hand"})
        ended = {c.run_id: h.wait(c.run_id) for c in unguarded.checked}
    for check in unguarded.checked:
        run = ended[check.run_id]
        if check.carries_on:
            assert run.status == "done", (check.run_id, run.error)
        else:
            assert (run.status, run.error) == ("failed", check.failure)
    assert [e.input["sku"] for e in fake.effects if e.op == create_order.id].count("penny") == 0


def test_an_attempt_lost_with_its_outbox_row_is_checked_from_the_attempt_before(
    database_url: str,
) -> None:
    with Harness(_app(payout_v1), database_url=database_url) as h:
        run_id = h.start("payout", GATE).run_id
        gate = h.gate(run_id)
        # The window the reconciler closes: the run moved to attempt 2, and neither the fork
        # nor its outbox row survived. The reconciler forks it from attempt 1's gate step.
        with h.worker.db.begin() as conn:
            conn.execute(
                approvals_table.update()
                .where(approvals_table.c.id == gate.id)
                .values(status="approved", decided_by="user:test", decided_via="test")
            )
            h.run_store.bump(conn, run_id)
        same = h.deploy_check()
        unguarded = h.deploy_check(_app(payout_inserted))
    ((check,), (failing,)) = (same.checked, unguarded.checked)
    assert (check.status, check.resume_at, check.failure) == ("queued", 2, None)
    assert "its step 2 ran the approval gate `payout`" in (failing.failure or "")

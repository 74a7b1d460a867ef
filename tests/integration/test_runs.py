"""Runs end to end on a real worker, on SQLite and Postgres."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from remit import App, Context, DriverError, InputInvalid, workflow
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.runs import RunStore
from remit.testing import Harness
from tests.support import (
    FakeShop,
    Keyed,
    create_order,
    get_item,
    make_app,
    send_email,
    shop,
)


def test_a_run_completes_with_its_steps_and_ledger(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1", "quantity": 2})
        shop = harness.fake("shop", FakeShop)

        assert run.status == "done", run.error
        assert run.output == {"order_id": "ord_1", "total": 2400, "message_id": "msg_1"}
        assert run.attempt == 1
        assert run.workflow_id == f"{run.run_id}:1"
        assert run.version == harness.app.version
        assert run.started_by == "user:test"
        assert run.finished_at is not None

        steps = harness.steps(run.run_id)
        assert [s["function_name"] for s in steps] == [
            "shop.items.get",
            "total",
            "shop.orders.create",
            "shop.emails.send",
        ]
        rows = harness.ledger(run.run_id)
        assert [(r.op_id, r.effect, r.status, r.tries) for r in rows] == [
            ("shop.items.get", "read", "ok", 1),
            ("shop.orders.create", "write", "ok", 1),
            ("shop.emails.send", "write", "ok", 1),
        ]
        assert [r.idempotency_key for r in rows] == [
            f"{run.run_id}:1",
            f"{run.run_id}:3",
            f"{run.run_id}:4",
        ]
        assert all(r.actor == "user:test" for r in rows)
        assert [e.op for e in shop.effects] == ["shop.orders.create", "shop.emails.send"]


def test_an_async_workflow_runs_the_same_way(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase-async", {"sku": "sku-2", "quantity": 3})
        assert run.status == "done", run.error
        assert run.output == {"order_id": "ord_1", "total": 1350}
        assert [r.op_id for r in harness.ledger(run.run_id)] == [
            "shop.items.get",
            "shop.orders.create",
        ]


def test_bad_input_is_refused_before_anything_is_written(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        with pytest.raises(InputInvalid) as refused:
            harness.start("purchase", {"quantity": "lots"})
        assert "workflow `purchase`" in str(refused.value)
        assert "sku" in str(refused.value)
        assert "quantity" in str(refused.value)
        assert harness.runs.list() == []
        assert harness.worker.client.list_workflows() == []


def test_retryable_read_errors_are_retried_with_the_same_key(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.failures[get_item.id] = [
            DriverError("busy", retryable=True, status=503),
            DriverError("busy", retryable=True, status=503),
        ]
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "done", run.error
        read = harness.ledger(run.run_id)[0]
        assert (read.op_id, read.status, read.tries) == ("shop.items.get", "ok", 3)
        keys = [key for op_id, key in shop.calls if op_id == get_item.id]
        assert keys == [f"{run.run_id}:1"] * 3


def test_a_non_idempotent_write_that_may_have_happened_is_uncertain_and_not_retried(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.failures[send_email.id] = [
            DriverError("mail relay timeout", retryable=True, status=504)
        ]
        run = harness.start("purchase", {"sku": "sku-1"})
        task = harness.task(run.run_id)
        assert harness.runs.get(run.run_id).status == "waiting"
        last = harness.ledger(run.run_id)[-1]
        assert (last.op_id, last.status, last.tries) == ("shop.emails.send", "uncertain", 1)
        assert last.error is not None
        assert "mail relay timeout" in last.error
        assert "will not call it again" in last.error
        assert f"task {task.id} asks a person whether it happened" in last.error
        assert (task.op_id, task.idempotency_key) == (send_email.id, last.idempotency_key)
        assert [op_id for op_id, _ in shop.calls].count(send_email.id) == 1

        # The relay had not sent it; `shop.emails.send` declares no retry, so the run fails
        # and the mail is still not sent again.
        harness.resolve(task.id, done=False)
        failed = harness.wait(run.run_id)
        assert failed.status == "failed"
        assert "did not happen" in (failed.error or "")
        assert [op_id for op_id, _ in shop.calls].count(send_email.id) == 1
        assert shop.effects_of(send_email) == []


def test_a_non_idempotent_write_the_vendor_refused_is_retried(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.failures[send_email.id] = [DriverError("slow down", retryable=True, status=429)]
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "done", run.error
        last = harness.ledger(run.run_id)[-1]
        assert (last.op_id, last.status, last.tries) == ("shop.emails.send", "ok", 2)
        assert len(shop.effects_of(send_email)) == 1


def test_a_non_idempotent_write_refused_for_good_fails_the_run(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.failures[send_email.id] = [
            DriverError("inactive recipient", retryable=False, status=422, vendor_code="406")
        ]
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "failed"
        assert (run.error or "").startswith("DriverError: inactive recipient")
        last = harness.ledger(run.run_id)[-1]
        assert (last.status, last.tries) == ("failed", 1)
        assert last.error_info is not None
        assert (last.error_info["status"], last.error_info["vendor_code"]) == (422, "406")


def test_named_keys_live_apart_from_step_keys(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("keyed", {"first": "2", "second": "reorder"})
        assert run.status == "done", run.error
        keys = [r.idempotency_key for r in harness.ledger(run.run_id)]
        assert keys == [f"{run.run_id}:1", f"{run.run_id}:key:2", f"{run.run_id}:key:reorder"]


def test_one_key_for_two_different_calls_is_refused(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("keyed", {"first": "same", "second": "same"})
        assert run.status == "failed"
        assert f"idempotency key {run.run_id}:key:same already belongs to a call" in (
            run.error or ""
        )
        rows = harness.ledger(run.run_id)
        assert [(r.op_id, r.status) for r in rows] == [
            ("shop.items.get", "ok"),
            ("shop.orders.create", "ok"),
        ]
        assert len(harness.fake("shop", FakeShop).effects_of(create_order)) == 1


@workflow(name="keyed-read", input=Keyed, uses=[get_item, create_order])
def keyed_read(ctx: Context, input: Keyed) -> str:
    ctx.call(create_order, sku=input.sku, quantity=1, key=input.first)
    return ctx.call(get_item, sku=input.sku, key=input.second).sku


def test_a_read_under_a_key_another_call_holds_fails_and_leaves_its_row(
    database_url: str,
) -> None:
    # A read's row is written with its step's checkpoint, after the read: the key is found
    # taken there, and the transaction, checkpoint and all, rolls back.
    app = App(name="shop", workflows=[keyed_read], connectors=[shop])
    with Harness(app, database_url=database_url) as harness:
        run = harness.run("keyed-read", {"first": "same", "second": "same"})
        assert run.status == "failed"
        assert f"idempotency key {run.run_id}:key:same already belongs to a call of " in (
            run.error or ""
        )
        rows = harness.ledger(run.run_id)
        assert [(r.op_id, r.status, r.output is not None) for r in rows] == [
            ("shop.orders.create", "ok", True)
        ]
        # No step holds the read's outcome: the attempt failed at it, nothing recorded there.
        assert [s["function_name"] for s in harness.steps(run.run_id)] == ["shop.orders.create"]


def test_a_bad_key_is_refused(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("keyed", {"first": "has spaces", "second": "x"})
        assert run.status == "failed"
        assert "key for `shop.orders.create` 'has spaces'" in (run.error or "")
        assert "printable characters with no spaces" in (run.error or "")


def test_an_idempotent_write_retries_until_the_policy_gives_up(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        shop = harness.fake("shop", FakeShop)
        shop.failures[create_order.id] = [DriverError("down", retryable=True, status=502)] * 4
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "failed"
        row = next(r for r in harness.ledger(run.run_id) if r.op_id == create_order.id)
        assert (row.status, row.tries) == ("failed", 4)
        assert shop.effects_of(create_order) == []


def test_a_missing_credential_fails_the_call_and_names_the_variable(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url, fakes=False, environ={}) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "failed"
        assert "SHOP_TOKEN" in (run.error or "")
        row = harness.ledger(run.run_id)[0]
        assert (row.op_id, row.status) == ("shop.items.get", "failed")
        assert "SHOP_TOKEN" in (row.error or "")


def test_an_op_the_workflow_did_not_declare_fails_the_run(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("sneaky", {"sku": "sku-1"})
        assert run.status == "failed"
        assert "`sneaky` called `shop.orders.create`" in (run.error or "")
        assert "uses" in (run.error or "")
        assert harness.ledger(run.run_id) == []


def test_a_failing_step_fails_the_run_with_its_error(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("broken-step", {"sku": "sku-9"})
        assert run.status == "failed"
        assert "StepFailed" in (run.error or "")
        assert "ValueError: no price for sku-9" in (run.error or "")


def test_start_needs_no_worker_and_writes_row_and_attempt_together(database_url: str) -> None:
    db = Database(database_url)
    db.prepare()
    client = db.client("shop")
    try:
        app = make_app()
        run = RunStore(db, app=app.name).start(
            client, app.workflow("purchase"), {"sku": "sku-1"}, started_by="cli:ann"
        )
        assert (run.status, run.attempt, run.started_by) == ("queued", 1, "cli:ann")
        status = client.retrieve_workflow(run.workflow_id).get_status()
        assert status.status == "ENQUEUED"
        assert status.queue_name == "shop:default"  # the app's queue, by the app's name

        # The row and the attempt commit together: when the enqueue fails (its workflow id is
        # taken), the row is rolled back too.
        client.enqueue(
            {"workflow_name": "purchase", "queue_name": "other", "workflow_id": "run_taken:1"},
            "x",
            1,
            {},
            "x",
        )
        with pytest.raises(Exception, match="run_taken:1"):
            RunStore(db, app=app.name).start(
                client,
                app.workflow("purchase"),
                {"sku": "sku-1"},
                started_by="x",
                run_id="run_taken",
            )
        assert [r.run_id for r in RunStore(db).list()] == [run.run_id]
        with pytest.raises(RemitError, match=r"knows no app.*RunStore\(app=\.\.\.\)"):
            RunStore(db).start(client, app.workflow("purchase"), {"sku": "sku-2"}, started_by="x")
    finally:
        client.destroy()
        db.dispose()


def test_no_pickle_reaches_the_database(database_url: str) -> None:
    with Harness(make_app(), database_url=database_url) as harness:
        run = harness.run("purchase", {"sku": "sku-1"})
        assert run.status == "done"
        # The run row is concluded just before DBOS records the attempt's own output.
        harness.worker.client.retrieve_workflow(run.workflow_id).get_result()
        engine = harness.worker.db.engine
        schema = "" if harness.worker.db.is_sqlite else "dbos."
        with engine.connect() as conn:

            def column(query: str) -> list[str | None]:
                return list(conn.execute(sa.text(query.format(schema=schema))).scalars())

            formats = column("SELECT DISTINCT serialization FROM {schema}workflow_status")
            inputs = column("SELECT inputs FROM {schema}workflow_input")
            results = column("SELECT output FROM {schema}workflow_output")
            outputs = column("SELECT output FROM {schema}operation_outputs")
        assert formats == ["portable_json"]
        stored = [t for t in [*inputs, *results, *outputs] if t is not None]
        assert len(stored) == 6  # the attempt's input and output, and its four steps' outputs
        for text in stored:
            json.loads(text)

"""Collections on a real worker, on SQLite and Postgres: records in the app's database, written
and read through ops that are checkpointed, keyed and recorded in the ledger like any other."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel, ValidationError

from remit import (
    App,
    ApprovalType,
    CallContext,
    Context,
    DriverError,
    Op,
    collection,
    workflow,
)
from remit.connectors.data import CollectionStore
from remit.core.database import Database
from remit.core.schema import data, ledger
from remit.testing import Harness, ManualClock


class Customer(BaseModel):
    id: str
    name: str
    email: str


class Invoice(BaseModel):
    number: int
    amount: int


customers = collection("customers", model=Customer)
invoices = collection("invoices", model=Invoice, key="number")


class Tour(BaseModel):
    names: list[str]
    page: int = 2


@workflow(name="tour", input=Tour, uses=[*customers.ops])
def tour(ctx: Context, input: Tour) -> dict[str, Any]:
    """Puts a customer per name (keys c00, c01, ...), reads, pages through, deletes."""
    for i, name in enumerate(input.names):
        ctx.data.customers.put(id=f"c{i:02d}", name=name, email=f"{name}@example.com")
    first = ctx.call(customers.get, id="c00")
    missing = ctx.data.customers.get(id="nobody")
    pages: list[list[str]] = []
    after = None
    while True:
        page = ctx.call(customers.list, limit=input.page, after=after)
        pages.append([record.id for record in page.records])
        if page.next is None:
            break
        after = page.next
    removed = ctx.call(customers.delete, id="c01")
    again = ctx.data.customers.delete(id="c01")
    left = ctx.data.customers.list()
    return {
        "first": first.record.name if first.record else None,
        "missing": missing.record,
        "pages": pages,
        "deleted": [removed.deleted, again.deleted],
        "left": [record.id for record in left.records],
    }


class Onboard(BaseModel):
    id: str
    name: str


class Welcome(BaseModel):
    id: str


@workflow(name="onboard", input=Onboard, uses=[customers.put, customers.get])
def onboard(ctx: Context, input: Onboard) -> dict[str, Any]:
    """Puts a customer, waits for a person, then puts a second one and reads the first."""
    ctx.call(customers.put, Customer(id=input.id, name=input.name, email="a@example.com"))
    decision = ctx.approval("welcome", type="welcome", title="Welcome?", draft=Welcome(id=input.id))
    ctx.data.customers.put(id=f"{input.id}-later", name="Later", email="l@example.com")
    found = ctx.call(customers.get, id=input.id)
    return {"status": decision.status, "name": found.record.name if found.record else None}


TICK = ManualClock()


@workflow(name="twice", input=Onboard, uses=[customers.put])
def twice(ctx: Context, input: Onboard) -> list[str]:
    """Puts one record twice under one key, the clock moving between the two calls."""
    record = Customer(id=input.id, name=input.name, email="t@example.com")
    first = ctx.call(customers.put, record, key="save")
    ctx.step("tick", lambda: TICK.advance(60))
    second = ctx.call(customers.put, record, key="save")
    return [first.name, second.name]


class Raw(BaseModel):
    record: dict[str, Any]


@workflow(name="raw-put", input=Raw, uses=[customers.put])
def raw_put(ctx: Context, input: Raw) -> Any:
    return ctx.call(customers.put, input.record)


class Peek(BaseModel):
    id: str


@workflow(name="peek", input=Peek, uses=[customers.get, customers.list])
def peek(ctx: Context, input: Peek) -> dict[str, Any]:
    found = ctx.data.customers.get(id=input.id)
    return {
        "found": found.record.name if found.record else None,
        "all": [record.id for record in ctx.data.customers.list().records],
    }


def make_app(name: str = "crm") -> App:
    return App(
        name=name,
        workflows=[tour, onboard, twice, raw_put, peek],
        collections=[customers, invoices],
        approvals=[ApprovalType("welcome", draft=Welcome)],
    )


def stored(database_url: str) -> list[tuple[str, str, str, dict[str, Any], datetime, str]]:
    """Every row of `remit_data`, in key order."""
    db = Database(database_url, pool_size=1)
    try:
        with db.engine.connect() as conn:
            rows = conn.execute(sa.select(data).order_by(data.c.app, data.c.collection, data.c.key))
            return [
                (r.app, r.collection, r.key, r.record, r.updated_at, r.updated_by) for r in rows
            ]
    finally:
        db.dispose()


@pytest.mark.parametrize("fakes", [True, False], ids=["fakes", "drivers"])
def test_a_workflow_puts_gets_lists_and_deletes_records(database_url: str, fakes: bool) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, fakes=fakes, clock=clock) as h:
        run = h.wait(h.start("tour", {"names": ["ana", "bo", "cy"]}, by="user:ana").run_id)
        assert run.status == "done", run.error
        assert run.output == {
            "first": "ana",
            "missing": None,
            "pages": [["c00", "c01"], ["c02"]],
            "deleted": [True, False],
            "left": ["c00", "c02"],
        }

        rows = h.ledger(run.run_id)
        assert [(r.op_id, r.effect, r.idempotent, r.status, r.tries) for r in rows] == [
            ("data.customers.put", "write", True, "ok", 1),
            ("data.customers.put", "write", True, "ok", 1),
            ("data.customers.put", "write", True, "ok", 1),
            ("data.customers.get", "read", False, "ok", 1),
            ("data.customers.get", "read", False, "ok", 1),
            ("data.customers.list", "read", False, "ok", 1),
            ("data.customers.list", "read", False, "ok", 1),
            ("data.customers.delete", "write", True, "ok", 1),
            ("data.customers.delete", "write", True, "ok", 1),
            ("data.customers.list", "read", False, "ok", 1),
        ]
        assert [r.idempotency_key for r in rows] == [f"{run.run_id}:{n}" for n in range(1, 11)]
        assert {r.actor for r in rows} == {"user:ana"}
        assert rows[0].output == {"id": "c00", "name": "ana", "email": "ana@example.com"}
        assert rows[4].output == {"record": None}
        assert rows[5].output == {
            "records": [
                {"id": "c00", "name": "ana", "email": "ana@example.com"},
                {"id": "c01", "name": "bo", "email": "bo@example.com"},
            ],
            "next": "c01",
        }
        assert [rows[7].output, rows[8].output] == [{"deleted": True}, {"deleted": False}]
        assert [s["function_name"] for s in h.steps(run.run_id)][:4] == [
            "data.customers.put",
            "data.customers.put",
            "data.customers.put",
            "data.customers.get",
        ]

    assert stored(database_url) == [
        ("crm", "customers", "c00", rows[0].output, clock.now(), "user:ana"),
        (
            "crm",
            "customers",
            "c02",
            {"id": "c02", "name": "cy", "email": "cy@example.com"},
            clock.now(),
            "user:ana",
        ),
    ]


def test_a_later_attempt_does_not_put_again(database_url: str) -> None:
    clock = ManualClock()
    with Harness(make_app(), database_url=database_url, clock=clock, sweep_interval=3600) as h:
        started = clock.now()
        run = h.start("onboard", {"id": "c1", "name": "Ana"})
        gate = h.gate(run.run_id)
        clock.advance(hours=1)
        h.decide(gate.id, "approved")
        done = h.wait(run.run_id)
        assert done.status == "done", done.error
        assert (done.attempt, done.output) == (2, {"status": "approved", "name": "Ana"})
        assert [(r.op_id, r.attempt, r.status) for r in h.ledger(run.run_id)] == [
            ("data.customers.put", 1, "ok"),
            ("data.customers.put", 2, "ok"),
            ("data.customers.get", 2, "ok"),
        ]
    # The put before the gate kept its time; the one after it shows the clock had moved.
    assert [(key, at) for _, _, key, _, at, _ in stored(database_url)] == [
        ("c1", started),
        ("c1-later", started + timedelta(hours=1)),
    ]


def test_a_put_under_a_key_the_ledger_holds_is_answered_from_the_ledger(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url, clock=TICK) as h:
        before = TICK.now()
        run = h.run("twice", {"id": "c7", "name": "Bo"})
        assert run.status == "done", run.error
        assert run.output == ["Bo", "Bo"]
        assert TICK.now() == before + timedelta(seconds=60)
        (row,) = h.ledger(run.run_id)
        assert (row.op_id, row.idempotency_key, row.tries) == (
            "data.customers.put",
            f"{run.run_id}:key:save",
            1,
        )
        assert [s["function_name"] for s in h.steps(run.run_id)] == [
            "data.customers.put",
            "tick",
            "data.customers.put",
        ]
    ((_, _, key, _, at, _),) = stored(database_url)
    assert (key, at) == ("c7", before)


def test_a_put_that_does_not_parse_fails_naming_the_field_and_writes_nothing(
    database_url: str,
) -> None:
    with Harness(make_app(), database_url=database_url) as h:
        run = h.run("raw-put", {"record": {"id": "c1", "name": 5}})
        assert run.status == "failed"
        assert run.error is not None
        assert run.error == (
            "InputInvalid: input to op `data.customers.put` does not parse: "
            "name: Input should be a valid string; email: Field required. Nothing was called"
        )
        assert h.ledger(run.run_id) == []
    assert stored(database_url) == []


def test_two_apps_on_one_database_keep_their_own_records(database_url: str) -> None:
    with Harness(make_app("crm-east"), database_url=database_url) as h:
        east = h.run("tour", {"names": ["ana", "bo"]})
        assert east.status == "done", east.error

    # DBOS lets one app own a queue name in a database, so the other app is its store alone.
    db = Database(database_url, pool_size=1)
    try:
        west = CollectionStore(db, "crm-west", {"customers": customers})
        assert call(west, customers.get, {"id": "c00"}).record is None
        assert call(west, customers.list, {}).records == []
        call(west, customers.put, {"id": "c00", "name": "zed", "email": "z@example.com"})
        assert call(west, customers.delete, {"id": "c02"}).deleted is False
    finally:
        db.dispose()

    with Harness(make_app("crm-east"), database_url=database_url) as h:
        assert h.run("peek", {"id": "c00"}).output == {"found": "ana", "all": ["c00"]}

    assert [(app, key, record["name"]) for app, _, key, record, _, _ in stored(database_url)] == [
        ("crm-east", "c00", "ana"),
        ("crm-west", "c00", "zed"),
    ]


def test_an_explicit_data_implementation_serves_the_collections(database_url: str) -> None:
    db = Database(database_url, pool_size=1)
    db.prepare()
    try:
        mine = CollectionStore(db, "elsewhere", {"customers": customers})
        call(mine, customers.put, {"id": "c00", "name": "other", "email": "o@example.com"})
        with Harness(make_app(), database_url=database_url, implementations={"data": mine}) as h:
            assert h.worker.implementations["data"] is mine
            assert h.run("peek", {"id": "c00"}).output == {"found": "other", "all": ["c00"]}
    finally:
        db.dispose()


# The store on its own, called as the worker calls it.


def call(store: CollectionStore, op: Op[Any, Any], payload: dict[str, Any]) -> Any:
    context = CallContext(
        op=op, idempotency_key="k", run_id="r", attempt=1, actor="user:test", environ={}
    )
    return store.invoke(op, op.input.model_validate(payload), context)


@pytest.fixture
def store(database_url: str) -> Any:
    db = Database(database_url, pool_size=2)
    db.prepare()
    try:
        yield CollectionStore(
            db, "crm", {"customers": customers, "invoices": invoices}, clock=ManualClock()
        )
    finally:
        db.dispose()


def test_int_keys_are_stored_as_text_and_listed_in_text_order(store: CollectionStore) -> None:
    for number in (9, 10, 100):
        call(store, invoices.put, {"number": number, "amount": number * 100})
    assert call(store, invoices.get, {"number": "10"}).record == Invoice(number=10, amount=1000)
    page = call(store, invoices.list, {"limit": 2})
    assert ([r.number for r in page.records], page.next) == ([10, 100], "100")
    last = call(store, invoices.list, {"limit": 2, "after": page.next})
    assert ([r.number for r in last.records], last.next) == ([9], None)
    assert call(store, invoices.list, {"after": "9"}).records == []


def test_a_put_replaces_the_record_with_its_key(store: CollectionStore) -> None:
    call(store, customers.put, {"id": "c1", "name": "Ana", "email": "a@example.com"})
    put = call(store, customers.put, {"id": "c1", "name": "Ana B", "email": "b@example.com"})
    assert put == Customer(id="c1", name="Ana B", email="b@example.com")
    assert call(store, customers.get, {"id": "c1"}).record == put
    assert call(store, customers.list, {}).records == [put]
    # The other collection of the app holds nothing.
    assert call(store, invoices.list, {}).records == []


def test_a_key_too_long_to_store_is_refused_before_writing(store: CollectionStore) -> None:
    # The put's input model checks the key, so the call is refused as its input parses.
    for key in ("x" * 501, ""):
        with pytest.raises(ValidationError, match=r"`id` must be 1 to 500 characters"):
            call(store, customers.put, {"id": key, "name": "A", "email": "e"})
    assert call(store, customers.list, {}).records == []


def test_a_stored_record_that_no_longer_parses_says_what_to_do(store: CollectionStore) -> None:
    with store.db.begin() as conn:
        conn.execute(
            data.insert().values(
                app="crm",
                collection="customers",
                key="old",
                record={"id": "old", "name": "Old"},
                updated_at=store.clock.now(),
                updated_by="user:test",
            )
        )
    with pytest.raises(DriverError) as refused:
        call(store, customers.get, {"id": "old"})
    message = str(refused.value)
    assert message.startswith(
        "collection `customers`: the stored record `old` no longer parses as Customer ("
    )
    assert "email\n  Field required" in message
    assert message.endswith(
        "put it again in the new shape, or give the model's new fields defaults"
    )
    assert not refused.value.retryable


def test_no_ledger_rows_come_from_the_store_itself(store: CollectionStore) -> None:
    call(store, customers.put, {"id": "c1", "name": "Ana", "email": "a@example.com"})
    with store.db.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar() == 0

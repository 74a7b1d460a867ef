"""Declaring collections, and an app's checks of them: no database."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from remit import (
    App,
    AppError,
    CallContext,
    Collection,
    Connector,
    Fake,
    collection,
    implements,
    workflow,
)
from remit import op as declare_op
from remit.app import referenced_ops
from remit.connectors.apps import list_apps
from remit.connectors.data import Deleted, PageRequest
from remit.connectors.wakeup import wakeup_connector


class Customer(BaseModel):
    id: str
    name: str
    email: str


class Invoice(BaseModel):
    number: int
    amount: float


class Lookup(BaseModel):
    id: str


customers = collection("customers", model=Customer, description="people who pay us")
invoices = collection("invoices", model=Invoice, key="number")


def test_a_collection_declares_four_ops_under_the_data_vendor() -> None:
    assert isinstance(customers, Collection)
    assert (customers.name, customers.model, customers.key) == ("customers", Customer, "id")
    assert customers.description == "people who pay us"
    assert customers.ops == (customers.get, customers.put, customers.list, customers.delete)
    assert [(o.id, o.effect, o.idempotent) for o in customers.ops] == [
        ("data.customers.get", "read", False),
        ("data.customers.put", "write", True),
        ("data.customers.list", "read", False),
        ("data.customers.delete", "write", True),
    ]
    assert all(o.vendor == "data" and o.resource == "customers" for o in customers.ops)
    assert all(o.description for o in customers.ops)


def test_the_ops_inputs_and_outputs_are_the_model_and_its_key() -> None:
    # A put's input is the model, its key checked as the table stores it.
    assert issubclass(customers.put.input, Customer)
    assert list(customers.put.input.model_fields) == ["id", "name", "email"]
    with pytest.raises(ValidationError, match="`id` must be 1 to 500 characters"):
        customers.put.input.model_validate({"id": "", "name": "A", "email": "e"})
    assert customers.put.output is Customer
    assert customers.get.input is customers.delete.input
    assert list(customers.get.input.model_fields) == ["id"]
    assert customers.get.input.model_validate({"id": "c1"}).model_dump() == {"id": "c1"}
    with pytest.raises(ValidationError, match="id"):
        customers.get.input.model_validate({"id": ""})

    found = customers.get.output.model_validate({"record": {"id": "c1", "name": "A", "email": "e"}})
    assert found.record == Customer(id="c1", name="A", email="e")
    assert customers.get.output.model_validate({"record": None}).record is None
    page = customers.list.output.model_validate({"records": [], "next": None})
    assert (page.records, page.next) == ([], None)
    assert customers.delete.output is Deleted
    assert customers.list.input is PageRequest


def test_an_int_key_is_looked_up_as_an_int() -> None:
    assert list(invoices.get.input.model_fields) == ["number"]
    assert invoices.get.input.model_validate({"number": "42"}).model_dump() == {"number": 42}
    assert invoices.key_of(Invoice(number=42, amount=1.5)) == "42"


def test_a_page_is_1_to_1000_records() -> None:
    assert PageRequest().model_dump() == {"limit": 100, "after": None}
    assert PageRequest(limit=1000, after="c9").limit == 1000
    for limit in (0, 1001):
        with pytest.raises(ValidationError, match="limit"):
            PageRequest(limit=limit)


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("Bad Name", "bad_name"),
        ("customer-records", "customer_records"),
        ("9lives", "c_9lives"),
        ("class", "c_class"),
        ("", "records"),
    ],
)
def test_a_name_that_cannot_be_an_attribute_is_refused(name: str, suggestion: str) -> None:
    with pytest.raises(AppError) as refused:
        collection(name, model=Customer)
    assert str(refused.value) == (
        f"collection name `{name}` must be 1 to 100 lowercase letters, digits and underscores, "
        "starting with a letter and not a Python keyword, so that `ctx.data.<name>.get(...)` "
        f"can name it: for example `{suggestion}`"
    )


def test_a_model_that_is_not_a_pydantic_model_is_refused() -> None:
    with pytest.raises(AppError) as refused:
        collection("customers", model=dict)  # type: ignore[type-var]
    assert str(refused.value) == (
        "collection `customers`: model=<class 'dict'> is not a pydantic model class: pass a "
        "subclass of pydantic.BaseModel"
    )


def test_a_key_that_is_not_a_field_is_refused() -> None:
    with pytest.raises(AppError) as refused:
        collection("customers", model=Customer, key="ref")
    assert str(refused.value) == (
        "collection `customers`: key `ref` is not a field of Customer (its fields: `id`, "
        "`name`, `email`): pass key= one of them, or add the field to the model"
    )


class Odd(BaseModel):
    amount: float
    ref: str | None = None


@pytest.mark.parametrize(("key", "shown"), [("amount", "float"), ("ref", "str | None")])
def test_a_key_that_is_not_str_or_int_is_refused(key: str, shown: str) -> None:
    with pytest.raises(AppError) as refused:
        collection("odds", model=Odd, key=key)
    assert str(refused.value) == (
        f"collection `odds`: key field `{key}` of Odd is `{shown}`: a key must be a `str` or "
        "`int` field; pick another key= or change the field's type"
    )


@workflow(name="crm", input=Lookup, uses=[customers.get, customers.put])
def crm(ctx: Any, input: Lookup) -> None:
    ctx.call(customers.get, id=input.id)
    ctx.data.customers.put(id=input.id, name="A", email="a@example.com")


def test_an_app_serves_its_collections_ops_under_data() -> None:
    app = App(name="crm", workflows=[crm], collections=[customers, invoices])
    assert app.collections == {"customers": customers, "invoices": invoices}
    assert app.ops["data.customers.put"] is customers.put
    assert set(app.ops) == {
        o.id for o in (*customers.ops, *invoices.ops, *wakeup_connector.ops, list_apps)
    }
    assert list(app.connectors) == ["wakeup", "remit"]


def test_two_collections_with_one_name_are_refused() -> None:
    other = collection("customers", model=Lookup)
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[], collections=[customers, other])
    assert str(refused.value) == (
        "app `crm` has two collections named `customers`: keep one, or rename the other"
    )


def test_something_else_among_the_collections_is_refused() -> None:
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[], collections=[Customer])  # type: ignore[list-item]
    assert "app `crm` lists <class" in str(refused.value)
    assert "declare each with remit.collection(name, model=YourModel)" in str(refused.value)


_data_read = declare_op("data.things.get", effect="read", input=Lookup, output=Lookup)


class _DataFake(Fake):
    @implements(_data_read)
    def get(self, input: Lookup, call: CallContext) -> Lookup:
        return input


def test_a_data_connector_beside_collections_is_refused() -> None:
    data = Connector("data", ops=[_data_read], driver=_DataFake, fake=_DataFake)
    App(name="crm", workflows=[], connectors=[data])  # alone, it is an ordinary vendor
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[], connectors=[data], collections=[customers])
    assert str(refused.value) == (
        "app `crm` has a connector for the vendor `data`, whose ops are its collections': "
        "rename the connector's vendor (and its ops' ids)"
    )


def test_a_collection_op_used_but_not_in_the_app_is_refused() -> None:
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[crm], collections=[invoices])
    assert str(refused.value) == (
        "workflow `crm` uses `data.customers.get`, which no collection in the app declares: "
        "add the `customers` collection to `App(collections=...)`"
    )


def test_the_ops_of_another_collection_of_the_same_name_are_refused() -> None:
    twin = collection("customers", model=Customer)
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[crm], collections=[twin])
    assert str(refused.value) == (
        "workflow `crm` uses an op `data.customers.get` of another `customers` collection than "
        "the app's: use the ops of the collection in `App(collections=...)`"
    )


@workflow(name="by-path", input=Lookup, uses=[customers.get])
def by_path(ctx: Any, input: Lookup) -> None:
    ctx.data.customers.get(id=input.id)
    ctx.data.customers.delete(id=input.id)


@workflow(name="by-op", input=Lookup, uses=[customers.get])
def by_op(ctx: Any, input: Lookup) -> None:
    ctx.call(customers.get, id=input.id)
    ctx.call(customers.put, Customer(id=input.id, name="A", email="a@example.com"))


@pytest.mark.parametrize(
    ("wf", "unlisted"), [(by_path, "data.customers.delete"), (by_op, "data.customers.put")]
)
def test_a_collection_op_the_code_calls_but_uses_does_not_list_is_refused(
    wf: Any, unlisted: str
) -> None:
    with pytest.raises(AppError) as refused:
        App(name="crm", workflows=[wf], collections=[customers])
    assert str(refused.value) == (
        f"workflow `{wf.name}` calls `{unlisted}`, which its `uses` does not list: "
        "add it to @workflow(uses=[...])"
    )


def test_every_way_of_naming_a_collection_op_is_found() -> None:
    ops = {o.id: o for o in customers.ops}

    def closed_over(ctx: Any) -> None:
        held = invoices  # not in the app: not one of its ops
        ctx.call(held.get, number=1)
        ctx.call(customers.list, limit=5)

    assert referenced_ops(by_op.fn, ops) == {"data.customers.get", "data.customers.put"}
    assert referenced_ops(by_path.fn, ops) == {"data.customers.get", "data.customers.delete"}
    assert referenced_ops(closed_over, ops) == {"data.customers.list"}
    # Every op listed: the app loads.
    App(
        name="crm",
        workflows=[
            workflow(name="all", input=Lookup, uses=[*customers.ops])(by_op.fn),
        ],
        collections=[customers],
    )

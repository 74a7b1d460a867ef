"""A malformed resource type, connector or declaration is refused when it is declared, with a
message that names the field and says what to change."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from remit import (
    AfterCreate,
    DatabaseCapabilities,
    DatabaseInputs,
    DatabaseOutputs,
    DatabaseSpec,
    Reference,
    ResourceFake,
    ResourceType,
    WakeupSpec,
    op,
    ref,
    resource_type,
    secret,
)
from remit.connectors.base import CallContext, Connector, Fake, implements
from remit.core.errors import AppError

STORE = "acme.urls.store"


class Thing(BaseModel):
    name: str
    size: int = 1
    password: str | None = None
    id: str | None = None
    target: str | None = None


class Database(BaseModel):
    name: str
    region: str
    size: str = "small"
    host: str | None = None


class StoreIn(BaseModel):
    id: str
    export: str


class StoreOut(BaseModel):
    secret: str


class NoExport(BaseModel):
    id: str


class NoId(BaseModel):
    export: str


class Nothing(BaseModel):
    pass


def _healthy(state: Mapping[str, Any]) -> DatabaseOutputs:
    return DatabaseOutputs(healthy=True)


def database_spec(
    *,
    capabilities: Any = None,
    region: Any = "region",
    size: Any = "size",
    store_url: str = STORE,
) -> DatabaseSpec:
    return DatabaseSpec(
        capabilities=capabilities or DatabaseCapabilities(pauses=True, branch=False),
        inputs=DatabaseInputs(region=region, size=size),
        store_url=store_url,
        outputs=_healthy,
    )


def database_type(**overrides: Any) -> ResourceType:
    given: dict[str, Any] = {
        "schema": Database,
        "immutable": ["region"],
        "vendor_owned": ["host"],
        "after_create": [AfterCreate(STORE)],
        "database": database_spec(),
        **overrides,
    }
    return resource_type("acme.database", **given)


def thing_type(**overrides: Any) -> ResourceType:
    given: dict[str, Any] = {
        "schema": Thing,
        "vendor_owned": ["id"],
        "write_only": ["password"],
        "references": {"target": Reference(types="acme.site", fields="url")},
        **overrides,
    }
    return resource_type("acme.thing", **given)


def fake_of(*types: ResourceType) -> type[ResourceFake]:
    """A fake of `types`, answering the store op too (it is marked by the op's id)."""

    @implements(store_op())
    def store_url(self: ResourceFake, input: BaseModel, call: CallContext) -> StoreOut:
        return StoreOut(secret="REMIT_DATABASE_URL_X")

    return type("AcmeFake", (ResourceFake,), {"resource_types": types, "store_url": store_url})


def connector(rtype: ResourceType, *ops: Any) -> Connector:
    fake = fake_of(rtype)
    return Connector("acme", ops=ops, driver=fake, fake=fake, resources=[rtype])


def store_op(input: type[BaseModel] = StoreIn) -> Any:
    return op(STORE, effect="write", input=input, output=StoreOut, idempotent=True)


def test_well_formed_types_and_their_connector_are_accepted() -> None:
    database = database_type()
    thing = thing_type()
    made = connector(database, store_op())
    assert {declared.id for declared in made.ops} >= {
        STORE,
        "acme.database.read",
        "acme.database.delete",
    }
    assert tuple(thing.ops) == ("read", "import", "plan", "create", "update", "delete")


MALFORMED_TYPES: list[tuple[str, Callable[[], ResourceType], str]] = [
    (
        "a role names a field its schema lacks",
        lambda: thing_type(immutable=["colour"]),
        "immutable names `colour`, which is not a field of its schema",
    ),
    (
        "a field is both immutable and vendor-owned",
        lambda: thing_type(immutable=["id"]),
        "`id` is both immutable and vendor_owned",
    ),
    (
        "a vendor-owned field is required",
        lambda: thing_type(vendor_owned=["name"]),
        "vendor-owned `name` is required by its schema: give it a default",
    ),
    (
        "it is stateless and not writable",
        lambda: thing_type(stateless=True, writable=False),
        "it is stateless but not writable",
    ),
    (
        "a database is not writable",
        lambda: database_type(writable=False, after_create=[]),
        "its database: it must be writable",
    ),
    (
        "a database is stateless",
        lambda: database_type(stateless=True),
        "its database: it must not be stateless",
    ),
    (
        "a database's capabilities are not bools",
        lambda: database_type(
            database=database_spec(capabilities=DatabaseCapabilities(pauses="yes", branch=0))  # type: ignore[arg-type]
        ),
        r"capabilities\.pauses must be True or False; its database: capabilities\.branch",
    ),
    (
        "a database's region names no field",
        lambda: database_type(database=database_spec(region="zone")),
        r"inputs\.region names no field \('zone'\)",
    ),
    (
        "a database's size names no field",
        lambda: database_type(database=database_spec(size="tier")),
        r"inputs\.size names no field \('tier'\)",
    ),
    (
        "a database's store_url is another vendor's op",
        lambda: database_type(
            database=database_spec(store_url="other.urls.store"),
            after_create=[AfterCreate("acme.urls.store")],
        ),
        r"store_url must name an op of its vendor, `acme\.<group>\.<op>` \('other\.urls\.store'\)",
    ),
    (
        "a database's store_url is one of the type's own six ops",
        lambda: database_type(
            database=database_spec(store_url="acme.database.read"),
            after_create=[AfterCreate("acme.database.read")],
        ),
        "store_url must be an op of its own, not the type's `read`",
    ),
    (
        "a database's after_create does not call its store_url",
        lambda: database_type(after_create=[]),
        r"after_create must call `acme\.urls\.store`, so apply stores the URL",
    ),
    (
        "a wakeup's host is not a reference",
        lambda: thing_type(wakeup=WakeupSpec(host="name", register="acme.wakeups.register")),
        "its wakeup's host, `name`, must be one of its references",
    ),
]


@pytest.mark.parametrize(
    ("make", "message"),
    [pytest.param(make, message, id=why) for why, make, message in MALFORMED_TYPES],
)
def test_a_malformed_type_is_refused(make: Callable[[], ResourceType], message: str) -> None:
    with pytest.raises(AppError, match=message):
        make()


def test_a_database_whose_store_url_the_connector_lacks_is_refused() -> None:
    with pytest.raises(
        AppError,
        match=r"resource type `acme\.database`: after_create calls `acme\.urls\.store`, which "
        "its connector does not declare: add the op",
    ):
        connector(database_type())


@pytest.mark.parametrize(
    "input", [pytest.param(NoExport, id="no export"), pytest.param(NoId, id="no id or ref")]
)
def test_a_store_url_that_does_not_take_id_and_export_is_refused(
    input: type[BaseModel],
) -> None:
    with pytest.raises(
        AppError,
        match=r"its database's store_url, `acme\.urls\.store`, must take \{id or ref, export\}",
    ):
        connector(database_type(), store_op(input))


def test_a_store_url_may_take_a_ref_for_the_id() -> None:
    class ByRef(BaseModel):
        ref: str
        export: str

    assert STORE in {declared.id for declared in connector(database_type(), store_op(ByRef)).ops}


def test_a_fake_without_the_types_implementation_is_refused_naming_the_missing_ops() -> None:
    thing = thing_type()

    class Plain(Fake):
        pass

    with pytest.raises(AppError) as refused:
        Connector("acme", ops=[], driver=fake_of(thing), fake=Plain, resources=[thing])
    message = str(refused.value)
    assert message.startswith("connector `acme`: its fake Plain does not implement ")
    for name in ("read", "import", "plan", "create", "update", "delete"):
        assert f"`acme.thing.{name}`" in message
    assert message.endswith("add a method marked `@implements(op)` for each")


# Declarations: a type called with fields.


def test_a_well_formed_declaration_is_kept_as_json_with_markers() -> None:
    declared = thing_type()(name="one", size="2", password=secret("PW"), target=ref("web", "url"))
    assert dict(declared.fields) == {
        "name": "one",
        "size": 2,
        "password": {"$secret": "PW"},
        "target": {"$ref": "web.url"},
    }
    assert declared.refs() == {"target": ("web", "url")}


MALFORMED_DECLARATIONS: list[tuple[str, dict[str, Any], str]] = [
    ("an unknown field", {"name": "x", "colour": "red"}, r"`colour` is no field of acme\.thing"),
    ("a vendor-owned field", {"name": "x", "id": "t-1"}, "`id` is set by the vendor: leave it out"),
    ("a required field left out", {"size": 2}, "`name` is required"),
    (
        "a plain value in a write-only field",
        {"name": "x", "password": "hunter2"},
        r'`password` is a plain value in a write-only field: give it as secret\("NAME"\)',
    ),
    (
        "a secret in a normal field",
        {"name": secret("NAME")},
        "`name` is a secret, which only a write-only field takes",
    ),
    (
        "a reference on a field that takes none",
        {"name": ref("web", "url")},
        "`name` takes no reference: give a value, or declare the field",
    ),
    (
        "a reference to a field the reference does not allow",
        {"name": "x", "target": ref("web", "id")},
        "`target` takes a reference to url, not to `id`",
    ),
    (
        "a value of the wrong type",
        {"name": "x", "size": "big"},
        r"`size`: Input should be a valid integer.*\(got 'big'\)",
    ),
    (
        "a secret marker written by hand in a normal field",
        {"name": "x", "target": {"$secret": "NAME"}},
        "`target` holds a `\\$secret` or `\\$ref` object written by hand",
    ),
    (
        "a reference marker written by hand",
        {"name": {"$ref": "web.url"}},
        "`name` holds a `\\$secret` or `\\$ref` object written by hand",
    ),
]


@pytest.mark.parametrize(
    ("fields", "message"),
    [pytest.param(fields, message, id=why) for why, fields, message in MALFORMED_DECLARATIONS],
)
def test_a_malformed_declaration_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(AppError, match=rf"^a acme\.thing: .*{message}"):
        thing_type()(**fields)


def test_a_declaration_names_every_problem_at_once() -> None:
    with pytest.raises(AppError) as refused:
        thing_type()(colour="red", id="t-1")
    message = str(refused.value)
    assert "`colour` is no field" in message
    assert "`id` is set by the vendor" in message
    assert "`name` is required" in message


def test_a_database_in_a_region_its_type_does_not_list_is_refused() -> None:
    spec = database_spec()
    listed = DatabaseSpec(
        capabilities=spec.capabilities,
        inputs=spec.inputs,
        store_url=spec.store_url,
        outputs=spec.outputs,
        regions=("eu-west-1", "us-east-1"),
    )
    rtype = database_type(database=listed)
    assert rtype(name="orders", region="eu-west-1").fields["region"] == "eu-west-1"
    with pytest.raises(
        AppError, match=r"`region` is 'mars-1', which is no region of acme\.database"
    ):
        rtype(name="orders", region="mars-1")

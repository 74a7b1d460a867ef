"""Collections: typed records an app keeps in its own database, read and written through ops.

    customers = collection("customers", model=Customer, key="id")
    app = App(name="crm", workflows=[...], collections=[customers])

A collection declares four ops under the vendor `data`: `data.<name>.get`, `.put`, `.list` and
`.delete`. A workflow lists them in `uses` and calls them like any other op
(`ctx.data.customers.put(...)` or `ctx.call(customers.put, ...)`), so every call is a
checkpointed step with a ledger row and an idempotency key. Whatever the worker's mode (drivers
or fakes), `CollectionStore` serves them from the table `remit_data`, one row per app,
collection and key.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, TypeVar, cast

import sqlalchemy as sa
from pydantic import BaseModel, Field, ValidationError, create_model, model_validator

from remit.connectors.base import CallContext, Implementation
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import AppError, DriverError
from remit.core.schema import data
from remit.core.text import printable, unsafe
from remit.declare.apps import caller_app, qualified
from remit.declare.ops import Op, op

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# The vendor of every collection's ops: `ctx.data.<name>.<op>(...)`.
VENDOR = "data"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,99}")
# The longest stored key: the width of `remit_data.key`.
MAX_KEY = 500


class Found(BaseModel, Generic[M]):
    """What `data.<name>.get` returns: the record, or None when no record has the key."""

    record: M | None


class PageRequest(BaseModel):
    """The input of `data.<name>.list`: up to `limit` records whose key comes after `after`."""

    limit: int = Field(100, ge=1, le=1000)
    after: str | None = None


class Page(BaseModel, Generic[M]):
    """What `data.<name>.list` returns: records in key order, and the `after` of the next page
    (None on the last page)."""

    records: list[M]
    next: str | None = None


class Deleted(BaseModel):
    """What `data.<name>.delete` returns: whether this call removed a record."""

    deleted: bool


@dataclass(frozen=True, eq=False)
class Collection(Generic[M]):
    """Records of one pydantic model, one per key, in the app's database. Made by
    `collection(...)`; its ops are `get`, `put`, `list` and `delete`, and `ops` holds all four.
    """

    name: str
    model: type[M]
    key: str
    description: str
    get: Op[Any, Found[M]]
    put: Op[M, M]
    list: Op[PageRequest, Page[M]]
    delete: Op[Any, Deleted]

    def __init__(
        self,
        name: str,
        *,
        model: type[M],
        key: str = "id",
        description: str = "",
        app: str | None = None,
    ) -> None:
        _check(name, model, key)
        # An app's collection (`apps/<app>/`) is `<app>.<name>`: `data.<app>.<name>.<op>`.
        name = qualified(app, name)
        key_input = _key_input(model, key)
        found = cast(type[Found[M]], cast(Any, Found)[model])
        page = cast(type[Page[M]], cast(Any, Page)[model])
        what = f"`{name}` ({model.__name__} records by `{key}`)"
        values: dict[str, Any] = {
            "name": name,
            "model": model,
            "key": key,
            "description": description,
            "get": op(
                f"{VENDOR}.{name}.get",
                effect="read",
                input=key_input,
                output=found,
                description=f"The record of {what} with the given `{key}`, or None.",
            ),
            "put": op(
                f"{VENDOR}.{name}.put",
                effect="write",
                idempotent=True,
                input=_put_input(model, key),
                output=model,
                description=f"Store a record in {what}, replacing the one with its `{key}`.",
            ),
            "list": op(
                f"{VENDOR}.{name}.list",
                effect="read",
                input=PageRequest,
                output=page,
                description=f"Records of {what} in key order, a page at a time.",
            ),
            "delete": op(
                f"{VENDOR}.{name}.delete",
                effect="write",
                idempotent=True,
                input=key_input,
                output=Deleted,
                description=f"Remove the record of {what} with the given `{key}`, if any.",
            ),
        }
        for field, value in values.items():
            object.__setattr__(self, field, value)

    @property
    def ops(self) -> tuple[Op[Any, Any], ...]:
        """The collection's four ops, for `@workflow(uses=[*customers.ops])`."""
        return (self.get, self.put, self.list, self.delete)

    def key_of(self, record: BaseModel) -> str:
        """The stored key of `record`: its key field as a string."""
        return str(getattr(record, self.key))

    def __repr__(self) -> str:
        return f"Collection({self.name!r}, model={self.model.__name__}, key={self.key!r})"


def collection(
    name: str, *, model: type[M], key: str = "id", description: str = ""
) -> Collection[M]:
    """Declare a collection of `model` records stored by their `key` field (a str or int field;
    the stored key is its string form). See `Collection`. Declared in an app's folder
    (`apps/<app>/`), it is the app's: `<app>.<name>`, read as `ctx.data.<app>.<name>`."""
    return Collection(name, model=model, key=key, description=description, app=caller_app())


def _check(name: str, model: Any, key: str) -> None:
    """Refuse a declaration the ops could not be made from, saying what to change."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or keyword.iskeyword(name):
        suggestion = re.sub(r"[^a-z0-9_]+", "_", str(name).lower()).strip("_") or "records"
        if not suggestion[0].isalpha() or keyword.iskeyword(suggestion):
            suggestion = f"c_{suggestion}"
        raise AppError(
            f"collection name `{name}` must be 1 to 100 lowercase letters, digits and "
            "underscores, starting with a letter and not a Python keyword, so that "
            f"`ctx.data.<name>.get(...)` can name it: for example `{suggestion[:100]}`"
        )
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise AppError(
            f"collection `{name}`: model={model!r} is not a pydantic model class: pass a "
            "subclass of pydantic.BaseModel"
        )
    field = model.model_fields.get(key)
    if field is None:
        fields = ", ".join(f"`{f}`" for f in model.model_fields) or "none"
        raise AppError(
            f"collection `{name}`: key `{key}` is not a field of {model.__name__} (its fields: "
            f"{fields}): pass key= one of them, or add the field to the model"
        )
    if field.annotation not in (str, int):
        shown = getattr(field.annotation, "__name__", None) or repr(field.annotation)
        raise AppError(
            f"collection `{name}`: key field `{key}` of {model.__name__} is `{shown}`: a key "
            "must be a `str` or `int` field; pick another key= or change the field's type"
        )


def _key_input(model: type[BaseModel], key: str) -> type[BaseModel]:
    """The input of `get` and `delete`: one field, named and typed as the model's key."""
    described = f"the `{key}` of the record"
    kind: Any = (
        int
        if model.model_fields[key].annotation is int
        else Annotated[str, Field(min_length=1, max_length=MAX_KEY)]
    )
    fields: dict[str, Any] = {key: (kind, Field(description=described))}
    return create_model(f"{model.__name__}Key", **fields)


def _put_input(model: type[M], key: str) -> type[M]:
    """The input of `put`: the model itself, with its key checked as the table stores it, so a
    record whose key is empty, too long or holds control characters (which would reach lists,
    logs and terminals) is refused before anything is written."""

    def key_fits(record: Any) -> Any:
        text = str(getattr(record, key))
        if not 1 <= len(text) <= MAX_KEY:
            raise ValueError(
                f"`{key}` must be 1 to {MAX_KEY} characters once written as text; this one is "
                f"{len(text)}"
            )
        if unsafe(text):
            raise ValueError(
                f"`{key}` holds control characters ('{printable(text[:MAX_KEY])}'): give the "
                "record a key without them"
            )
        return record

    validators: dict[str, Any] = {"key_fits": model_validator(mode="after")(key_fits)}
    return create_model(model.__name__, __base__=model, __validators__=validators)


class CollectionStore(Implementation):
    """The `data` vendor: every collection of one app, served from the app's database.

    The worker gives it the `data` ops in both modes, drivers and fakes. Rows are scoped by
    the app's name, so two apps on one database never see each other's records. `put` and
    `delete` are idempotent: repeating one with the same input leaves the same rows.

    Its calls run on the caller's thread (`inline`), never on one given up on at a timeout:
    a write of an earlier step must not land after the run has passed it. The database bounds
    each statement instead.
    """

    inline: ClassVar[bool] = True

    def __init__(
        self,
        db: Database,
        app: str,
        collections: Mapping[str, Collection[Any]],
        *,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.app = app
        self.collections = dict(collections)
        self.clock = clock or SystemClock()

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        """Serve one of the collections' ops; see `Implementation.invoke`."""
        declared = self.collections.get(op.resource)
        if declared is None or op not in declared.ops:
            raise AppError(f"app `{self.app}` has no collection whose op is `{op.id}`")
        handlers: dict[str, Callable[[Collection[Any], Any, CallContext], Any]] = {
            "get": self._get,
            "put": self._put,
            "list": self._list,
            "delete": self._delete,
        }
        result: BaseModel = op.output.model_validate(handlers[op.name](declared, input, call))
        return result

    def _get(
        self, declared: Collection[Any], input: BaseModel, call: CallContext
    ) -> dict[str, Any]:
        key = str(getattr(input, declared.key))
        query = sa.select(data.c.record).where(*self._where(declared), data.c.key == key)

        def read() -> Any:
            with self.db.engine.connect() as conn:
                return conn.execute(query).scalar()

        record = self._database(declared, "get", read, applied=False)
        found = None if record is None else self._parse(declared, key, record)
        return {"record": found}

    def _put(self, declared: Collection[Any], input: BaseModel, call: CallContext) -> BaseModel:
        key = declared.key_of(input)  # its length was checked as the input parsed
        values = {
            "record": input.model_dump(mode="json"),
            "updated_at": self.clock.now(),
            "updated_by": call.actor,
        }
        insert = self.db.insert
        statement = (
            insert(data)
            .values(app=self.app, collection=declared.name, key=key, **values)
            .on_conflict_do_update(index_elements=["app", "collection", "key"], set_=values)
        )
        self._database(declared, "put", lambda: self.db.execute_one(statement), applied=True)
        stored: BaseModel = declared.model.model_validate(input.model_dump())
        return stored

    def _list(
        self, declared: Collection[Any], input: PageRequest, call: CallContext
    ) -> dict[str, Any]:
        query = sa.select(data.c.key, data.c.record).where(*self._where(declared))
        if input.after is not None:
            query = query.where(data.c.key > input.after)
        # One row past the page says whether there is a next one.
        query = query.order_by(data.c.key).limit(input.limit + 1)

        def read() -> list[tuple[str, Any]]:
            with self.db.engine.connect() as conn:
                return [(row.key, row.record) for row in conn.execute(query)]

        rows = self._database(declared, "list", read, applied=False)
        page = rows[: input.limit]
        records = [self._parse(declared, key, record) for key, record in page]
        more = len(rows) > input.limit
        return {"records": records, "next": page[-1][0] if more else None}

    def _delete(self, declared: Collection[Any], input: BaseModel, call: CallContext) -> BaseModel:
        key = str(getattr(input, declared.key))
        statement = data.delete().where(*self._where(declared), data.c.key == key)
        removed = self._database(
            declared, "delete", lambda: self.db.execute_one(statement), applied=True
        )
        return Deleted(deleted=removed > 0)

    def _where(self, declared: Collection[Any]) -> tuple[sa.ColumnElement[bool], ...]:
        return (data.c.app == self.app, data.c.collection == declared.name)

    def _database(
        self, declared: Collection[Any], what: str, fn: Callable[[], T], *, applied: bool
    ) -> T:
        """Run `fn` (one short statement), again while the database is busy or reconnecting;
        a database that stays down is a retryable `DriverError`, for the op's retry policy."""
        try:
            return self.db.retrying(f"collection {declared.name}: {what}", fn)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as error:
            raise DriverError(
                f"collection `{declared.name}`: {what} failed in the database: "
                f"{error.orig or error}",
                retryable=True,
                maybe_applied=applied,
            ) from error

    def _parse(self, declared: Collection[Any], key: str, record: Any) -> BaseModel:
        try:
            parsed: BaseModel = declared.model.model_validate(record)
        except ValidationError as error:
            raise DriverError(
                f"collection `{declared.name}`: the stored record `{key}` no longer parses as "
                f"{declared.model.__name__} ({error}): put it again in the new shape, or give "
                "the model's new fields defaults",
                retryable=False,
                maybe_applied=False,
            ) from None
        return parsed

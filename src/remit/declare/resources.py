"""Resource types: the kinds of thing at a vendor an app may declare should exist.

A connector declares a type, e.g. `dns.record`, with a pydantic schema and roles for its fields:

- **immutable**: the vendor cannot change it in place, so a change replaces the resource;
- **vendor-owned**: the vendor sets it (an id, a URL); it is read back, never declared;
- **write-only**: sent to the vendor but never read back, shown or stored (a password), and
  declared as `secret("NAME")`, a name among remit's secrets;
- **references**: fields that may take `ref("other", "field")`, another declaration's field,
  resolved when apply gets to it, which also orders the apply.

A host's revision field (`HostSpec(revision=...)`) may take `source("main")`: the commit a
branch of the app's operations repo is at, resolved when apply runs (or the revision a
deploy is pinned to).

A type is `writable` (apply may create, update and delete it) or read-only (it can be imported
and watched for drift), and `stateless` when it holds nothing that a delete would lose, so apply
replaces or deletes one without asking. `after_create` names ops called once a resource exists
(a database's `store_url`).

Each type has six ops, `<vendor>.<type>.read`, `import`, `plan`, `create`, `update` and `delete`
(a read-only type has the first three), made here with remit's shapes, so every vendor's driver
and fake answer alike. The contracts (`DatabaseSpec`, `HostSpec`, `WakeupSpec`) say what a type
that is a database, a host or a wakeup declares about itself, so vendors are swappable.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from remit.core.errors import AppError
from remit.declare.ops import Op, op
from remit.declare.wakeups import takes_a_wake

PlanAction = Literal["create", "update", "replace", "delete", "none"]
PLAN_ACTIONS: tuple[str, ...] = get_args(PlanAction)
# The ops every type has, and those of them that change the vendor's world.
RESOURCE_OPS: tuple[str, ...] = ("read", "import", "plan", "create", "update", "delete")
CHANGE_OPS = frozenset({"create", "update", "delete"})
# How a planned value that only apply can know, and a write-only one, are shown.
UNKNOWN = "(known after apply)"
SENSITIVE = "(sensitive)"
# How markers are written in a declaration's JSON.
SECRET_KEY = "$secret"
REF_KEY = "$ref"
SOURCE_KEY = "$source"

_PART = r"[a-z][a-z0-9_]*"
_TYPE_ID = re.compile(rf"^{_PART}\.{_PART}$")


class ResourceRef(BaseModel):
    """The input of `read`, `import` and `delete`: the vendor's id of the resource."""

    id: str = Field(min_length=1, max_length=500)


class ReadOut(BaseModel):
    """What `read` and `import` find: the resource's state, or `gone` when there is none."""

    id: str
    gone: bool = False
    state: dict[str, Any] | None = None


class PlanIn(BaseModel):
    """The input of `plan`: the bound id (none: not made yet) and the desired fields (none: the
    declaration was removed)."""

    id: str | None = None
    desired: dict[str, Any] | None = None


class PlanOut(BaseModel):
    """What `plan` finds. `planned` is the state apply would leave (write-only fields shown as
    `(sensitive)`), `unknown` the fields only apply can know, `replace` the immutable fields
    whose change forces a replace, `basis` a digest of the state the plan was made from."""

    action: PlanAction
    planned: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    unknown: list[str] = Field(default_factory=list)
    replace: list[str] = Field(default_factory=list)
    basis: str | None = None


class Expect(BaseModel):
    """The plan an `update` was decided on: refused as `plan_changed` when the vendor's state
    moved since."""

    action: PlanAction
    replace: list[str] = Field(default_factory=list)
    basis: str | None = None


class CreateIn(BaseModel):
    desired: dict[str, Any]


class UpdateIn(BaseModel):
    id: str = Field(min_length=1, max_length=500)
    desired: dict[str, Any]
    expect: Expect | None = None


class Applied(BaseModel):
    """What `create` and `update` leave: the vendor's id and the state as it reads back."""

    id: str
    state: dict[str, Any]


class Deleted(BaseModel):
    id: str
    gone: bool = True


@dataclass(frozen=True)
class Reference:
    """A field that may take another declaration's field: of one of `types` (any, when empty),
    and one of its `fields` (any, when empty)."""

    types: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()

    def __init__(self, types: Iterable[str] | str = (), fields: Iterable[str] | str = ()) -> None:
        object.__setattr__(self, "types", (types,) if isinstance(types, str) else tuple(types))
        object.__setattr__(self, "fields", (fields,) if isinstance(fields, str) else tuple(fields))


@dataclass(frozen=True)
class Made:
    """A resource apply has just made: its declaration's name, the vendor's id, its state."""

    name: str
    id: str
    state: Mapping[str, Any]


def _id_and_export(made: Made) -> dict[str, Any]:
    return {"id": made.id, "export": made.name}


@dataclass(frozen=True)
class AfterCreate:
    """An op apply calls once a resource of the type exists, with `input(made)` (by default
    `{"id": <the vendor's id>, "export": <the declaration's name>}`)."""

    op: str
    input: Callable[[Made], dict[str, Any]] = _id_and_export


@dataclass(frozen=True)
class DatabaseCapabilities:
    """What a database can do, for choosing one: declared, not checked at run time.
    `pauses`: its compute scales to zero and wakes on a connection. `branch`: it makes
    copy-on-write branches, each with its own URL."""

    pauses: bool
    branch: bool


@dataclass(frozen=True)
class DatabaseInputs:
    """The declared fields that take the choices, by dotted path: `region`, and `size` when
    the vendor takes one."""

    region: str
    size: str | None = None


@dataclass(frozen=True)
class DatabaseOutputs:
    """What a database's or a host's state says of its health: `why` says, in a few words,
    why it is not healthy (`status is "crashing"`)."""

    healthy: bool
    why: str = ""


@dataclass(frozen=True)
class DatabaseSpec:
    """A type that is the company's database (a managed Postgres project) says so with this.

    `store_url` is an op of the type's own vendor, not one of the type's six, that takes
    `{id or ref, export}` and stores the database's URL as the secret
    `REMIT_DATABASE_URL_<EXPORT>` (`database_url_secret`), never returning it; the type's
    `after_create` calls it, so apply stores the URL once it makes a database.
    """

    capabilities: DatabaseCapabilities
    inputs: DatabaseInputs
    store_url: str
    outputs: Callable[[Mapping[str, Any]], DatabaseOutputs]
    regions: tuple[str, ...] | None = None


@dataclass(frozen=True)
class HostSpec:
    """A type that is a host (a container, an app) the change lifecycle deploys to: `url`
    names the field that holds its public URL, usually vendor-owned; `revision` the declared
    field that holds the revision (a git commit) it runs, which a declaration may give as
    `source("main")`; `outputs(state).healthy` whether it is healthy (see `host_health`)."""

    url: str
    outputs: Callable[[Mapping[str, Any]], DatabaseOutputs] | None = None
    revision: str | None = None


@dataclass(frozen=True)
class WakeupSpec:
    """A type that is an instance's wakeup: `host` names the field that references the host it
    wakes, `register` the op a stopping worker registers its next deadline through (its input
    takes `{at}`), and `outputs(state).healthy` whether it is healthy. Declaring one in the data
    files makes the worker of `remit serve --worker` stop when idle (`resources/wakeups.py`)."""

    host: str
    register: str
    # A function, so no two specs would compare equal by it: left out of the comparison.
    outputs: Callable[[Mapping[str, Any]], DatabaseOutputs] | None = field(
        default=None, compare=False
    )


def database_url_secret(export: str) -> str:
    """The secret a database's URL is stored in, for the declaration named `export`:
    `store` → `REMIT_DATABASE_URL_STORE`, `mainStore` or `main_store` →
    `REMIT_DATABASE_URL_MAIN_STORE`."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", export)
    return "REMIT_DATABASE_URL_" + re.sub(r"[^A-Za-z0-9]+", "_", snake).upper()


def has_path(model: type[BaseModel], path: str) -> bool:
    """True when the dotted `path` names a field of `model`, through nested models."""
    current: Any = model
    for part in path.split("."):
        fields = getattr(current, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            return False
        current = fields[part].annotation
        # `Model | None` and friends: the model among the union's members.
        for member in getattr(current, "__args__", ()) or ():
            if isinstance(member, type) and issubclass(member, BaseModel):
                current = member
    return True


def digest(state: Mapping[str, Any] | None) -> str | None:
    """A stable digest of a state, what an `update` checks the plan's basis against."""
    if state is None:
        return None
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


@dataclass(frozen=True, eq=False)
class ResourceType:
    """A kind of resource at a vendor, e.g. `resource_type("dns.record", schema=Record, ...)`.

    Calling it declares one: `www = record(name="www.example.com", type="CNAME", ...)` in a
    module under the app's `resources/`. See the module's docstring for the roles.
    """

    id: str
    schema: type[BaseModel]
    title: str = ""
    immutable: tuple[str, ...] = ()
    vendor_owned: tuple[str, ...] = ()
    write_only: tuple[str, ...] = ()
    references: Mapping[str, Reference] = field(default_factory=dict)
    writable: bool = True
    stateless: bool = False
    after_create: tuple[AfterCreate, ...] = ()
    database: DatabaseSpec | None = None
    host: HostSpec | None = None
    wakeup: WakeupSpec | None = None
    ops: Mapping[str, Op[Any, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._check()
        made: dict[str, Op[Any, Any]] = {}
        what = self.title or self.id
        shapes: dict[str, tuple[str, type[BaseModel], type[BaseModel], str]] = {
            "read": ("read", ResourceRef, ReadOut, f"Read a {what} by its id"),
            "import": ("read", ResourceRef, ReadOut, f"Find an existing {what} to bind"),
            "plan": ("read", PlanIn, PlanOut, f"What apply would do to a {what}"),
            "create": ("write", CreateIn, Applied, f"Make a {what}"),
            "update": ("write", UpdateIn, Applied, f"Change a {what} in place"),
            "delete": ("write", ResourceRef, Deleted, f"Delete a {what}"),
        }
        for name in self.op_names:
            effect, given, answered, description = shapes[name]
            made[name] = op(
                f"{self.id}.{name}",
                effect="read" if effect == "read" else "write",
                input=given,
                output=answered,
                # A create, update or delete is keyed: the same key again is the same change.
                idempotent=True,
                description=description,
            )
        object.__setattr__(self, "ops", made)

    @property
    def vendor(self) -> str:
        return self.id.split(".")[0]

    @property
    def op_names(self) -> tuple[str, ...]:
        return RESOURCE_OPS if self.writable else RESOURCE_OPS[:3]

    @property
    def declared_fields(self) -> tuple[str, ...]:
        """The schema's fields a declaration may set: all but the vendor-owned."""
        return tuple(name for name in self.schema.model_fields if name not in self.vendor_owned)

    def readable(self, state: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """`state` as remit keeps it: the schema's fields, the write-only ones left out."""
        if state is None:
            return None
        return {
            name: value
            for name, value in state.items()
            if name in self.schema.model_fields and name not in self.write_only
        }

    def change_op(self, op_id: str) -> bool:
        return op_id.startswith(self.id + ".") and op_id.rsplit(".", 1)[1] in CHANGE_OPS

    def __call__(self, **fields: Any) -> Declaration:
        return Declaration.of(self, fields)

    def __repr__(self) -> str:
        return f"ResourceType({self.id!r})"

    def _check(self) -> None:
        where = f"resource type `{self.id}`"
        if not isinstance(self.id, str) or not _TYPE_ID.fullmatch(self.id):
            raise AppError(
                f"resource type id `{self.id}` must be `<vendor>.<type>`, lowercase letters, "
                "digits and underscores, e.g. `dns.record`"
            )
        if not (isinstance(self.schema, type) and issubclass(self.schema, BaseModel)):
            raise AppError(f"{where}: its schema must be a pydantic model class")
        known = self.schema.model_fields
        problems: list[str] = []
        roles = {
            "immutable": self.immutable,
            "vendor_owned": self.vendor_owned,
            "write_only": self.write_only,
            "references": tuple(self.references),
        }
        for role, names in roles.items():
            for name in names:
                if name not in known:
                    problems.append(f"{role} names `{name}`, which is not a field of its schema")
        for first, second, why in (
            (
                "immutable",
                "vendor_owned",
                "a vendor-owned field is never declared, so no change of it replaces",
            ),
            (
                "immutable",
                "write_only",
                "a write-only field is never read back, so its change cannot be seen",
            ),
            (
                "vendor_owned",
                "write_only",
                "a write-only field is declared, a vendor-owned one is not",
            ),
            (
                "vendor_owned",
                "references",
                "a vendor-owned field is never declared, so it takes no reference",
            ),
            ("write_only", "references", "a write-only field takes a secret, not a reference"),
        ):
            for name in sorted(set(roles[first]) & set(roles[second])):
                problems.append(f"`{name}` is both {first} and {second}: {why}")
        for name in self.vendor_owned:
            if name in known and known[name].is_required():
                problems.append(
                    f"vendor-owned `{name}` is required by its schema: give it a default "
                    "(e.g. `str | None = None`), since no declaration sets it"
                )
        for name, reference in self.references.items():
            if not isinstance(reference, Reference):
                problems.append(f"references[{name!r}] must be a Reference(types=..., fields=...)")
        if self.stateless and not self.writable:
            problems.append("it is stateless but not writable: apply never replaces or deletes it")
        if self.after_create and not self.writable:
            problems.append("it has after_create steps but is not writable: apply never makes one")
        for step in self.after_create:
            if not isinstance(step, AfterCreate) or not callable(step.input):
                problems.append(f"after_create lists {step!r}: use AfterCreate(op, input=...)")
            elif step.op.split(".")[0] != self.vendor:
                problems.append(
                    f"after_create calls `{step.op}`, which is not an op of `{self.vendor}`"
                )
        if self.database is not None:
            problems.extend(_database_problems(self))
        if self.host is not None:
            problems.extend(_host_problems(self))
        if self.wakeup is not None:
            if self.wakeup.host not in self.references:
                problems.append(
                    f"its wakeup's host, `{self.wakeup.host}`, must be one of its references"
                )
            if self.wakeup.register.split(".")[0] != self.vendor:
                problems.append(
                    f"its wakeup's register, `{self.wakeup.register}`, is not an op of `{self.vendor}`"
                )
            if self.wakeup.outputs is not None and not callable(self.wakeup.outputs):
                problems.append("its wakeup's outputs must be a function of the state")
        if problems:
            raise AppError(f"{where}: " + "; ".join(problems))


def _database_problems(rtype: ResourceType) -> list[str]:
    """What is wrong with a type's `database` on its own; its op's shape is checked with the
    connector's ops (`check_contract_ops`)."""
    spec = rtype.database
    assert spec is not None
    problems: list[str] = []
    pre = "its database: "
    if not rtype.writable:
        problems.append(pre + "it must be writable, so apply can create and update it")
    if rtype.stateless:
        problems.append(
            pre + "it must not be stateless: it holds data, so apply asks before it deletes one"
        )
    capabilities = spec.capabilities
    for name in ("pauses", "branch"):
        if not isinstance(getattr(capabilities, name, None), bool):
            problems.append(pre + f"capabilities.{name} must be True or False")
    inputs = spec.inputs
    region = getattr(inputs, "region", None)
    if not isinstance(region, str) or not has_path(rtype.schema, region):
        problems.append(pre + f"inputs.region names no field ({region!r})")
    size = getattr(inputs, "size", None)
    if size is not None and (not isinstance(size, str) or not has_path(rtype.schema, size)):
        problems.append(pre + f"inputs.size names no field ({size!r})")
    parts = spec.store_url.split(".") if isinstance(spec.store_url, str) else []
    if (
        len(parts) != 3
        or parts[0] != rtype.vendor
        or not all(re.fullmatch(_PART, p) for p in parts)
    ):
        problems.append(
            pre + f"store_url must name an op of its vendor, `{rtype.vendor}.<group>.<op>` "
            f"({spec.store_url!r})"
        )
    elif f"{parts[0]}.{parts[1]}" == rtype.id and parts[2] in RESOURCE_OPS:
        problems.append(pre + f"store_url must be an op of its own, not the type's `{parts[2]}`")
    elif not any(
        step.op == spec.store_url for step in rtype.after_create if isinstance(step, AfterCreate)
    ):
        problems.append(
            pre + f"after_create must call `{spec.store_url}`, so apply stores the URL once it "
            "makes a database"
        )
    if spec.regions is not None and (
        not isinstance(spec.regions, tuple | list)
        or not all(isinstance(r, str) and r for r in spec.regions)
    ):
        problems.append(pre + "regions must be a list of region names")
    if not callable(spec.outputs):
        problems.append(pre + "outputs must be a function of the state")
    return problems


def _host_problems(rtype: ResourceType) -> list[str]:
    """What is wrong with a type's `host`: its url must name a field, its revision a field a
    declaration sets and the vendor reads back, taking a commit's sha."""
    spec = rtype.host
    assert spec is not None
    problems: list[str] = []
    if not isinstance(spec.url, str) or not has_path(rtype.schema, spec.url):
        problems.append(f"its host's url names no field (`{spec.url}`)")
    if spec.outputs is not None and not callable(spec.outputs):
        problems.append("its host's outputs must be a function of the state")
    revision = spec.revision
    if revision is None:
        return problems
    known = rtype.schema.model_fields
    pre = f"its host's revision, `{revision}`, "
    if not isinstance(revision, str) or revision not in known:
        problems.append(pre + "is not a field of its schema: name the field holding the commit")
        return problems
    for role, names, why in (
        ("immutable", rtype.immutable, "a new revision is deployed in place, not by a replace"),
        ("vendor_owned", rtype.vendor_owned, "a declaration sets the revision a host runs"),
        ("write_only", rtype.write_only, "the revision a host runs is read back"),
        ("references", tuple(rtype.references), "it takes a commit, not a reference"),
    ):
        if revision in names:
            problems.append(pre + f"is {role}: {why}")
    try:
        TypeAdapter(known[revision].annotation or Any).validate_python("0" * 40, strict=True)
    except ValidationError:
        problems.append(pre + "does not take a string: give it the type `str | None`")
    return problems


def host_health(rtype: ResourceType, state: Mapping[str, Any] | None) -> tuple[bool, str]:
    """Whether a host is healthy, and why not: by its `HostSpec.outputs` when it has them,
    else healthy when its state was read back; `state` None (gone at the vendor) is not."""
    spec = rtype.host
    if spec is None:
        raise AppError(
            f"{rtype.id} is no host, so it has no health to check: give it host=HostSpec(...)"
        )
    if state is None:
        return False, f"the vendor has no such {rtype.id}: it is gone"
    if spec.outputs is None:
        return True, ""
    outputs = spec.outputs(state)
    if outputs.healthy:
        return True, ""
    why = outputs.why or f"its outputs say the {rtype.id} is not healthy"
    running = state.get(spec.revision) if spec.revision is not None else None
    if isinstance(running, str) and running:
        why += f" (running revision {running})"
    return False, why


def check_contract_ops(rtype: ResourceType, ops: Mapping[str, Op[Any, Any]]) -> None:
    """Refuse a type whose contract or after_create names an op its connector does not
    declare, or a database's `store_url` that does not take `{id or ref, export}`."""
    where = f"resource type `{rtype.id}`"
    for step in rtype.after_create:
        if step.op not in ops:
            raise AppError(
                f"{where}: after_create calls `{step.op}`, which its connector does not declare: "
                "add the op to the connector's ops"
            )
    if rtype.database is not None:
        store = ops.get(rtype.database.store_url)
        if store is None:
            raise AppError(
                f"{where}: its database's store_url, `{rtype.database.store_url}`, is no op of "
                "its connector: declare it"
            )
        fields = store.input.model_fields
        if "export" not in fields or not ({"id", "ref"} & set(fields)):
            raise AppError(
                f"{where}: its database's store_url, `{store.id}`, must take "
                "{id or ref, export}: give its input model those fields"
            )
    if rtype.wakeup is not None and rtype.wakeup.register not in ops:
        raise AppError(
            f"{where}: its wakeup's register, `{rtype.wakeup.register}`, is no op of its "
            "connector: declare it"
        )
    if rtype.wakeup is not None and not takes_a_wake(ops[rtype.wakeup.register]):
        raise AppError(
            f"{where}: its wakeup's register, `{rtype.wakeup.register}`, must take {{at}} and "
            "keep it (the worker calls it with the time to wake at, ISO 8601 with an offset): "
            "give its input model a field `at: datetime`"
        )


def resource_type(
    id: str,
    *,
    schema: type[BaseModel],
    title: str = "",
    immutable: Iterable[str] = (),
    vendor_owned: Iterable[str] = (),
    write_only: Iterable[str] = (),
    references: Mapping[str, Reference] | None = None,
    writable: bool = True,
    stateless: bool = False,
    after_create: Iterable[AfterCreate] = (),
    database: DatabaseSpec | None = None,
    host: HostSpec | None = None,
    wakeup: WakeupSpec | None = None,
) -> ResourceType:
    """Declare a resource type. See `ResourceType`."""
    return ResourceType(
        id=id,
        schema=schema,
        title=title,
        immutable=tuple(immutable),
        vendor_owned=tuple(vendor_owned),
        write_only=tuple(write_only),
        references=dict(references or {}),
        writable=writable,
        stateless=stateless,
        after_create=tuple(after_create),
        database=database,
        host=host,
        wakeup=wakeup,
    )


@dataclass(frozen=True)
class Secret:
    """A write-only value taken from remit's secrets by name: `secret("DB_PASSWORD")`."""

    name: str

    def marker(self) -> dict[str, str]:
        return {SECRET_KEY: self.name}


@dataclass(frozen=True)
class Ref:
    """Another declaration's field, resolved when apply gets to it: `ref("web", "url")`."""

    name: str
    field: str

    def marker(self) -> dict[str, str]:
        return {REF_KEY: f"{self.name}.{self.field}"}


@dataclass(frozen=True)
class Source:
    """The commit a branch of the app's operations repo is at, resolved when apply runs:
    `source("main")`, in a host's revision field."""

    ref: str

    def marker(self) -> dict[str, str]:
        return {SOURCE_KEY: self.ref}


_SECRET_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
# A branch name as git takes it, never an option (`-x`) nor a range (`a..b`).
_GIT_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")


def secret(name: str) -> Secret:
    """Mark a write-only field's value as the secret `name` (`remit secrets set NAME`)."""
    if not isinstance(name, str) or not _SECRET_NAME.fullmatch(name):
        raise AppError(
            f"secret({name!r}): a secret's name is written like an environment variable's, "
            'e.g. secret("DB_PASSWORD")'
        )
    return Secret(name)


def ref(name: str, field: str) -> Ref:
    """Mark a reference field's value as declaration `name`'s field `field`."""
    if not isinstance(name, str) or not isinstance(field, str) or not name or not field:
        raise AppError(f"ref({name!r}, {field!r}): give the declaration's name and its field's")
    return Ref(name, field)


def source(ref: str = "main") -> Source:
    """Mark a host's revision field as the commit `ref` (a branch of the app's operations
    repo) is at when apply runs; a deploy pinned to a revision gives that one instead."""
    if (
        not isinstance(ref, str)
        or not _GIT_REF.fullmatch(ref)
        or ".." in ref
        or ref.endswith(("/", ".", ".lock"))
    ):
        raise AppError(
            f"source({ref!r}): give the name of a branch of the app's operations repo, "
            'e.g. source("main")'
        )
    return Source(ref)


def is_marker(value: Any, key: str) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(key), str)


def secret_names(value: Any) -> list[str]:
    """The names of the secrets marked anywhere in `value` (a declaration's JSON)."""
    if is_marker(value, SECRET_KEY):
        return [value[SECRET_KEY]]
    if isinstance(value, dict):
        return [name for item in value.values() for name in secret_names(item)]
    if isinstance(value, list):
        return [name for item in value for name in secret_names(item)]
    return []


def _markers(value: Any, where: str, *, write_only: bool) -> Any:
    """`value` as JSON with its markers written out; refusing a secret outside a write-only
    field, a plain value inside one, or a reference below a field's top."""
    if isinstance(value, Secret):
        if not write_only:
            raise AppError(f"{where} is a secret, which only a write-only field takes")
        return value.marker()
    if isinstance(value, Ref):
        raise AppError(
            f"{where} is a reference inside a value: a reference is a whole field's value"
        )
    if isinstance(value, Source):
        raise AppError(
            f"{where} is a source() inside a value: source() is a whole field's value, a "
            "host's revision"
        )
    if isinstance(value, Mapping):
        return {
            str(k): _markers(v, f"{where}.{k}", write_only=write_only) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_markers(v, f"{where}[{i}]", write_only=write_only) for i, v in enumerate(value)]
    if write_only and value is not None:
        raise AppError(
            f'{where} is a plain value in a write-only field: give it as secret("NAME"), '
            "so the value stays among remit's secrets and out of your files"
        )
    return value


def _at_path(fields: Mapping[str, Any], path: str) -> Any:
    current: Any = fields
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def _marked(value: Any, key: str) -> bool:
    """Whether `value` holds a marker of `key` anywhere."""
    if is_marker(value, key):
        return True
    if isinstance(value, dict):
        return any(_marked(item, key) for item in value.values())
    if isinstance(value, list):
        return any(_marked(item, key) for item in value)
    return False


def _no_secrets(value: Any) -> Any:
    """`value` with each secret marker as a placeholder string, for checking its type."""
    if is_marker(value, SECRET_KEY):
        return "secret"
    if isinstance(value, dict):
        return {k: _no_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_secrets(v) for v in value]
    return value


@dataclass(frozen=True, eq=False)
class Declaration:
    """One resource an app's data file says should exist: its type and declared fields, as
    JSON, with `{"$secret": NAME}`, `{"$ref": "name.field"}` and `{"$source": "main"}`
    markers. The loader names it after the variable it is exported as."""

    type: ResourceType
    fields: Mapping[str, Any]

    @classmethod
    def of(cls, rtype: ResourceType, given: Mapping[str, Any]) -> Declaration:
        where = f"a {rtype.id}"
        problems: list[str] = []
        known = rtype.schema.model_fields
        fields: dict[str, Any] = {}
        for name, value in given.items():
            if name not in known:
                problems.append(
                    f"`{name}` is no field of {rtype.id} (its fields: "
                    f"{', '.join(rtype.declared_fields)})"
                )
                continue
            if name in rtype.vendor_owned:
                problems.append(f"`{name}` is set by the vendor: leave it out")
                continue
            if isinstance(value, Source):
                refused = _source_refused(rtype, name)
                if refused:
                    problems.append(refused)
                else:
                    fields[name] = value.marker()
                continue
            if isinstance(value, Ref):
                reference = rtype.references.get(name)
                if reference is None:
                    problems.append(
                        f"`{name}` takes no reference: give a value, or declare the field "
                        f"among {rtype.id}'s references"
                    )
                    continue
                if reference.fields and value.field not in reference.fields:
                    problems.append(
                        f"`{name}` takes a reference to {' or '.join(reference.fields)}, "
                        f"not to `{value.field}`"
                    )
                    continue
                fields[name] = value.marker()
                continue
            try:
                written = _markers(value, f"`{name}`", write_only=name in rtype.write_only)
            except AppError as refused:
                problems.append(str(refused))
                continue
            if _marked(written, REF_KEY) or (
                name not in rtype.write_only and _marked(written, SECRET_KEY)
            ):
                problems.append(
                    f"`{name}` holds a `$secret` or `$ref` object written by hand: use "
                    'secret("NAME") in a write-only field, ref("name", "field") in a reference'
                )
                continue
            if _marked(written, SOURCE_KEY):
                problems.append(
                    f"`{name}` holds a `$source` object written by hand: use "
                    'source("main"), in a host\'s revision field'
                )
                continue
            adapter: TypeAdapter[Any] = TypeAdapter(known[name].annotation or Any)
            try:
                checked = adapter.validate_python(_no_secrets(written))
            except ValidationError as invalid:
                error = invalid.errors()[0]
                problems.append(f"`{name}`: {error['msg']} (got {value!r})")
                continue
            if secret_names(written):
                fields[name] = written
            else:
                fields[name] = adapter.dump_python(checked, mode="json")
        revision = rtype.host.revision if rtype.host is not None else None
        for name in rtype.declared_fields:
            # A host's revision left out is the vendor's to choose (or apply's to pin).
            if name not in given and known[name].is_required() and name != revision:
                problems.append(f"`{name}` is required")
        spec = rtype.database
        if spec is not None and spec.regions is not None:
            region = _at_path(fields, spec.inputs.region)
            if isinstance(region, str) and region not in spec.regions:
                problems.append(
                    f"`{spec.inputs.region}` is {region!r}, which is no region of "
                    f"{rtype.id} (its regions: {', '.join(spec.regions)})"
                )
        if problems:
            raise AppError(f"{where}: " + "; ".join(problems))
        return cls(rtype, fields)

    def sources(self) -> dict[str, str]:
        """The declaration's `source()` fields: the branch each names."""
        return {
            name: value[SOURCE_KEY]
            for name, value in self.fields.items()
            if is_marker(value, SOURCE_KEY)
        }

    def refs(self) -> dict[str, tuple[str, str]]:
        """The declaration's references, by field: (the other declaration, its field)."""
        found: dict[str, tuple[str, str]] = {}
        for name, value in self.fields.items():
            if is_marker(value, REF_KEY):
                other, _, field_name = value[REF_KEY].partition(".")
                found[name] = (other, field_name)
        return found

    def __repr__(self) -> str:
        return f"Declaration({self.type.id}, {dict(self.fields)!r})"


def _source_refused(rtype: ResourceType, name: str) -> str | None:
    """Why `name` of `rtype` may not take `source()`; None when it may (a host's revision)."""
    host = rtype.host
    if host is not None and host.revision == name:
        return None
    if host is not None and host.revision is not None:
        where = f"only a host's revision field does, and {rtype.id}'s is `{host.revision}`"
    elif host is not None:
        where = (
            f"only a host's revision field does, and {rtype.id} declares none (its "
            "connector may name one: HostSpec(revision=...))"
        )
    else:
        where = f"only a host's revision field does, and {rtype.id} is no host"
    return f"`{name}` takes no source(): {where}; give `{name}` a value"

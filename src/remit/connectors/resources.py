"""Implementing resource types: the six ops answered from four methods a vendor writes.

A driver or fake of a connector with resource types lists them in `resource_types` and writes

- `read_resource(rtype, id, call)` → the state, or None when there is no such resource;
- `create_resource(rtype, desired, call)` → (the vendor's id, the state);
- `update_resource(rtype, id, desired, call)` → the state;
- `delete_resource(rtype, id, call)` (nothing when it is already gone).

remit answers the rest alike for every vendor: `plan` reads and compares (`plan_change`),
`import` reads and refuses one that is not there, `update` re-plans first and refuses with
`plan_changed` when the vendor's state moved since the plan it was decided on. What a method is
given as `desired` has the write-only values in the clear (taken from remit's secrets just
before the call); what it returns is cut to the schema's readable fields, so no write-only value
reaches the ledger, a step's output or a fake's journal.

`ResourceFake` keeps its resources in its effects, so a fake with a journal is one vendor shared
by every process that opens the file; `tamper` changes one behind remit's back, as a person at
the vendor's console would.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from remit.connectors.base import AppliedEffect, CallContext, Driver, Fake, Implementation
from remit.core.errors import DriverError
from remit.declare.ops import Op
from remit.declare.resources import (
    SECRET_KEY,
    SENSITIVE,
    Applied,
    CreateIn,
    Deleted,
    PlanIn,
    PlanOut,
    ReadOut,
    ResourceRef,
    ResourceType,
    UpdateIn,
    digest,
    is_marker,
    secret_names,
)

# The folder a resource fake keeps its journal in when it is given none (one file per vendor),
# so `remit plan`, `remit apply` and a worker on fakes see one vendor.
FAKES_DIR = "REMIT_FAKES_DIR"


def plan_change(
    rtype: ResourceType,
    *,
    id: str | None,
    state: Mapping[str, Any] | None,
    desired: Mapping[str, Any] | None,
) -> PlanOut:
    """What apply would do to bring `state` (None: nothing there) to `desired` (None: the
    declaration was removed), by the type's field roles. Vendor-owned and write-only fields are
    not compared; a changed immutable field forces a replace."""
    readable = rtype.readable(state)
    basis = digest(readable)
    if desired is None:
        return PlanOut(
            action="delete" if readable is not None else "none", state=readable, basis=basis
        )
    shown = _shown(rtype, desired)
    if readable is None:
        return PlanOut(action="create", planned=shown, unknown=list(rtype.vendor_owned), basis=None)
    changed = [
        name
        for name, value in desired.items()
        if name not in rtype.write_only
        and name not in rtype.vendor_owned
        and not _same(readable.get(name), value)
    ]
    replace = [name for name in changed if name in rtype.immutable]
    planned = {**readable, **shown}
    if replace:
        for name in rtype.vendor_owned:
            planned.pop(name, None)
        return PlanOut(
            action="replace",
            planned=planned,
            state=readable,
            unknown=list(rtype.vendor_owned),
            replace=replace,
            basis=basis,
        )
    action = "update" if changed else "none"
    return PlanOut(action=action, planned=planned, state=readable, basis=basis)


def _same(old: Any, new: Any) -> bool:
    return bool(old == new)


def _shown(rtype: ResourceType, desired: Mapping[str, Any]) -> dict[str, Any]:
    """`desired` as a plan shows it: write-only fields as `(sensitive)`."""
    return {
        name: SENSITIVE if name in rtype.write_only else value
        for name, value in desired.items()
        if name in rtype.schema.model_fields
    }


def reveal(value: Any, call: CallContext) -> Any:
    """`value` with each `{"$secret": NAME}` marker replaced by the secret's value, read from
    the call's credentials (the environment over remit's stored secrets); a secret that is not
    set fails the call naming it."""
    if is_marker(value, SECRET_KEY):
        return call.credential(value[SECRET_KEY])
    if isinstance(value, dict):
        return {key: reveal(item, call) for key, item in value.items()}
    if isinstance(value, list):
        return [reveal(item, call) for item in value]
    return value


def revealed(rtype: ResourceType, desired: dict[str, Any], call: CallContext) -> dict[str, Any]:
    """`desired` with its write-only fields' secrets in the clear (`reveal`); no other field's
    value is ever taken for a secret."""
    return {
        name: reveal(value, call) if name in rtype.write_only else value
        for name, value in desired.items()
    }


def plan_changed(rtype: ResourceType, id: str, expected: str, now: str) -> DriverError:
    return DriverError(
        f"{rtype.id} {id}: the plan changed since it was made (it was {expected}, it is now "
        f"{now}): the vendor's state moved; run `remit plan` again and apply what it shows",
        retryable=False,
        vendor_code="plan_changed",
    )


class ResourceImplementation(Implementation, metaclass=ABCMeta):
    """What a driver and a fake of resource types share: the six ops of each type in
    `resource_types`, answered through the four methods the vendor writes."""

    resource_types: ClassVar[tuple[ResourceType, ...]] = ()
    _types_by_id: ClassVar[dict[str, ResourceType]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = dict(cls._handlers)
        for rtype in cls.resource_types:
            for name, declared in rtype.ops.items():
                handlers.setdefault(declared.id, f"_resource_{name}")
        cls._handlers = handlers
        cls._types_by_id = {rtype.id: rtype for rtype in cls.resource_types}

    # What the vendor writes.

    @abstractmethod
    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        """See the module's docstring."""

    @abstractmethod
    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        """See the module's docstring."""

    @abstractmethod
    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        """See the module's docstring."""

    @abstractmethod
    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        """See the module's docstring."""

    def as_stored(
        self, rtype: ResourceType, desired: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """`desired` as the vendor would store it (a URL without its trailing slash), so a
        value the vendor normalises plans no change; by default as declared."""
        return desired

    def call_credentials(self, input: BaseModel) -> tuple[str, ...]:
        """The secrets a create or update sends: their values are redacted like credentials,
        wherever they came from (remit's store, or the environment)."""
        desired = getattr(input, "desired", None)
        return tuple(secret_names(desired)) if isinstance(desired, dict) else ()

    # What remit answers alike.

    def _type(self, call: CallContext) -> ResourceType:
        return self._types_by_id[f"{call.op.vendor}.{call.op.resource}"]

    def _resource_read(self, input: ResourceRef, call: CallContext) -> ReadOut:
        rtype = self._type(call)
        state = rtype.readable(self.read_resource(rtype, input.id, call))
        return ReadOut(id=input.id, gone=state is None, state=state)

    def _resource_import(self, input: ResourceRef, call: CallContext) -> ReadOut:
        found = self._resource_read(input, call)
        if found.gone:
            raise DriverError(
                f"{call.op.resource} {input.id}: the vendor has no such {self._type(call).id}; "
                "check the id",
                retryable=False,
                vendor_code="not_found",
            )
        return found

    def _resource_plan(self, input: PlanIn, call: CallContext) -> PlanOut:
        rtype = self._type(call)
        state = None if input.id is None else self.read_resource(rtype, input.id, call)
        desired = self.as_stored(rtype, input.desired)
        return plan_change(rtype, id=input.id, state=state, desired=desired)

    def _resource_create(self, input: CreateIn, call: CallContext) -> Applied:
        rtype = self._type(call)
        made, state = self.create_resource(rtype, revealed(rtype, input.desired, call), call)
        return Applied(id=made, state=rtype.readable(state) or {})

    def _resource_update(self, input: UpdateIn, call: CallContext) -> Applied:
        rtype = self._type(call)
        state = self.read_resource(rtype, input.id, call)
        if state is None:
            raise DriverError(
                f"{rtype.id} {input.id}: it is gone at the vendor, so it cannot be updated; "
                "run `remit plan` again (it will be made anew)",
                retryable=False,
                vendor_code="plan_changed",
            )
        desired = self.as_stored(rtype, input.desired) or {}
        fresh = plan_change(rtype, id=input.id, state=state, desired=desired)
        expect = input.expect
        if expect is not None and (
            expect.action != fresh.action
            or sorted(expect.replace) != sorted(fresh.replace)
            or (expect.basis is not None and expect.basis != fresh.basis)
        ):
            was = (
                expect.action
                if expect.basis == fresh.basis
                else f"{expect.action} of another state"
            )
            raise plan_changed(rtype, input.id, was, fresh.action)
        if fresh.action == "replace":
            raise DriverError(
                f"{rtype.id} {input.id}: {', '.join(fresh.replace)} cannot change in place; "
                "apply replaces it",
                retryable=False,
                vendor_code="replace_needed",
            )
        updated = self.update_resource(rtype, input.id, revealed(rtype, desired, call), call)
        return Applied(id=input.id, state=rtype.readable(updated) or {})

    def _resource_delete(self, input: ResourceRef, call: CallContext) -> Deleted:
        self.delete_resource(self._type(call), input.id, call)
        return Deleted(id=input.id)


class ResourceDriver(ResourceImplementation, Driver):
    """A driver of resource types: implement the four methods against the vendor's API, and
    pass `call.idempotency_key` with every create so a repeat makes nothing twice."""


class ResourceFake(ResourceImplementation, Fake):
    """A fake vendor of resource types, its resources folded from its effects (and so from its
    journal, shared by every process that opens it).

    `vendor_fields(rtype, id, desired)` gives what the vendor sets on a new resource (its URL,
    its host); `refuse(rtype, desired)` may raise a `DriverError` for what the vendor refuses.
    What the fake was sent in write-only fields is kept in memory only, in `received`.
    """

    id_prefix: ClassVar[str] = "res"

    def __init__(self, *, journal: Path | str | None = None) -> None:
        if journal is None and os.environ.get(FAKES_DIR) and self.resource_types:
            folder = Path(os.environ[FAKES_DIR])
            folder.mkdir(parents=True, exist_ok=True)
            journal = folder / f"{self.resource_types[0].vendor}.jsonl"
        if journal is not None:
            Path(journal).parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[tuple[str, str], dict[str, Any]] = {}
        self._folded = 0
        self._fold_lock = threading.Lock()
        self.received: dict[tuple[str, str], dict[str, Any]] = {}
        super().__init__(journal=journal)

    # What a fake vendor may add.

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {}

    def refuse(self, rtype: ResourceType, desired: Mapping[str, Any]) -> None:
        return None

    # The vendor's state.

    def records(self, rtype: ResourceType | str) -> dict[str, dict[str, Any]]:
        """Every resource of a type the fake holds, by id."""
        type_id = rtype if isinstance(rtype, str) else rtype.id
        self._fold()
        return {rid: dict(state) for (tid, rid), state in self._records.items() if tid == type_id}

    def state(self) -> dict[str, Any]:
        """Every resource the fake vendor holds, by type and id (what it was sent in write-only
        fields is left out, as the vendor would never show it)."""
        self._catch_up()
        self._fold()
        with self._fold_lock:
            held: dict[str, dict[str, Any]] = {rtype.id: {} for rtype in self.resource_types}
            for (type_id, rid), fields in sorted(self._records.items()):
                hidden = self._types_by_id[type_id].write_only
                held.setdefault(type_id, {})[rid] = {
                    name: value for name, value in fields.items() if name not in hidden
                }
        return {"resources": held}

    def tamper(self, rtype: ResourceType, id: str, **fields: Any) -> None:
        """Change a resource behind remit's back (a person at the vendor's console); a field
        given as None is removed. Recorded like any write, so every process sees it."""
        self._fold()
        with self._vendor_lock():
            self._catch_up()
            self._fold()
            state = dict(self._records.get((rtype.id, id)) or {})
            for name, value in fields.items():
                if value is None:
                    state.pop(name, None)
                else:
                    state[name] = value
            self._record(
                AppliedEffect(
                    op=f"{rtype.id}.update",
                    idempotency_key=f"tamper:{uuid.uuid4().hex}",
                    input={"id": id},
                    output=Applied(id=id, state=state).model_dump(mode="json"),
                )
            )

    def vanish(self, rtype: ResourceType, id: str) -> None:
        """Delete a resource behind remit's back."""
        with self._vendor_lock():
            self._catch_up()
            self._record(
                AppliedEffect(
                    op=f"{rtype.id}.delete",
                    idempotency_key=f"vanish:{uuid.uuid4().hex}",
                    input={"id": id},
                    output=Deleted(id=id).model_dump(mode="json"),
                )
            )

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        self._catch_up()
        return super().invoke(op, input, call)

    def _fold(self) -> None:
        with self._fold_lock:
            effects = self.effects
            while self._folded < len(effects):
                effect = effects[self._folded]
                self._folded += 1
                type_id, _, name = effect.op.rpartition(".")
                if type_id not in self._types_by_id:
                    continue
                made = effect.output.get("id")
                if not isinstance(made, str):
                    continue
                if name in ("create", "update"):
                    self._records[type_id, made] = dict(effect.output.get("state") or {})
                elif name == "delete":
                    self._records.pop((type_id, made), None)

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        self._fold()
        return self._records.get((rtype.id, id))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        self.refuse(rtype, desired)
        made = f"{self.id_prefix}-" + hashlib.sha256(call.idempotency_key.encode()).hexdigest()[:12]
        self._receive(rtype, made, desired)
        return made, {**desired, **self.vendor_fields(rtype, made, desired)}

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        self.refuse(rtype, desired)
        self._fold()
        current = self._records.get((rtype.id, id)) or {}
        self._receive(rtype, id, desired)
        kept = {name: current[name] for name in rtype.vendor_owned if name in current}
        return {**current, **desired, **kept}

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        return None

    def _receive(self, rtype: ResourceType, id: str, desired: Mapping[str, Any]) -> None:
        sent = {name: desired[name] for name in rtype.write_only if name in desired}
        if sent:
            self.received[rtype.id, id] = sent

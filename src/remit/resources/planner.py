"""Plans: what apply would do to bring the vendors' world to the data files.

The planner walks the declarations in order, resolving each reference from what it has planned
so far, and asks each type's `plan` op: the vendor's driver (or fake) reads the bound object
and compares it by the type's field roles. A binding whose declaration is gone is planned for
deletion. The same walk serves `remit plan` (ops called directly, nothing recorded), the
built-in `apply` (each call a step of the run, in the ledger) and `drift`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from remit.core.errors import AppError
from remit.declare.ops import Op
from remit.declare.resources import (
    REF_KEY,
    SENSITIVE,
    UNKNOWN,
    PlanOut,
    ResourceType,
    is_marker,
)
from remit.resources.files import Declared
from remit.resources.lockfile import Binding
from remit.resources.people import is_local, local_fields

# How the planner calls an op: (op, input as JSON, a key naming the call) → the output.
Caller = Callable[[Op[Any, Any], dict[str, Any], str], BaseModel]

_SYMBOLS = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "none": " "}
_VERBS = {
    "create": "will be created",
    "update": "will be updated in place",
    "replace": "will be replaced",
    "delete": "will be deleted",
    "forget": "will be forgotten: its binding is removed and the object left at the vendor",
    "none": "is up to date",
}


@dataclass(frozen=True)
class FieldChange:
    """One field a change sets: from `old` to `new`; `new` is `(known after apply)` when only
    apply can know it, `(sensitive)` for a write-only field."""

    field: str
    old: Any = None
    new: Any = None
    forces_replace: bool = False


@dataclass(frozen=True)
class Change:
    """What apply would do to one resource."""

    name: str
    type: str
    action: str
    id: str | None = None
    fields: tuple[FieldChange, ...] = ()
    replace: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    basis: str | None = None
    # The resource is bound, but the vendor has no such object: it is made anew.
    gone: bool = False
    # Why apply cannot make this change (a type it may not change), when it cannot.
    refused: str | None = None
    # A delete that only forgets the binding, leaving the object at the vendor (a read-only
    # type's), or one already gone there.
    forget: bool = False
    stateless: bool = False
    # The desired fields as sent (references resolved; `(known after apply)` where unknown).
    desired: Mapping[str, Any] | None = None
    # The vendor's state the plan was made from (its readable fields), None when there is none.
    state: Mapping[str, Any] | None = None

    @property
    def destructive(self) -> bool:
        """A delete or replace of a resource that holds state: apply asks first."""
        return self.action in ("delete", "replace") and not self.stateless and not self.forget

    def digest(self) -> str:
        """What the change would do, as a digest: the same change planned twice has the
        same one, and any other value, field or state another."""
        shown = [
            self.action,
            self.id,
            self.basis,
            list(self.replace),
            [[f.field, f.old, f.new] for f in self.fields],
            None if self.desired is None else dict(self.desired),
        ]
        text = json.dumps(shown, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "action": self.action,
            "id": self.id,
            "fields": [f.__dict__ for f in self.fields],
            "replace": list(self.replace),
            "unknown": list(self.unknown),
            "basis": self.basis,
            "gone": self.gone,
            "refused": self.refused,
            "forget": self.forget,
            "stateless": self.stateless,
            "desired": None if self.desired is None else dict(self.desired),
            "state": None if self.state is None else dict(self.state),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Change:
        return cls(
            name=raw["name"],
            type=raw["type"],
            action=raw["action"],
            id=raw.get("id"),
            fields=tuple(FieldChange(**f) for f in raw.get("fields", ())),
            replace=tuple(raw.get("replace", ())),
            unknown=tuple(raw.get("unknown", ())),
            basis=raw.get("basis"),
            gone=bool(raw.get("gone")),
            refused=raw.get("refused"),
            forget=bool(raw.get("forget")),
            stateless=bool(raw.get("stateless")),
            desired=raw.get("desired"),
            state=raw.get("state"),
        )


@dataclass(frozen=True)
class Plan:
    """Every resource's change, in apply's order: the declared ones in reference order, then
    the deletions of bindings whose declarations are gone."""

    changes: tuple[Change, ...] = field(default_factory=tuple)

    @property
    def pending(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.action != "none")

    @property
    def has_changes(self) -> bool:
        return bool(self.pending)

    @property
    def exit_code(self) -> int:
        """0: nothing to change; 2: changes (as `terraform plan -detailed-exitcode`)."""
        return 2 if self.has_changes else 0

    def counts(self) -> dict[str, int]:
        counted = dict.fromkeys(("create", "update", "replace", "delete", "none"), 0)
        for change in self.changes:
            counted[change.action] += 1
        return counted

    def summary(self) -> str:
        n = self.counts()
        if not self.has_changes:
            return f"No changes: {n['none']} resource{'s' if n['none'] != 1 else ''} match the data files."
        parts = [f"{n[a]} to {a}" for a in ("create", "update", "replace", "delete")]
        return f"Plan: {', '.join(parts)}; {n['none']} unchanged."

    def fingerprint(self) -> str:
        """A digest of what differs (names, actions, fields and values): the same drift gives
        the same fingerprint pass after pass."""
        shown = [
            [c.name, c.action, c.gone, [[f.field, f.old, f.new] for f in c.fields]]
            for c in self.pending
        ]
        text = json.dumps(shown, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def render(self, *, unchanged: bool = False) -> str:
        """The plan as a person reads it: per resource, the action and each field's change."""
        lines: list[str] = []
        for change in self.changes:
            if change.action == "none" and not unchanged:
                continue
            bound = f" {change.id}" if change.id else ""
            verb = _VERBS["forget" if change.forget else change.action]
            head = f"{_SYMBOLS[change.action]:>3} {change.name} ({change.type}){bound} {verb}"
            if change.action == "replace" and change.replace:
                head += f": {', '.join(change.replace)} cannot change in place"
            if change.gone:
                head += " (it is gone at the vendor)"
            if change.destructive:
                head += " [asks for approval]"
            lines.append(head)
            if change.refused:
                lines.append(f"      ! {change.refused}")
            width = max((len(f.field) for f in change.fields), default=0)
            for each in change.fields:
                if change.action == "create":
                    shown = _value(each.new)
                else:
                    shown = f"{_value(each.old)} → {_value(each.new)}"
                note = "   (forces replacement)" if each.forces_replace else ""
                lines.append(f"      {each.field:<{width}}  {shown}{note}")
        lines.append(self.summary())
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"changes": [c.as_json() for c in self.changes]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Plan:
        return cls(changes=tuple(Change.from_json(c) for c in raw.get("changes", ())))


def _value(value: Any) -> str:
    if value in (UNKNOWN, SENSITIVE):
        return str(value)
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def resolve(
    fields: Mapping[str, Any], known: Mapping[str, Mapping[str, Any] | None]
) -> tuple[dict[str, Any], list[str]]:
    """The declared fields with each reference replaced by the referenced field's value, as
    far as it is known; and the fields whose value only apply can know."""
    desired: dict[str, Any] = {}
    unknown: list[str] = []
    for name, value in fields.items():
        if is_marker(value, REF_KEY):
            other, _, other_field = value[REF_KEY].partition(".")
            state = known.get(other)
            if state is None or state.get(other_field) is None:
                unknown.append(name)
                continue
            desired[name] = state[other_field]
        else:
            desired[name] = value
    return desired, unknown


def plan(
    declared: Declared,
    bindings: Mapping[str, Binding],
    types: Mapping[str, ResourceType],
    call: Caller,
) -> Plan:
    """Plan every declaration and every binding left without one (see the module)."""
    known: dict[str, Mapping[str, Any] | None] = {}
    changes: list[Change] = []
    for name in declared.order:
        declaration = declared.by_name[name]
        rtype = declaration.type
        binding = bindings.get(name)
        if binding is not None and binding.type != rtype.id:
            raise AppError(
                f"remit.lock binds `{name}` to a {binding.type} ({binding.id}), and the data "
                f"files declare `{name}` a {rtype.id}: rename the declaration, or remove its "
                "binding from remit.lock if the old object should be left alone"
            )
        if is_local(rtype):
            # Held by no vendor (a person, a group): what it declares is all there is.
            known[name] = local_fields(declaration)
            continue
        desired, unknown = resolve(declaration.fields, known)
        answer = call(
            rtype.ops["plan"],
            {"id": None if binding is None else binding.id, "desired": desired},
            f"plan:{name}",
        )
        out = PlanOut.model_validate(answer.model_dump())
        change = _change(name, rtype, binding, out, desired, unknown)
        changes.append(change)
        known[name] = _known_after(rtype, change, out)
    for name in sorted(set(bindings) - set(declared.by_name), reverse=True):
        binding = bindings[name]
        bound_type = types.get(binding.type)
        if bound_type is None:
            raise AppError(
                f"remit.lock binds `{name}` to a {binding.type} ({binding.id}), a type no "
                "connector of the app declares: add its connector back so apply can delete "
                f"it, or remove the binding of `{name}` from remit.lock to leave it alone"
            )
        answer = call(bound_type.ops["plan"], {"id": binding.id, "desired": None}, f"plan:{name}")
        out = PlanOut.model_validate(answer.model_dump())
        gone = out.action == "none"
        changes.append(
            Change(
                name=name,
                type=bound_type.id,
                action="delete",
                id=binding.id,
                basis=out.basis,
                gone=gone,
                # A read-only type's object is not apply's to delete, and a gone one is gone.
                forget=gone or not bound_type.writable,
                stateless=bound_type.stateless,
                state=out.state,
            )
        )
    return Plan(changes=tuple(changes))


def _change(
    name: str,
    rtype: ResourceType,
    binding: Binding | None,
    out: PlanOut,
    desired: Mapping[str, Any],
    unknown_refs: list[str],
) -> Change:
    action = out.action
    replace = list(out.replace)
    if unknown_refs and out.state is not None:
        moved = [f for f in unknown_refs if f in rtype.immutable]
        if moved:
            action, replace = "replace", sorted({*replace, *moved})
        elif action == "none":
            action = "update"
    state = out.state or {}
    planned = out.planned or {}
    fields: list[FieldChange] = []
    for field_name in rtype.schema.model_fields:
        if field_name in unknown_refs:
            new: Any = UNKNOWN
        elif field_name in rtype.vendor_owned:
            if action in ("create", "replace") and field_name in out.unknown:
                fields.append(FieldChange(field_name, state.get(field_name), UNKNOWN))
            continue
        elif field_name in rtype.write_only:
            if field_name in desired and action in ("create", "replace"):
                fields.append(FieldChange(field_name, None, SENSITIVE))
            continue
        elif field_name in planned:
            new = planned[field_name]
        else:
            continue
        old = state.get(field_name)
        if action == "create" or old != new:
            fields.append(
                FieldChange(
                    field_name,
                    None if action == "create" else old,
                    new,
                    forces_replace=field_name in replace,
                )
            )
    shown = {k: (UNKNOWN if k in unknown_refs else v) for k, v in desired.items()}
    for field_name in unknown_refs:
        shown[field_name] = UNKNOWN
    return Change(
        name=name,
        type=rtype.id,
        action=action,
        id=None if binding is None else binding.id,
        fields=tuple(fields) if action != "none" else (),
        replace=tuple(replace),
        unknown=tuple(sorted({*out.unknown, *unknown_refs})),
        basis=out.basis,
        gone=binding is not None and out.state is None,
        stateless=rtype.stateless,
        refused=_refusal(rtype, action),
        desired=shown,
        state=out.state,
    )


def _known_after(rtype: ResourceType, change: Change, out: PlanOut) -> Mapping[str, Any] | None:
    """What the planner knows of a resource once apply has dealt with it, for the references
    to it: its state, but for the fields only apply can know."""
    base = dict(out.planned or out.state or {})
    for name in change.unknown:
        base.pop(name, None)
    return base


def _refusal(rtype: ResourceType, action: str) -> str | None:
    if rtype.writable or action == "none":
        return None
    return (
        f"a {rtype.id} is read-only to apply (writable=False): change it at the vendor, or "
        "change the data file to match it"
    )

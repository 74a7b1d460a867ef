"""The data files: the resources an app declares under its `resources/` folder.

Each module in `resources/*.py` exports declarations, each a variable holding a resource type
called with its fields (`www = record(zone="example.com", name="www", ...)`). The variable's
name is the declaration's: the lockfile binds it, a reference names it, and a database's URL
secret is named after it. The declarations form a graph through their references, which apply
walks in order: a resource after those it references.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remit.core.errors import AppError
from remit.declare.resources import SOURCE_KEY, Declaration, ResourceType, is_marker
from remit.resources.people import PEOPLE_TYPES, check_people
from remit.resources.wakeups import check_wakeups

FOLDER = "resources"
# A name is part of the keys apply calls with, which are at most 100 characters.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,79}")


@dataclass(frozen=True)
class Declared:
    """The app's declarations by name, in apply's order (each after what it references)."""

    by_name: Mapping[str, Declaration]
    order: tuple[str, ...]
    # Where each was declared, for messages.
    where: Mapping[str, str]

    @classmethod
    def of(
        cls, declarations: Mapping[str, Declaration], types: Mapping[str, ResourceType]
    ) -> Declared:
        """Check `declarations` against the app's resource types and each other, and order
        them; `AppError` naming what to change otherwise."""
        return _declared(dict(declarations), dict.fromkeys(declarations, ""), types)

    def __len__(self) -> int:
        return len(self.by_name)

    def as_json(self) -> dict[str, dict[str, Any]]:
        """The declarations as JSON, by name: `{"type": ..., "fields": ...}` with their
        markers, as apply records them and `remit resources --declared` prints them."""
        return {
            name: {"type": d.type.id, "fields": dict(d.fields)} for name, d in self.by_name.items()
        }


EMPTY = Declared(by_name={}, order=(), where={})


def load(folder: Path, package: str, types: Mapping[str, ResourceType]) -> Declared:
    """The declarations in `folder/resources/*.py`, imported as `<package>.resources.<file>`."""
    found: dict[str, Declaration] = {}
    where: dict[str, str] = {}
    for file in sorted((folder / FOLDER).glob("*.py")):
        if file.stem.startswith("_"):
            continue
        module_name = f"{package}.{FOLDER}.{file.stem}"
        try:
            module = importlib.import_module(module_name)
        except AppError as refused:
            raise AppError(f"{file}: {refused}") from None
        except Exception as error:
            raise AppError(f"{file} failed to import: {type(error).__name__}: {error}") from error
        exported: dict[int, str] = {}
        for name, value in vars(module).items():
            if not isinstance(value, Declaration) or name.startswith("_"):
                continue
            if id(value) in exported:
                raise AppError(
                    f"{file}: `{exported[id(value)]}` and `{name}` are one declaration: each "
                    "export declares one resource; declare the second anew"
                )
            exported[id(value)] = name
            if name in found:
                raise AppError(
                    f"resource `{name}` is declared in {where[name]} and in {file}: rename one"
                )
            found[name] = value
            where[name] = str(file)
    return _declared(found, where, types)


def _declared(
    found: dict[str, Declaration], where: dict[str, str], types: Mapping[str, ResourceType]
) -> Declared:
    # The people's types are every app's: remit's own, held by no vendor.
    types = {**types, **PEOPLE_TYPES}
    for name, declaration in found.items():
        at = f" ({where[name]})" if where.get(name) else ""
        if not _NAME.fullmatch(name):
            raise AppError(
                f"resource `{name}`{at}: a declaration's name is lowercase letters, digits and "
                "underscores, starting with a letter, at most 80 characters: rename the variable"
            )
        if types.get(declaration.type.id) is not declaration.type:
            raise AppError(
                f"resource `{name}`{at} is a `{declaration.type.id}`, a type no connector of "
                f"the app declares: add its connector to `App(connectors=...)`"
            )
        for field_name, (other, other_field) in declaration.refs().items():
            target = found.get(other)
            if target is None:
                raise AppError(
                    f"resource `{name}`{at}: `{field_name}` references `{other}`, which no data "
                    f"file declares (declared: {', '.join(sorted(found)) or 'none'})"
                )
            if other_field not in target.type.schema.model_fields:
                raise AppError(
                    f"resource `{name}`{at}: `{field_name}` references `{other}.{other_field}`, "
                    f"and a {target.type.id} has no field `{other_field}`"
                )
            reference = declaration.type.references[field_name]
            if reference.types and target.type.id not in reference.types:
                raise AppError(
                    f"resource `{name}`{at}: `{field_name}` takes a reference to a "
                    f"{' or '.join(reference.types)}, and `{other}` is a {target.type.id}"
                )
            if other_field in target.type.write_only:
                raise AppError(
                    f"resource `{name}`{at}: `{field_name}` references `{other}.{other_field}`, "
                    "a write-only field, which is never read back"
                )
    check_wakeups(found, where, types)
    check_people(found, where)
    return Declared(by_name=found, order=_ordered(found), where=where)


def _ordered(found: Mapping[str, Declaration]) -> tuple[str, ...]:
    """The names in an order where each comes after what it references (by name among
    equals, so the order is the same on every machine); a cycle is refused, named."""
    needs = {name: {other for other, _ in d.refs().values()} for name, d in found.items()}
    order: list[str] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            cycle = [*visiting[visiting.index(name) :], name]
            raise AppError(
                f"resources reference each other in a cycle ({' → '.join(cycle)}): break it, "
                "since apply must make one before the other"
            )
        visiting.append(name)
        for other in sorted(needs[name]):
            visit(other)
        visiting.pop()
        done.add(name)
        order.append(name)

    for name in sorted(found):
        visit(name)
    return tuple(order)


def types_of(connectors: Iterable[Any]) -> dict[str, ResourceType]:
    """The resource types the connectors declare, by id."""
    return {rtype.id: rtype for connector in connectors for rtype in connector.resources}


def source_refs(files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The branches the `source()` fields of declarations as JSON (`Declared.as_json`) name,
    each once, sorted."""
    return sorted(
        {
            value[SOURCE_KEY]
            for each in files.values()
            for value in dict(each.get("fields") or {}).values()
            if is_marker(value, SOURCE_KEY)
        }
    )


def with_sources(
    files: Mapping[str, Mapping[str, Any]], revisions: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Declarations as JSON with each `source()` field given the revision its branch is at
    (`revisions`, by branch)."""
    return {
        name: {
            **each,
            "fields": {
                field: revisions[value[SOURCE_KEY]] if is_marker(value, SOURCE_KEY) else value
                for field, value in dict(each.get("fields") or {}).items()
            },
        }
        for name, each in files.items()
    }


def without_sources(files: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Declarations as JSON with their `source()` fields left out, so a plan compares every
    field but those."""
    return {
        name: {
            **each,
            "fields": {
                field: value
                for field, value in dict(each.get("fields") or {}).items()
                if not is_marker(value, SOURCE_KEY)
            },
        }
        for name, each in files.items()
    }

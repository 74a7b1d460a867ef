"""People as declarations: the principals and groups an app's data files may declare.

Beside the vendors' resources, `resources/*.py` may declare who is who, with remit's own types:

    ann = person(principal="user:ann", name="Ann Example")
    clerks = group(name="clerks", members=["user:ann", "agent:ar-bot"])

(`from remit.resources.people import person, group`). Other declarations reference them like
any declaration (a host's owner: `owner=ref("ann", "principal")`), and the policies take the
declared groups as `principals.toml`'s (`Group::"clerks"`, an assignee `group:clerks`). They
are checked against their types when the data files are read, and are local: no vendor holds
them, so a plan never calls a connector for one, and apply neither makes nor binds one.

For each principal and group one source holds: the data files or `policies/principals.toml`.
A group both name, or a declared person whom `principals.toml` lists, is refused when the
policies load (`policy/cedar.py`), naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from remit.core.errors import AppError, RemitError
from remit.declare.resources import Declaration, ResourceType, resource_type
from remit.policy.cedar import Principal

_GROUP_PREFIX = "group:"


class PersonFields(BaseModel):
    """A `remit.person`: a person or an agent, by the principal remit knows them as."""

    principal: str = Field(description="who they are to remit: user:<name> or agent:<name>")
    name: str | None = Field(default=None, description="how they are shown", max_length=200)
    email: str | None = Field(default=None, description="where mail reaches them", max_length=320)

    @field_validator("principal")
    @classmethod
    def _principal(cls, value: str) -> str:
        try:
            return Principal.parse(value).text
        except RemitError as error:
            raise ValueError(str(error)) from None


class GroupFields(BaseModel):
    """A `remit.group`: a group the policies and gates name, and who is in it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$", description="the group, group:<name>")
    members: list[str] = Field(
        default_factory=list,
        description="its members: declared people's principals, or group:<a declared group>",
    )


person = resource_type("remit.person", schema=PersonFields, title="person", writable=False)
group = resource_type("remit.group", schema=GroupFields, title="group", writable=False)
# The types of people, which every app's data files may declare and no vendor holds.
PEOPLE_TYPES: dict[str, ResourceType] = {person.id: person, group.id: group}


def is_local(rtype: ResourceType) -> bool:
    """Whether declarations of `rtype` are remit's own, held by no vendor: a plan resolves a
    reference to one from its declared fields, and calls no connector for it."""
    return PEOPLE_TYPES.get(rtype.id) is rtype


@dataclass(frozen=True)
class DeclaredPeople:
    """Who the data files declare: each person's principal with its declaration's name, and
    each group with its members."""

    principals: Mapping[str, str]
    groups: Mapping[str, tuple[str, ...]]


def canonical(member: str) -> str:
    """A principal or group member as remit writes it: `User::"ann"` and `user:ann` are both
    `user:ann`; `group:<name>`, and text that is no principal, stay as they are."""
    if member.startswith(_GROUP_PREFIX):
        return member
    try:
        return Principal.parse(member).text
    except RemitError:
        return member


def local_fields(declared: Declaration) -> dict[str, Any]:
    """What a declared person or group holds, as a reference to it resolves: its fields, with
    a principal written as remit writes it (`user:ann`)."""
    fields = dict(declared.fields)
    if declared.type is person:
        fields["principal"] = canonical(str(fields["principal"]))
    elif declared.type is group:
        fields["members"] = [canonical(str(m)) for m in fields.get("members") or []]
    return fields


def people_of(declarations: Mapping[str, Declaration]) -> DeclaredPeople:
    """The people and groups among `declarations` (checked by `check_people`), each principal
    as remit writes it (`user:ann`, however the declaration spells it)."""
    principals: dict[str, str] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for name, declared in sorted(declarations.items()):
        if declared.type is person:
            principals[canonical(str(declared.fields["principal"]))] = name
        elif declared.type is group:
            members = declared.fields.get("members") or []
            groups[str(declared.fields["name"])] = tuple(canonical(str(m)) for m in members)
    return DeclaredPeople(principals, groups)


def declared_people(resources: Any) -> dict[str, Any]:
    """The people `resources` (an app's `Resources`, or None) declare, as the policies'
    `Catalog` takes them: `declared_principals` and `declared_groups`."""
    people = people_of({} if resources is None else resources.declared.by_name)
    return {
        "declared_principals": frozenset(people.principals),
        "declared_groups": dict(people.groups),
    }


def check_people(found: Mapping[str, Declaration], where: Mapping[str, str]) -> None:
    """Refuse two declarations of one principal or one group, and a declared group member
    that is neither a declared person nor a declared group; `AppError` naming what to change."""
    seen: dict[tuple[str, str], str] = {}
    for name, declared in sorted(found.items()):
        if declared.type in (person, group):
            try:
                declared.type.schema.model_validate(declared.fields)
            except ValidationError as invalid:
                said = str(invalid.errors()[0]["msg"]).removeprefix("Value error, ")
                raise AppError(f"resource `{name}`{_at(where, name)}: {said}") from None
        if declared.type is person:
            key = ("person", canonical(str(declared.fields["principal"])))
        elif declared.type is group:
            key = ("group", str(declared.fields["name"]))
        else:
            continue
        if key in seen:
            raise AppError(
                f"resources `{seen[key]}` and `{name}`{_at(where, name)} both declare the "
                f"{key[0]} {key[1]}: keep one"
            )
        seen[key] = name
    people = people_of(found)
    for name, declared in sorted(found.items()):
        if declared.type is not group:
            continue
        for member in declared.fields.get("members") or []:
            problem = _member_problem(str(member), people)
            if problem is not None:
                raise AppError(
                    f"resource `{name}`{_at(where, name)}: the group `{declared.fields['name']}` "
                    f"lists `{member}`, {problem}, or keep this group in "
                    "policies/principals.toml instead"
                )


def _member_problem(member: str, people: DeclaredPeople) -> str | None:
    """What is wrong with a declared group's member, as the rest of a sentence; None when it
    is a declared person or group."""
    if member.startswith(_GROUP_PREFIX):
        other = member.removeprefix(_GROUP_PREFIX)
        if other in people.groups:
            return None
        return f'a group no data file declares: declare it (`group(name="{other}", ...)`)'
    try:
        who = Principal.parse(member).text
    except RemitError:
        return "which is no principal: list `user:<name>`, `agent:<name>` or `group:<name>`"
    if who in people.principals:
        return None
    return f'whom no data file declares: declare them (`person(principal="{who}")`)'


def _at(where: Mapping[str, str], name: str) -> str:
    return f" ({where[name]})" if where.get(name) else ""

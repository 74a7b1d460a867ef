"""The instance's wakeup, as its data files declare it: the switch that lets its worker stop.

A declaration whose type is a wakeup (`WakeupSpec`: remit's own `wakeup.instance`, or a type
of a host vendor with a clock of its own) says who starts this instance again at its next
deadline. Declaring one turns stopping when idle on for the worker of `remit serve --worker`,
and the worker registers each deadline through that type's `register` op before it stops. With
none declared, `--stop-when-idle` turns it on, and the worker registers through remit's own
wakeup service (`wakeup.instances.register`, at `REMIT_WAKEUP_URL`).

When the data files are read, a wakeup is checked: at most one is declared, its type says how
its health reads (`outputs`), the host types its `host` may reference are hosts, and its
`host` is a reference to the URL of a declared host. (That its `register` op takes `{at}` is
checked when its connector is made, `check_contract_ops`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remit.connectors.wakeup import register_wake
from remit.core.errors import AppError, RemitError
from remit.declare.resources import Declaration, ResourceType

# The op a stopping worker registers through when no wakeup is declared.
BUILT_IN_REGISTER = register_wake.id


@dataclass(frozen=True)
class DeclaredWakeup:
    """The instance's wakeup: its declaration's `name`, its `type`, the op `register` the
    worker calls before it stops, and the declared `host` it wakes."""

    name: str
    type: ResourceType
    register: str
    host: str


def check_wakeups(
    found: Mapping[str, Declaration], where: Mapping[str, str], types: Mapping[str, ResourceType]
) -> None:
    """Refuse the data files' wakeups unless there is at most one, and it is sound (see the
    module's docstring); `AppError` naming what to change."""
    wakeups = sorted(name for name, declared in found.items() if declared.type.wakeup is not None)
    if len(wakeups) > 1:
        listed = ", ".join(f"`{name}`{_at(where, name)}" for name in wakeups)
        raise AppError(
            f"resources {listed} are each a wakeup, and an instance has one: it is what the "
            "worker registers its next deadline with before it stops. Keep one and remove "
            "the others"
        )
    for name in wakeups:
        _check_wakeup(name, found, where, types)


def _check_wakeup(
    name: str,
    found: Mapping[str, Declaration],
    where: Mapping[str, str],
    types: Mapping[str, ResourceType],
) -> None:
    declared = found[name]
    rtype = declared.type
    spec = rtype.wakeup
    assert spec is not None
    pre = f"resource `{name}`{_at(where, name)} is a wakeup ({rtype.id})"
    if spec.outputs is None:
        raise AppError(
            f"{pre}, and its type's wakeup contract has no outputs: give {rtype.id}'s "
            "WakeupSpec `outputs=`, a function of its state saying whether it is healthy "
            "(DatabaseOutputs(healthy=..., why=...))"
        )
    allowed = rtype.references[spec.host].types
    not_hosts = [t for t in allowed if t not in types or types[t].host is None]
    if not_hosts:
        raise AppError(
            f"{pre}, and its type's `{spec.host}` may reference {', '.join(not_hosts)}, which "
            f"is no host type of the app: list only host types (types with host=HostSpec(...)) "
            f"in {rtype.id}'s references[{spec.host!r}]"
        )
    hosts = sorted(n for n, d in found.items() if d.type.host is not None)
    suggestion = (
        f" (declared hosts: {', '.join(hosts)})" if hosts else " (no data file declares a host)"
    )
    reference = declared.refs().get(spec.host)
    if reference is None:
        raise AppError(
            f"{pre}: its `{spec.host}` must reference the host it wakes, as "
            f'`{spec.host}=ref("<host>", "<its url field>")`{suggestion}'
        )
    other, other_field = reference
    target = found[other]
    if target.type.host is None:
        raise AppError(
            f"{pre}: its `{spec.host}` references `{other}`, a {target.type.id}, which is no "
            f"host: reference a declared host's URL instead{suggestion}"
        )
    if other_field != target.type.host.url:
        raise AppError(
            f"{pre}: its `{spec.host}` references `{other}.{other_field}`, and the wakeup "
            f'calls its host at the host\'s URL: reference `ref("{other}", '
            f'"{target.type.host.url}")`'
        )


def _at(where: Mapping[str, str], name: str) -> str:
    return f" ({where[name]})" if where.get(name) else ""


def declarations_of(app: Any) -> Mapping[str, Declaration]:
    """The declarations of `app` (an `App`) by name: none when it declares no resources."""
    resources = getattr(app, "resources", None)
    return {} if resources is None else resources.declared.by_name


def declared_wakeup(declarations: Mapping[str, Declaration]) -> DeclaredWakeup | None:
    """The wakeup among the data files' `declarations`, or None. Read after `check_wakeups`
    has passed them, so there is at most one and its host is a host."""
    for name, declaration in sorted(declarations.items()):
        spec = declaration.type.wakeup
        if spec is None:
            continue
        host, _ = declaration.refs()[spec.host]
        return DeclaredWakeup(name, declaration.type, spec.register, host)
    return None


def register_op(declarations: Mapping[str, Declaration]) -> str:
    """The op a stopping worker registers its next deadline through: the declared wakeup's
    type's `register`, else remit's own `wakeup.instances.register`."""
    wakeup = declared_wakeup(declarations)
    return BUILT_IN_REGISTER if wakeup is None else wakeup.register


def stops_when_idle(
    declarations: Mapping[str, Declaration], asked: bool | None, *, flag: str
) -> bool:
    """Whether the worker stops when idle: as `asked` (a command's `flag`, None when not
    given), else when the data files declare a wakeup. Asked not to while a wakeup is declared
    is a contradiction, refused naming both."""
    wakeup = declared_wakeup(declarations)
    if asked is False and wakeup is not None:
        raise RemitError(
            f"the data files declare a wakeup, `{wakeup.name}` ({wakeup.type.id}), which makes "
            f"the worker stop when idle, and {flag} says it must not: remove the declaration "
            "(then `remit apply`), or leave the flag out"
        )
    return wakeup is not None if asked is None else asked


def needs_wakeup_service(declarations: Mapping[str, Declaration]) -> bool:
    """Whether registering a wake goes to remit's own wakeup service (`REMIT_WAKEUP_URL`):
    yes, unless the declared wakeup's type registers through an op of its own vendor."""
    return register_op(declarations) == BUILT_IN_REGISTER

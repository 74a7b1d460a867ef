"""The checks of a declared wakeup, each refusal as a user reads it: at most one wakeup, its
type's contract with outputs, its host a reference to a declared host's URL, the host types
its type may reference all hosts, and its `register` op taking `{at}` and keeping it."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit import (
    CallContext,
    Connector,
    DatabaseOutputs,
    Reference,
    ResourceDriver,
    ResourceType,
    WakeupSpec,
    implements,
    op,
    ref,
    resource_type,
)
from remit.connectors.wakeup import instance
from remit.core.errors import AppError, RemitError
from remit.declare.ops import Op
from remit.declare.resources import Declaration
from remit.resources.files import Declared, types_of
from remit.resources.wakeups import (
    declared_wakeup,
    needs_wakeup_service,
    register_op,
    stops_when_idle,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps"))

from alarmed_app.clock import Wake, alarm, clockhost, site


def healthy(state: Any) -> DatabaseOutputs:
    return DatabaseOutputs(healthy=True)


class Named(BaseModel):
    name: str
    url: str | None = None


class Pointer(BaseModel):
    app: str
    id: str | None = None


class Unreached(ResourceDriver):
    """A driver these checks never call."""

    def read_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        raise AssertionError("not called")

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, dict[str, Any]]:
        raise AssertionError("not called")

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        raise AssertionError("not called")

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        raise AssertionError("not called")


def vendor(rtype: ResourceType, register: Op[Any, Any] | None = None) -> Connector:
    """A connector of `rtype` alone (and its `register` op), on a driver never called."""
    namespace: dict[str, Any] = {"resource_types": (rtype,)}
    if register is not None:
        namespace["register"] = implements(register)(lambda self, input, call: input)
    driver = type(f"{rtype.vendor}Driver", (Unreached,), namespace)
    ops = [] if register is None else [register]
    return Connector(rtype.vendor, ops=ops, driver=driver, resources=[rtype])


# A type that is no host, for a wakeup's host to point at wrongly.
page = resource_type("clocknotes.page", schema=Named, vendor_owned=("url",), stateless=True)
pages = vendor(page)


def declared(declarations: dict[str, Declaration], *connectors: Connector) -> Declared:
    from remit.connectors.wakeup import wakeup_connector

    types = types_of([clockhost, wakeup_connector, *connectors])
    return Declared.of(declarations, types)


def refusal(declarations: dict[str, Declaration], *connectors: Connector) -> str:
    with pytest.raises(AppError) as refused:
        declared(declarations, *connectors)
    return str(refused.value)


def test_a_sound_wakeup_is_found_with_its_register_op() -> None:
    found = declared({"web": site(name="desk"), "wake": alarm(app=ref("web", "url"))})
    wakeup = declared_wakeup(found.by_name)
    assert wakeup is not None
    assert (wakeup.name, wakeup.type.id, wakeup.register, wakeup.host) == (
        "wake",
        "clockhost.alarm",
        "clockhost.alarms.register",
        "web",
    )
    assert register_op(found.by_name) == "clockhost.alarms.register"
    assert not needs_wakeup_service(found.by_name)
    # None declared: remit's own service, and its register op.
    assert register_op({}) == "wakeup.instances.register"
    assert needs_wakeup_service({})
    built_in = declared({"web": site(name="desk"), "wake": instance(host=ref("web", "url"))})
    assert needs_wakeup_service(built_in.by_name)


def test_two_wakeups_are_refused() -> None:
    message = refusal(
        {
            "web": site(name="desk"),
            "wake": alarm(app=ref("web", "url")),
            "also": instance(host=ref("web", "url")),
        }
    )
    assert message == (
        "resources `also`, `wake` are each a wakeup, and an instance has one: it is what the "
        "worker registers its next deadline with before it stops. Keep one and remove the others"
    )


def test_a_wakeup_whose_contract_has_no_outputs_is_refused() -> None:
    bare = resource_type(
        "bare.alarm",
        schema=Pointer,
        vendor_owned=("id",),
        references={"app": Reference(fields=("url",))},
        wakeup=WakeupSpec(host="app", register="bare.alarms.register"),
    )
    register = op("bare.alarms.register", effect="write", input=Wake, output=Wake)
    connector = vendor(bare, register)
    message = refusal({"web": site(name="desk"), "wake": bare(app=ref("web", "url"))}, connector)
    assert message == (
        "resource `wake` is a wakeup (bare.alarm), and its type's wakeup contract has no "
        "outputs: give bare.alarm's WakeupSpec `outputs=`, a function of its state saying "
        "whether it is healthy (DatabaseOutputs(healthy=..., why=...))"
    )


def test_a_wakeup_type_that_may_reference_a_type_that_is_no_host_is_refused() -> None:
    loose = resource_type(
        "loose.alarm",
        schema=Pointer,
        vendor_owned=("id",),
        references={"app": Reference(types=("clockhost.app", "clocknotes.page"), fields="url")},
        wakeup=WakeupSpec(host="app", register="loose.alarms.register", outputs=healthy),
    )
    register = op("loose.alarms.register", effect="write", input=Wake, output=Wake)
    connector = vendor(loose, register)
    message = refusal(
        {"web": site(name="desk"), "wake": loose(app=ref("web", "url"))}, connector, pages
    )
    assert message == (
        "resource `wake` is a wakeup (loose.alarm), and its type's `app` may reference "
        "clocknotes.page, which is no host type of the app: list only host types (types with "
        "host=HostSpec(...)) in loose.alarm's references['app']"
    )


def test_a_wakeup_whose_host_is_not_a_reference_is_refused() -> None:
    message = refusal(
        {"web": site(name="desk"), "wake": instance(host="https://desk.clockhost.test")}
    )
    assert message == (
        "resource `wake` is a wakeup (wakeup.instance): its `host` must reference the host it "
        'wakes, as `host=ref("<host>", "<its url field>")` (declared hosts: web)'
    )


def test_a_wakeup_whose_host_references_no_host_is_refused() -> None:
    message = refusal({"page": page(name="a"), "wake": instance(host=ref("page", "url"))}, pages)
    assert message == (
        "resource `wake` is a wakeup (wakeup.instance): its `host` references `page`, a "
        "clocknotes.page, which is no host: reference a declared host's URL instead (no data "
        "file declares a host)"
    )


def test_a_wakeup_that_references_another_field_of_its_host_is_refused() -> None:
    loose = resource_type(
        "anyfield.alarm",
        schema=Pointer,
        vendor_owned=("id",),
        references={"app": Reference()},
        wakeup=WakeupSpec(host="app", register="anyfield.alarms.register", outputs=healthy),
    )
    register = op("anyfield.alarms.register", effect="write", input=Wake, output=Wake)
    connector = vendor(loose, register)
    message = refusal({"web": site(name="desk"), "wake": loose(app=ref("web", "name"))}, connector)
    assert message == (
        "resource `wake` is a wakeup (anyfield.alarm): its `app` references `web.name`, and "
        'the wakeup calls its host at the host\'s URL: reference `ref("web", "url")`'
    )


class NoAt(BaseModel):
    when: datetime


class DropsAt(BaseModel):
    when: datetime | None = None


@pytest.mark.parametrize("given", [NoAt, DropsAt], ids=["refuses at", "drops at"])
def test_a_register_op_that_does_not_keep_at_is_refused(given: type[BaseModel]) -> None:
    spec = WakeupSpec(host="app", register="shaky.alarms.register", outputs=healthy)
    shaky = resource_type(
        "shaky.alarm",
        schema=Pointer,
        vendor_owned=("id",),
        references={"app": Reference(fields="url")},
        wakeup=spec,
    )
    register = op("shaky.alarms.register", effect="write", input=given, output=Wake)
    with pytest.raises(AppError) as refused:
        vendor(shaky, register)
    assert str(refused.value) == (
        "resource type `shaky.alarm`: its wakeup's register, `shaky.alarms.register`, must "
        "take {at} and keep it (the worker calls it with the time to wake at, ISO 8601 with an "
        "offset): give its input model a field `at: datetime`"
    )


def test_the_flag_and_the_declaration_combine() -> None:
    found = declared({"web": site(name="desk"), "wake": alarm(app=ref("web", "url"))}).by_name
    assert stops_when_idle(found, None, flag="--no-stop-when-idle") is True
    assert stops_when_idle(found, True, flag="--no-stop-when-idle") is True
    assert stops_when_idle({}, None, flag="--no-stop-when-idle") is False
    assert stops_when_idle({}, True, flag="--no-stop-when-idle") is True
    assert stops_when_idle({}, False, flag="--no-stop-when-idle") is False
    with pytest.raises(RemitError, match=r"--no-stop-when-idle says it must not"):
        stops_when_idle(found, False, flag="--no-stop-when-idle")

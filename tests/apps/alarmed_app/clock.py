"""`clockhost`: a host vendor with a clock of its own, for the tests of a declared wakeup.

Its `clockhost.app` is a host, served at `https://<name>.clockhost.test`; its `clockhost.alarm`
is a wakeup for one, which calls the app's URL at the time `clockhost.alarms.register` was
given. The fake keeps every time it was given in `alarms`, so a test sees that a stopping
worker registered with this vendor's clock, not remit's own wakeup service.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from remit import (
    CallContext,
    Connector,
    DatabaseOutputs,
    DriverError,
    HostSpec,
    Reference,
    ResourceDriver,
    ResourceFake,
    ResourceType,
    WakeupSpec,
    implements,
    op,
    resource_type,
)


class Site(BaseModel):
    name: str
    url: str | None = None
    # Who answers for it: a declared person's principal, or a declared group's name.
    owner: str | None = None


class Alarm(BaseModel):
    app: str
    id: str | None = None


class Wake(BaseModel):
    at: datetime


def _ringing(state: Mapping[str, Any]) -> DatabaseOutputs:
    return DatabaseOutputs(healthy=isinstance(state.get("id"), str), why="it is not set")


site = resource_type(
    "clockhost.app",
    schema=Site,
    vendor_owned=("url",),
    references={
        "owner": Reference(types=("remit.person", "remit.group"), fields=("principal", "name"))
    },
    stateless=True,
    host=HostSpec(url="url"),
)
register_alarm = op(
    "clockhost.alarms.register",
    effect="write",
    idempotent=True,
    input=Wake,
    output=Wake,
    description="Ring the app's /wake at a time, replacing the time given before.",
)
alarm = resource_type(
    "clockhost.alarm",
    schema=Alarm,
    vendor_owned=("id",),
    references={"app": Reference(types=("clockhost.app",), fields=("url",))},
    wakeup=WakeupSpec(host="app", register=register_alarm.id, outputs=_ringing),
)


def _unreachable() -> DriverError:
    return DriverError("the live clockhost is not reachable from tests", retryable=False)


class ClockhostDriver(ResourceDriver):
    """Stands for the live vendor, never reached by these tests (they run on the fake)."""

    resource_types = (site, alarm)

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        raise _unreachable()

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        raise _unreachable()

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        raise _unreachable()

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        raise _unreachable()

    @implements(register_alarm)
    def register(self, input: Wake, call: CallContext) -> Wake:
        raise _unreachable()


class FakeClockhost(ResourceFake):
    """The vendor in memory: its apps and alarms, and every time an alarm was set to."""

    resource_types = (site, alarm)
    id_prefix = "ch"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alarms: list[datetime] = []

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        if rtype is site:
            return {"url": f"https://{desired['name']}.clockhost.test"}
        return {"id": id}

    @implements(register_alarm)
    def register(self, input: Wake, call: CallContext) -> Wake:
        self.alarms.append(input.at)
        return input


clockhost = Connector(
    "clockhost",
    ops=[register_alarm],
    driver=ClockhostDriver,
    fake=FakeClockhost,
    resources=[site, alarm],
)

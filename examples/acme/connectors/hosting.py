"""The hosting connector: containers at a container host, as the resource type
`hosting.container`.

The driver speaks the host's REST API at `HOSTING_API_URL` with `HOSTING_API_TOKEN` as a Bearer
token: `POST /containers` (with an `Idempotency-Key` header), `GET`, `PUT` and `DELETE
/containers/{id}`. The host serves each container at `https://<name>.hosting.test`.

`secret_env` is write-only: declared as `{"KEY": secret("NAME")}`, its values are taken from
remit's secrets just before a create or update and sent to the host, which never shows them
again; remit keeps only the names. A container holds what it was deployed with, so the type is
not stateless: apply asks before it replaces or deletes one.

The type is a host: `revision` is the commit of the operations repo it runs (declared as
`source("main")`, pinned by a change's deploy), and it is healthy while its `status` is
`running`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from remit import (
    AppliedEffect,
    CallContext,
    Connector,
    DatabaseOutputs,
    HostSpec,
    ResourceDriver,
    ResourceFake,
    ResourceType,
    resource_type,
)

from ._http import VendorApi


class Container(BaseModel):
    name: str
    image: str
    env: dict[str, str] = Field(default_factory=dict)
    secret_env: dict[str, str] = Field(default_factory=dict)
    revision: str | None = None
    url: str | None = None
    status: str | None = None


def _health(state: Mapping[str, Any]) -> DatabaseOutputs:
    """A container is healthy while it is running."""
    status = state.get("status")
    return DatabaseOutputs(healthy=status == "running", why=f"its status is {status!r}")


container = resource_type(
    "hosting.container",
    schema=Container,
    title="container",
    immutable=("name",),
    vendor_owned=("url", "status"),
    write_only=("secret_env",),
    stateless=False,
    host=HostSpec(url="url", revision="revision", outputs=_health),
)

# What a create or update sends: every declared field, the write-only ones in the clear.
_SENT = ("name", "image", "env", "secret_env", "revision")
# How the fake keeps a revision it was told is broken, in its journal.
_BROKEN = "hosting.broken_revision"


def _container_path(id: str) -> str:
    return f"/containers/{quote(id, safe='')}"


class HostingDriver(ResourceDriver):
    """The container host's API. Needs `HOSTING_API_URL` and `HOSTING_API_TOKEN`."""

    credentials = ("HOSTING_API_URL", "HOSTING_API_TOKEN")
    resource_types = (container,)

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.api = VendorApi(
            "hosting", url="HOSTING_API_URL", token="HOSTING_API_TOKEN", transport=transport
        )

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        return self.api.find(call, _container_path(id))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        body: dict[str, Any] = {key: desired[key] for key in _SENT if key in desired}
        made = self.api.send(call, "POST", "/containers", body)
        return str(made["id"]), made

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        # PUT replaces the container's settings: a field left out goes back to its default.
        body: dict[str, Any] = {key: desired[key] for key in _SENT if key in desired}
        return self.api.send(call, "PUT", _container_path(id), body)

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        self.api.forget(call, _container_path(id))


class FakeHosting(ResourceFake):
    """A container host in memory (or in its journal): containers by id, `ctr-…`, each
    running at its name's address, `crashing` instead when its revision was broken
    (`break_revision`). What was sent in `secret_env` is in `received` only."""

    resource_types = (container,)
    id_prefix = "ctr"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"url": f"https://{desired['name']}.hosting.test", "status": "running"}

    def break_revision(self, sha: str) -> None:
        """Make every container running the revision `sha` crash, now and once deployed:
        kept in the journal like any write, so every process sharing it sees it."""
        with self._vendor_lock():
            self._catch_up()
            self._record(
                AppliedEffect(
                    op=_BROKEN,
                    idempotency_key=f"break:{uuid.uuid4().hex}",
                    input={"revision": sha},
                    output={"revision": sha},
                )
            )

    def broken_revisions(self) -> set[str]:
        """The revisions the fake was told are broken."""
        self._catch_up()
        found = (effect.output.get("revision") for effect in self.effects if effect.op == _BROKEN)
        return {revision for revision in found if isinstance(revision, str)}

    def _started(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """`state` as a container (re)started on its revision: crashing on a broken one."""
        broken = state.get("revision") in self.broken_revisions()
        return {**state, "status": "crashing" if broken else "running"}

    def _running(self, state: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """`state` as read now: crashing once its revision was broken, else as it was."""
        if state is None or state.get("revision") not in self.broken_revisions():
            return None if state is None else dict(state)
        return {**state, "status": "crashing"}

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        return self._running(super().read_resource(rtype, id, call))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        made, state = super().create_resource(rtype, desired, call)
        return made, self._started(state)

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        return self._started(super().update_resource(rtype, id, desired, call))

    def records(self, rtype: ResourceType | str) -> dict[str, dict[str, Any]]:
        return {id: self._running(state) or {} for id, state in super().records(rtype).items()}

    def state(self) -> dict[str, Any]:
        held = super().state()
        for id, fields in held["resources"].get(container.id, {}).items():
            held["resources"][container.id][id] = self._running(fields)
        return held


connector = Connector(
    "hosting",
    ops=[],
    driver=HostingDriver,
    fake=FakeHosting,
    resources=[container],
    description="Containers at a container host.",
)

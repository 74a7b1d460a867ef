"""The hosting connector: containers at a container host, as the resource type
`hosting.container`.

The driver speaks the host's REST API at `HOSTING_API_URL` with `HOSTING_API_TOKEN` as a Bearer
token: `POST /containers` (with an `Idempotency-Key` header), `GET`, `PUT` and `DELETE
/containers/{id}`. The host serves each container at `https://<name>.hosting.test`.

`secret_env` is write-only: declared as `{"KEY": secret("NAME")}`, its values are taken from
remit's secrets just before a create or update and sent to the host, which never shows them
again; remit keeps only the names. A container holds what it was deployed with, so the type is
not stateless: apply asks before it replaces or deletes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, Field

from remit import (
    CallContext,
    Connector,
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
    url: str | None = None
    status: str | None = None


container = resource_type(
    "hosting.container",
    schema=Container,
    title="container",
    immutable=("name",),
    vendor_owned=("url", "status"),
    write_only=("secret_env",),
    stateless=False,
    host=HostSpec(url="url"),
)

# What a create or update sends: every declared field, the write-only ones in the clear.
_SENT = ("name", "image", "env", "secret_env")


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
    running at its name's address. What was sent in `secret_env` is in `received` only."""

    resource_types = (container,)
    id_prefix = "ctr"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"url": f"https://{desired['name']}.hosting.test", "status": "running"}


connector = Connector(
    "hosting",
    ops=[],
    driver=HostingDriver,
    fake=FakeHosting,
    resources=[container],
    description="Containers at a container host.",
)

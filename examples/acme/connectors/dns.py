"""The dns connector: records at a DNS provider, as the resource type `dns.record`.

The driver speaks the provider's REST API at `DNS_API_URL` with `DNS_API_TOKEN` as a Bearer
token: `POST /zones/{zone}/records` (with an `Idempotency-Key` header, so a repeated create
makes one record), `GET`, `PATCH` and `DELETE /records/{id}`. The fake keeps records in its
effects (`ResourceFake`).

A record holds nothing a delete would lose, so the type is stateless: apply replaces one whose
zone, name or type changed without asking. Its `content` may take another declaration's `url`
(`ref("web", "url")`), e.g. a CNAME to a container's address.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from remit import (
    CallContext,
    Connector,
    Reference,
    ResourceDriver,
    ResourceFake,
    ResourceType,
    resource_type,
)

from ._http import VendorApi


class Record(BaseModel):
    zone: str
    name: str
    type: str  # A, AAAA, CNAME, TXT, ...
    content: str
    ttl: int = 300
    id: str | None = None


record = resource_type(
    "dns.record",
    schema=Record,
    title="DNS record",
    immutable=("zone", "name", "type"),
    vendor_owned=("id",),
    references={"content": Reference(fields=("url",))},
    stateless=True,
)


def _record_path(id: str) -> str:
    return f"/records/{quote(id, safe='')}"


class DnsDriver(ResourceDriver):
    """The DNS provider's API. Needs `DNS_API_URL` and `DNS_API_TOKEN`."""

    credentials = ("DNS_API_URL", "DNS_API_TOKEN")
    resource_types = (record,)

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.api = VendorApi("DNS", url="DNS_API_URL", token="DNS_API_TOKEN", transport=transport)

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        return self.api.find(call, _record_path(id))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        path = f"/zones/{quote(str(desired['zone']), safe='')}/records"
        body: dict[str, Any] = {
            key: desired[key] for key in ("name", "type", "content", "ttl") if key in desired
        }
        made = self.api.send(call, "POST", path, body)
        return str(made["id"]), made

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        body: dict[str, Any] = {key: desired[key] for key in ("content", "ttl") if key in desired}
        return self.api.send(call, "PATCH", _record_path(id), body)

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        self.api.forget(call, _record_path(id))


class FakeDns(ResourceFake):
    """A DNS provider in memory (or in its journal): records by id, `rec-…`."""

    resource_types = (record,)
    id_prefix = "rec"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"id": id, "ttl": desired.get("ttl", 300)}


connector = Connector(
    "dns",
    ops=[],
    driver=DnsDriver,
    fake=FakeDns,
    resources=[record],
    description="DNS records at a DNS provider.",
)

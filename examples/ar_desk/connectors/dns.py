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
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel

from remit import (
    CallContext,
    Connector,
    DriverError,
    Reference,
    ResourceDriver,
    ResourceFake,
    ResourceType,
    resource_type,
)


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


class VendorApi:
    """A vendor's JSON API as a driver calls it, for one call at a time: the base URL and the
    Bearer token come from the call's credentials, every POST carries the call's idempotency
    key, and redirects are not followed, since they would carry the token elsewhere.

    The example vendors' drivers share it (`hosting`, `pgcloud`)."""

    def __init__(
        self,
        vendor: str,
        *,
        url: str,
        token: str,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.vendor = vendor
        self.url_credential = url
        self.token_credential = token
        self.transport = transport

    def find(self, call: CallContext, path: str) -> dict[str, Any] | None:
        """`GET path`, or None when the vendor has no such thing (404)."""
        return self._request(call, "GET", path, None, missing_ok=True)

    def send(
        self, call: CallContext, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """`method path` with a JSON body: the vendor's answer (a 404 is a refusal)."""
        answer = self._request(call, method, path, body, missing_ok=False)
        assert answer is not None
        return answer

    def forget(self, call: CallContext, path: str) -> None:
        """`DELETE path`; one already gone (404) is done."""
        self._request(call, "DELETE", path, None, missing_ok=True)

    def _request(
        self,
        call: CallContext,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        missing_ok: bool,
    ) -> dict[str, Any] | None:
        vendor, url_credential = self.vendor, self.url_credential
        base = call.credential(url_credential).rstrip("/")
        if urlsplit(base).scheme not in ("http", "https"):
            raise DriverError(
                f"{url_credential} is {base!r}, which is not an http(s) address: set it to "
                f"the {vendor} API's base URL",
                retryable=False,
                maybe_applied=False,
            )
        headers = {
            "Authorization": f"Bearer {call.credential(self.token_credential)}",
            "Accept": "application/json",
        }
        if method == "POST":
            headers["Idempotency-Key"] = call.idempotency_key
        try:
            with httpx.Client(
                transport=self.transport, timeout=call.timeout, follow_redirects=False
            ) as client:
                response = client.request(method, base + path, json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            # No connection, so the vendor saw nothing: safe to try again.
            raise DriverError(
                f"the {vendor} API at {base} is unreachable ({error}): is it up, and is "
                f"{url_credential} right?",
                retryable=True,
                maybe_applied=False,
            ) from error
        except httpx.HTTPError as error:
            raise DriverError(
                f"the {vendor} API at {base} failed {method} {path}: "
                f"{type(error).__name__}: {error}",
                retryable=True,
            ) from error
        status = response.status_code
        if status == 404 and missing_ok:
            return None
        if 300 <= status < 400:
            raise DriverError(
                f"the {vendor} API at {base} answered {method} {path} with a redirect "
                f"({status}), which is not followed: set {url_credential} to the API's own "
                "address",
                retryable=False,
                status=status,
                maybe_applied=False,
            )
        try:
            answer = response.json() if response.content else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise DriverError(
                f"the {vendor} API at {base} answered {method} {path} with {status} and a "
                f"body that is not a JSON object: is {url_credential} right?",
                retryable=status == 429 or status >= 500,
                status=status,
            )
        if status >= 400:
            said = answer.get("error") or response.reason_phrase
            hint = f"; check {self.token_credential}" if status in (401, 403) else ""
            code = answer.get("code")
            raise DriverError(
                f"the {vendor} API refused {method} {path} ({status}): {said}{hint}",
                retryable=status == 429 or status >= 500,
                status=status,
                vendor_code=code if isinstance(code, str) else None,
            )
        return answer


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

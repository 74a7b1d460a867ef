"""The pgcloud connector: managed Postgres projects, as the resource type `pgcloud.project`,
which is a database (`DatabaseSpec`), so an app may choose it as its store.

The driver speaks the vendor's REST API at `PGCLOUD_API_URL` with `PGCLOUD_API_TOKEN` as a
Bearer token: `POST /projects` (with an `Idempotency-Key` header), `GET`, `PATCH` and `DELETE
/projects/{id}`, and `GET /projects/{id}/connection_uri` for a project's URL.

Once apply makes a project it calls `pgcloud.project_urls.store` (the type's `after_create`),
which stores the project's URL as the secret `REMIT_DATABASE_URL_<EXPORT>` and answers only the
secret's name: the URL, which holds the password, never reaches a step's output or the ledger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from remit import (
    AfterCreate,
    CallContext,
    Connector,
    DatabaseCapabilities,
    DatabaseInputs,
    DatabaseOutputs,
    DatabaseSpec,
    DriverError,
    ResourceDriver,
    ResourceFake,
    ResourceType,
    database_url_secret,
    implements,
    op,
    resource_type,
)

from ._http import VendorApi

REGIONS = ("eu-west-1", "us-east-1")


class Project(BaseModel):
    name: str
    region: Literal["eu-west-1", "us-east-1"]
    size: str = "small"
    host: str | None = None
    id: str | None = None


class StoreUrl(BaseModel):
    """Which project's URL to store, and the declaration it is stored for."""

    id: str
    export: str


class Stored(BaseModel):
    """The secret the URL is stored in; never the URL."""

    secret: str


def _outputs(state: Mapping[str, Any]) -> DatabaseOutputs:
    return DatabaseOutputs(healthy=bool(state.get("host")))


project = resource_type(
    "pgcloud.project",
    schema=Project,
    title="Postgres project",
    immutable=("name", "region"),
    vendor_owned=("host", "id"),
    stateless=False,
    after_create=[AfterCreate("pgcloud.project_urls.store")],
    database=DatabaseSpec(
        capabilities=DatabaseCapabilities(pauses=True, branch=True),
        inputs=DatabaseInputs(region="region", size="size"),
        store_url="pgcloud.project_urls.store",
        regions=REGIONS,
        outputs=_outputs,
    ),
)

store_url = op(
    "pgcloud.project_urls.store",
    effect="write",
    idempotent=True,
    input=StoreUrl,
    output=Stored,
    description="Store a project's connection URL among remit's secrets, for a declaration.",
)


def keep_url(call: CallContext, project_id: str, export: str, url: str) -> Stored:
    """Store `url` as the secret for `export` unless one is stored; refuse as `stale` when the
    secret holds another URL (another project's, or this one's before a reset)."""
    name = database_url_secret(export)
    if call.ensure_secret(name, url) != url:
        raise DriverError(
            f"the secret {name} holds another database's URL than project {project_id}'s: "
            f"delete it (`remit secrets delete {name}`) to store this one",
            retryable=False,
            vendor_code="stale",
        )
    return Stored(secret=name)


def _project_path(id: str) -> str:
    return f"/projects/{quote(id, safe='')}"


class PgcloudDriver(ResourceDriver):
    """The pgcloud API. Needs `PGCLOUD_API_URL` and `PGCLOUD_API_TOKEN`."""

    credentials = ("PGCLOUD_API_URL", "PGCLOUD_API_TOKEN")
    resource_types = (project,)

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self.api = VendorApi(
            "pgcloud", url="PGCLOUD_API_URL", token="PGCLOUD_API_TOKEN", transport=transport
        )

    def read_resource(
        self, rtype: ResourceType, id: str, call: CallContext
    ) -> Mapping[str, Any] | None:
        return self.api.find(call, _project_path(id))

    def create_resource(
        self, rtype: ResourceType, desired: dict[str, Any], call: CallContext
    ) -> tuple[str, Mapping[str, Any]]:
        body: dict[str, Any] = {
            key: desired[key] for key in ("name", "region", "size") if key in desired
        }
        made = self.api.send(call, "POST", "/projects", body)
        return str(made["id"]), made

    def update_resource(
        self, rtype: ResourceType, id: str, desired: dict[str, Any], call: CallContext
    ) -> Mapping[str, Any]:
        body: dict[str, Any] = {key: desired[key] for key in ("size",) if key in desired}
        return self.api.send(call, "PATCH", _project_path(id), body)

    def delete_resource(self, rtype: ResourceType, id: str, call: CallContext) -> None:
        self.api.forget(call, _project_path(id))

    @implements(store_url)
    def store(self, input: StoreUrl, call: CallContext) -> Stored:
        answer = self.api.send(call, "GET", _project_path(input.id) + "/connection_uri")
        uri = answer.get("uri")
        if not isinstance(uri, str) or not uri.startswith(("postgres://", "postgresql://")):
            raise DriverError(
                f"the pgcloud API gave project {input.id} no connection URI: is "
                "PGCLOUD_API_URL the pgcloud API's address?",
                retryable=False,
            )
        return keep_url(call, input.id, input.export, uri)


class FakePgcloud(ResourceFake):
    """Postgres projects in memory (or in its journal), by id, `prj-…`, each at its own host.
    A project's password is derived from its id, so every process sharing the journal gives
    the same URL."""

    resource_types = (project,)
    id_prefix = "prj"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        host = f"{id}.{desired['region']}.pgcloud.test"
        return {"id": id, "host": host, "size": desired.get("size", "small")}

    def refuse(self, rtype: ResourceType, desired: Mapping[str, Any]) -> None:
        region = desired.get("region")
        if region is not None and region not in REGIONS:
            raise DriverError(
                f"pgcloud has no region {region!r}: use one of {', '.join(REGIONS)}",
                retryable=False,
                status=422,
                vendor_code="invalid_region",
            )

    @implements(store_url)
    def store(self, input: StoreUrl, call: CallContext) -> Stored:
        state = self.read_resource(project, input.id, call)
        if state is None:
            raise DriverError(
                f"pgcloud has no project {input.id}: check the id",
                retryable=False,
                status=404,
                vendor_code="not_found",
            )
        password = hashlib.sha256(f"password:{input.id}".encode()).hexdigest()[:20]
        url = f"postgresql://app:{password}@{state['host']}/{state['name']}"
        return keep_url(call, input.id, input.export, url)


connector = Connector(
    "pgcloud",
    ops=[store_url],
    driver=PgcloudDriver,
    fake=FakePgcloud,
    resources=[project],
    description="Managed Postgres projects.",
)

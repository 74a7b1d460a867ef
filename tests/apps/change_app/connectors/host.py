"""The shop's app host: apps running a revision of the repo, `host.app`.

When `$REMIT_FAKES_DIR/healthy-revisions` exists, the fake's apps crash on every revision it
does not list (one a line): a test makes a deploy unhealthy so."""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from remit import Connector, HostSpec, ResourceFake, ResourceType, resource_type
from remit.declare.resources import DatabaseOutputs


class AppHost(BaseModel):
    name: str
    revision: str | None = None
    url: str | None = None
    status: str | None = None


def _outputs(state: Mapping[str, Any]) -> DatabaseOutputs:
    status = state.get("status")
    return DatabaseOutputs(healthy=status == "running", why=f"status is {status!r}")


app_host = resource_type(
    "host.app",
    schema=AppHost,
    immutable=("name",),
    vendor_owned=("url", "status"),
    stateless=True,
    host=HostSpec(url="url", revision="revision", outputs=_outputs),
)


def _healthy() -> set[str] | None:
    folder = os.environ.get("REMIT_FAKES_DIR")
    if not folder or not (Path(folder) / "healthy-revisions").exists():
        return None
    return set((Path(folder) / "healthy-revisions").read_text().split())


class FakeHost(ResourceFake):
    resource_types = (app_host,)
    id_prefix = "app"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"url": f"https://{desired['name']}.host.test", "status": "running"}

    def read_resource(self, rtype: ResourceType, id: str, call: Any) -> Mapping[str, Any] | None:
        state = super().read_resource(rtype, id, call)
        healthy = _healthy()
        if state is not None and healthy is not None and state.get("revision") not in healthy:
            return {**state, "status": "crashing"}
        return state


connector = Connector("host", ops=[], driver=FakeHost, fake=FakeHost, resources=[app_host])

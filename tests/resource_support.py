"""A small vendor of two resource types for the tests of plan, apply and drift.

`store.box` holds data (stateful): a name that cannot change, a size that can, a write-only
password, a vendor-owned URL. `store.alias` is stateless: a name that cannot change, pointing
at a box's URL by reference. `store.shelf` is the vendor's own (read-only to apply): imported
and watched, never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from remit import App, Connector, Reference, ResourceFake, ResourceType, resource_type
from remit.declare.resources import Declaration


class Box(BaseModel):
    name: str
    size: int = 1
    password: str | None = None
    url: str | None = None


class Alias(BaseModel):
    name: str
    target: str


box = resource_type(
    "store.box",
    schema=Box,
    title="Box",
    immutable=["name"],
    vendor_owned=["url"],
    write_only=["password"],
)
alias = resource_type(
    "store.alias",
    schema=Alias,
    title="Alias",
    immutable=["name"],
    references={"target": Reference(types=("store.box",), fields=("url",))},
    stateless=True,
)


class Shelf(BaseModel):
    label: str


shelf = resource_type("store.shelf", schema=Shelf, title="Shelf", writable=False)


class FakeStore(ResourceFake):
    resource_types = (box, alias, shelf)
    id_prefix = "st"

    def vendor_fields(
        self, rtype: ResourceType, id: str, desired: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {"url": f"https://{desired['name']}.store.test"} if rtype is box else {}


store = Connector("store", ops=[], driver=FakeStore, fake=FakeStore, resources=[box, alias, shelf])


def resource_app(
    declarations: Mapping[str, Declaration], lockfile: Path, *, name: str = "stock"
) -> App:
    app = App(name=name, workflows=[], connectors=[store])
    app.use_resources(declarations=declarations, lockfile=lockfile)
    return app

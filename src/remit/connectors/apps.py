"""remit's own vendor, `remit`: `remit.apps.list`, and the ops on the operations repo.

Every app has this connector (`App` adds it), so `remit apps`, the HTTP API and a web page
list a repo's apps through the same call, under the same policies
(`Action::"call"` on `Op::"remit.apps.list"`). The repo's ops (`remit.change.*`,
`remit.source.resolve`) go through the app's forge (`changes/ops.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from remit.connectors.base import CallContext, Connector, Implementation, implements
from remit.declare.ops import Op, op

VENDOR = "remit"


class Nothing(BaseModel):
    """The op takes no input."""


class AppEntry(BaseModel):
    """One app of the repo (`apps/<name>/`): its workflows, collections and queues, by their
    full names (`<name>.<workflow>`)."""

    name: str
    workflows: list[str]
    collections: list[str] = []
    queues: list[str] = []


class AppList(BaseModel):
    """The repo (`repo`, its `App`'s name), the workflows at its root, and each app in it."""

    repo: str
    workflows: list[str]
    apps: list[AppEntry]


list_apps = op(
    "remit.apps.list",
    effect="read",
    input=Nothing,
    output=AppList,
    description="The repo's apps, each with its workflows, collections and queues.",
)


class _Listing(Implementation):
    """Answers `remit.apps.list` from the app itself, on drivers and fakes alike, and the
    repo's ops through the forge's driver or fake (`changes/ops.py`)."""

    def __init__(self, listing: Callable[[], AppList], repo: Implementation | None) -> None:
        self.listing = listing
        self.repo = repo

    @implements(list_apps)
    def list(self, input: Nothing, call: CallContext) -> AppList:
        return self.listing()

    def needs(self, op_id: str) -> tuple[str, ...]:
        return () if op_id == list_apps.id or self.repo is None else self.repo.needs(op_id)

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        if op.id == list_apps.id or self.repo is None:
            return super().invoke(op, input, call)
        return self.repo.invoke(op, input, call)


def is_apps_connector(connector: Connector) -> bool:
    """Whether `connector` is one `apps_connector` made (another app's, listed again)."""
    return connector.vendor == VENDOR and connector.ops[:1] == (list_apps,)


def apps_connector(
    listing: Callable[[], AppList],
    ops: Iterable[Op[Any, Any]] = (),
    repo: Callable[[bool], Implementation] | None = None,
) -> Connector:
    """remit's own connector: `remit.apps.list` answering with `listing()`, and the repo's
    `ops`, answered by `repo(fakes)` (the forge's driver, or its fake)."""

    def made(fakes: bool) -> Implementation:
        return _Listing(listing, None if repo is None else repo(fakes))

    return Connector(
        VENDOR,
        ops=[list_apps, *ops],
        driver=lambda: made(False),
        fake=lambda: made(True),
        description="remit's own: the apps of the repo, and its changes at the forge",
    )

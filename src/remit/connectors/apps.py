"""`remit.apps.list`: the apps of a repo and their workflows, as an op anyone may be let call.

Every app has this connector (`App` adds it), so `remit apps`, the HTTP API and a web page
list a repo's apps through the same call, under the same policies
(`Action::"call"` on `Op::"remit.apps.list"`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel

from remit.connectors.base import CallContext, Connector, Implementation, implements
from remit.declare.ops import op

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
    """Answers from the app itself, on drivers and fakes alike."""

    inline: ClassVar[bool] = True

    def __init__(self, listing: Callable[[], AppList]) -> None:
        self.listing = listing

    @implements(list_apps)
    def list(self, input: Nothing, call: CallContext) -> AppList:
        return self.listing()


def is_apps_connector(connector: Connector) -> bool:
    """Whether `connector` is one `apps_connector` made (another app's, listed again)."""
    return connector.vendor == VENDOR and connector.ops == (list_apps,)


def apps_connector(listing: Callable[[], AppList]) -> Connector:
    """The connector of `remit.apps.list`, answering with `listing()`."""
    return Connector(
        VENDOR,
        ops=[list_apps],
        driver=lambda: _Listing(listing),
        fake=lambda: _Listing(listing),
        description="remit's own: the apps of the repo",
    )

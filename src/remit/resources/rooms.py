"""`client.resources`: what the app's declared resources are bound to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from remit.core.acting import Acting

if TYPE_CHECKING:
    from remit.resources.lockfile import Binding
    from remit.resources.workflows import Resources


class DeclaringApp(Protocol):
    """What this room reads of the app (`app.App`): its declared resources."""

    @property
    def resources(self) -> Resources | None: ...


class ResourcesClient(Acting, Protocol):
    """The client as this room sees it."""

    @property
    def app(self) -> DeclaringApp: ...


class ResourcesRoom:
    """`client.resources`: the bindings the database holds."""

    def __init__(self, client: ResourcesClient) -> None:
        self._client = client

    def bindings(self) -> dict[str, Binding]:
        """The vendor ids the app's declared resources are bound to, by name, as the database
        holds them (none when the app declares no resources)."""
        if self._client.app.resources is None:
            return {}
        return self._client.app.resources.store(self._client.db).read()

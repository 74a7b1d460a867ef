"""`client.secrets`: the app's stored credentials. Values go in and are never shown again."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from remit.core.acting import Acting

if TYPE_CHECKING:
    from remit.connectors.credentials import SecretInfo, Secrets


class SecretChecks(Protocol):
    """The policies' check, for the acts this room takes (`policy.guard.Guard`)."""

    def require(
        self,
        principal: str,
        action: Literal["set_secret", "delete_secret"],
        resource: str,
        context: Mapping[str, Any],
    ) -> object: ...


class SecretServices(Protocol):
    """The client's services this room uses."""

    @property
    def guard(self) -> SecretChecks: ...
    @property
    def secrets(self) -> Secrets: ...


class SecretsClient(Acting, Protocol):
    """The client as this room sees it."""

    @property
    def services(self) -> SecretServices: ...


class SecretsRoom:
    """`client.secrets`: list, set and delete the app's credentials, as the policies allow."""

    def __init__(self, client: SecretsClient) -> None:
        self._client = client

    def list(self) -> builtins.list[SecretInfo]:
        """The stored credentials' names, when and by whom each was set; never values."""
        return self._client.services.secrets.list()

    def set(self, name: str, value: str, *, by: str | None = None) -> SecretInfo:
        """Store secret `name` (replacing its value), as the policies allow."""
        who = self._client.person(by)
        self._client.services.guard.require(who, "set_secret", name, {})
        return self._client.services.secrets.set(name, value, by=who)

    def delete(self, name: str, *, by: str | None = None) -> bool:
        """Delete secret `name`, as the policies allow; False if there was none."""
        who = self._client.person(by)
        self._client.services.guard.require(who, "delete_secret", name, {})
        return self._client.services.secrets.delete(name, by=who)

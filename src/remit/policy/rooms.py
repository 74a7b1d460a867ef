"""The client's rooms for access: `client.tokens` (API tokens) and `client.sessions` (the web
console's sign-in links, passwords and sessions).

Making a token, a link or a password lets someone act as its principal: the policies check
each as `manage_tokens`, with the verb (`create`, `list`, `revoke`, `login_link`, `password`)
and the principal it is for.
"""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from remit.core.acting import Acting, no_nul

if TYPE_CHECKING:
    from remit.policy.guard import Guard
    from remit.policy.signin import LinkInfo, SignIns
    from remit.policy.tokens import TokenInfo, Tokens


class AccessServices(Protocol):
    """The client's services these rooms use."""

    @property
    def guard(self) -> Guard: ...
    @property
    def tokens(self) -> Tokens: ...
    @property
    def signins(self) -> SignIns: ...


class AccessClient(Acting, Protocol):
    """The client as these rooms see it."""

    @property
    def services(self) -> AccessServices: ...


class TokensRoom:
    """`client.tokens`: the app's API tokens (see `policy/tokens.py`)."""

    def __init__(self, client: AccessClient) -> None:
        self._client = client

    def create(
        self,
        principal: str,
        *,
        name: str = "",
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> tuple[TokenInfo, str]:
        """Make an API token that acts as `principal`, as the policies allow (`manage_tokens`
        with verb `create`). Returns it with the token itself, shown this once."""
        who = self._client.person(by)
        no_nul("tokens.create", name=name)
        context = {"verb": "create", "subject": principal}
        self._client.services.guard.require(who, "manage_tokens", self._client.app_name, context)
        return self._client.services.tokens.create(
            principal, by=who, name=name, expires_in=expires_in
        )

    def list(self, *, by: str | None = None) -> builtins.list[TokenInfo]:
        """The app's API tokens (never their secrets), as the policies allow."""
        who = self._client.person(by)
        self._client.services.guard.require(
            who, "manage_tokens", self._client.app_name, {"verb": "list", "subject": ""}
        )
        return self._client.services.tokens.list()

    def revoke(self, token_id: str, *, by: str | None = None) -> TokenInfo:
        """Revoke an API token, as the policies allow (`manage_tokens` with verb `revoke`)."""
        who = self._client.person(by)
        token = self._client.services.tokens.get(token_id)
        context = {"verb": "revoke", "subject": token.principal}
        self._client.services.guard.require(who, "manage_tokens", self._client.app_name, context)
        return self._client.services.tokens.revoke(token_id, by=who)

    def authenticate(self, token: str) -> str:
        """The principal an API token acts as; `Unauthenticated` saying why it does not."""
        return self._client.services.tokens.authenticate(token)


class SessionsRoom:
    """`client.sessions`: signing in to the web console (see `policy/signin.py`)."""

    def __init__(self, client: AccessClient) -> None:
        self._client = client

    def link(
        self, principal: str, *, expires_in: timedelta | None = None, by: str | None = None
    ) -> tuple[LinkInfo, str]:
        """A one-time sign-in link's code for `principal`, as the policies allow
        (`manage_tokens` with verb `login_link`)."""
        who = self._client.person(by)
        context = {"verb": "login_link", "subject": principal}
        self._client.services.guard.require(who, "manage_tokens", self._client.app_name, context)
        if expires_in is None:
            return self._client.services.signins.link(principal, by=who)
        return self._client.services.signins.link(principal, by=who, expires_in=expires_in)

    def set_password(self, principal: str, password: str, *, by: str | None = None) -> None:
        """Set `principal`'s console password, as the policies allow (`manage_tokens` with
        verb `password`)."""
        who = self._client.person(by)
        context = {"verb": "password", "subject": principal}
        self._client.services.guard.require(who, "manage_tokens", self._client.app_name, context)
        self._client.services.signins.set_password(principal, password, by=who)

    def sign_in_with_link(self, code: str) -> tuple[str, str]:
        """(principal, session token) of a sign-in by the link's `code`, which it uses up."""
        principal = self._client.services.signins.redeem(code)
        return principal, self._client.services.signins.open_session(principal, via="link")[1]

    def sign_in_with_password(
        self, principal: str, password: str, *, address: str = ""
    ) -> tuple[str, str]:
        """(principal, session token) of a sign-in by password from `address` (the client's,
        by which wrong passwords are counted); `Unauthenticated` if wrong, or if that address
        is locked after too many."""
        from remit.core.errors import Unauthenticated

        if not self._client.services.signins.check_password(principal, password, address=address):
            raise Unauthenticated(
                "that principal and password do not match: check both, or ask for a sign-in "
                "link (`remit login-link --for user:<you>`)"
            )
        return principal, self._client.services.signins.open_session(principal, via="password")[1]

    def principal(self, token: str) -> str:
        """The principal of a console session; `Unauthenticated` if it has ended."""
        return self._client.services.signins.session(token)

    def sign_out(self, token: str) -> None:
        """End a console session."""
        self._client.services.signins.end_session(token)

"""The routes that let the command line through the API sign people in to the web console:
`POST /login-links` makes a one-time link's code, `PUT /passwords/{principal}` sets a console
password. Both are the policy action `manage_tokens`, as the request's token's principal."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, ClassVar

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from remit.client import Client
from remit.policy.signin import LONGEST_PASSWORD, SHORTEST_PASSWORD
from remit.policy.tokens import parse_duration
from remit.serve.errors import ErrorReason, Problem, error_responses
from remit.serve.models import RequestBody
from remit.serve.params import NUL_FREE, PRINCIPAL_FORM
from remit.serve.requests import Who

# How long a sign-in link may last, as the spec states it: a whole number of minutes, hours,
# days or weeks, up to 7 days (10080m, 168h, 7d, 1w), which the store allows at most.
LINK_DURATION_FORM = re.compile(
    r"^([1-9][0-9]{0,3}m|100[0-7][0-9]m|10080m|[1-9][0-9]?h|1[0-5][0-9]h|16[0-8]h|[1-7]d|1w)$"
)


class LoginLinkRequest(RequestBody):
    """A sign-in link to make."""

    noun: ClassVar[str] = "a sign-in link"
    made: ClassVar[str] = "the link is made"

    for_: str = Field(
        alias="for",
        max_length=200,
        json_schema_extra={"pattern": PRINCIPAL_FORM.pattern},
        description="Who the link signs in: user:<name> or agent:<name>.",
    )
    expires: str | None = Field(
        default=None,
        max_length=20,
        json_schema_extra={"pattern": LINK_DURATION_FORM.pattern},
        description="How long it works, at most 7d (10080m, 168h, 1w): 15m (the default), 1h, 2d.",
    )


class LoginLinkMade(BaseModel):
    """A sign-in link's code: it is in this answer only, and works once."""

    code: str = Field(description="Open /console/sign-in?code=<code> on this server.")
    id: str = Field(description="The link's id, lnk_…, as the audit rows name it.")
    principal: str
    created_at: datetime
    created_by: str
    expires_at: datetime


class PasswordRequest(RequestBody):
    """A console password to set."""

    noun: ClassVar[str] = "a password"
    made: ClassVar[str] = "the password is set"

    password: str = Field(
        min_length=SHORTEST_PASSWORD,
        max_length=LONGEST_PASSWORD,
        json_schema_extra=NUL_FREE,
        description=f"{SHORTEST_PASSWORD} to {LONGEST_PASSWORD} characters; kept only as its "
        "argon2id hash.",
    )


class PasswordSet(BaseModel):
    principal: str


def signin_routes(routes: APIRouter, client: Client) -> None:
    """`POST /login-links` and `PUT /passwords/{principal}`."""

    @routes.post(
        "/login-links", status_code=201, responses=error_responses(400, 401, 403, 413, 422, 503)
    )
    def make_login_link(body: LoginLinkRequest, who: Who) -> LoginLinkMade:
        """Make a one-time link that signs `for` in to the web console, as the policies allow
        (`manage_tokens`). The code is in this answer only."""
        expires_in = None if body.expires is None else _link_life(body.expires)
        info, code = client.sessions.link(body.for_, expires_in=expires_in, by=who)
        return LoginLinkMade(code=code, **info.__dict__)

    @routes.put("/passwords/{principal}", responses=error_responses(400, 401, 403, 413, 422, 503))
    def set_password(
        principal: Annotated[
            str,
            Path(
                max_length=200,
                json_schema_extra={**NUL_FREE, "pattern": PRINCIPAL_FORM.pattern},
                description="Whose password: user:<name> or agent:<name>.",
            ),
        ],
        body: PasswordRequest,
        who: Who,
    ) -> PasswordSet:
        """Set a console password, as the policies allow (`manage_tokens`)."""
        client.sessions.set_password(principal, body.password, by=who)
        return PasswordSet(principal=principal)


def _link_life(text: str) -> timedelta:
    """A link's `expires` as a duration; 422 naming the form otherwise."""
    if not LINK_DURATION_FORM.fullmatch(text):
        message = (
            f"`expires` {text!r} is not how long a sign-in link may last: give a whole number "
            "and a unit, m, h, d or w, of at most 7 days (e.g. 15m, 1h, 2d)"
        )
        raise Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
    return parse_duration(text)

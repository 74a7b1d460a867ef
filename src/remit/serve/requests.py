"""Who a request of the HTTP API acts as (`Who`: the principal of its API token, or 401), and
the checks every request passes before its route runs (`plain_query`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from remit.client import Client
from remit.core.errors import Unauthenticated
from remit.serve.errors import ErrorReason, Problem

_BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="rmt_...",
    description="An API token of this app (`remit tokens create --for user:<name>`, or "
    "POST /tokens): the request acts as its principal.",
)


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
) -> str:
    """The principal the request's API token acts as; 401 without a working one."""
    if credentials is None or not credentials.credentials.strip():
        raise Unauthenticated(
            "send an API token as `Authorization: Bearer rmt_...` (make one with `remit tokens "
            "create --for user:<name>`)"
        )
    client: Client = request.app.state.remit
    return client.tokens.authenticate(credentials.credentials.strip())


# Who acts in a route: the principal of the request's API token.
Who = Annotated[str, Depends(principal)]


def plain_query(request: Request) -> None:
    """Refuse a query parameter the route does not take, or one given more than once, rather
    than answer as if it had not been sent; a body sent to a route that takes none; and a NUL
    character in the path or the query, which no text the database keeps may hold (422)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    takes = [param.alias for param in route.dependant.query_params]
    problems = [
        f"{where} `{name}` holds a NUL character (%00): remove it"
        for where, given in (
            ("path", request.path_params),
            ("query parameter", request.query_params),
        )
        for name, value in given.items()
        if "\x00" in name or "\x00" in str(value)
    ]
    if not route.dependant.body_params and has_body(request):
        problems.append(f"{request.method} {route.path} takes no body: send none")
    for name in dict.fromkeys(request.query_params.keys()):
        given = len(request.query_params.getlist(name))
        if name not in takes:
            problems.append(
                f"query parameter `{name}` is not one {request.method} {route.path} takes: "
                + (f"send only {', '.join(takes)}" if takes else "send none")
            )
        elif given > 1:
            problems.append(f"query parameter `{name}` is given {given} times: give it once")
    if problems:
        raise Problem(
            422,
            f"the request does not parse: {'; '.join(problems)}",
            [ErrorReason(approval_id=None, reason=problem) for problem in problems],
        )


def has_body(request: Request) -> bool:
    """Whether the request declares a body: a length over 0, or one sent in chunks."""
    length = request.headers.get("content-length", "0").strip()
    return length != "0" or "transfer-encoding" in request.headers

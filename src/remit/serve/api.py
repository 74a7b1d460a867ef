"""The HTTP API: a client's verbs over HTTP, each acting as the principal of the request's token.

    GET    /runs                        ?status=failed&workflow=...&parent=...&limit=50, newest
                                        first
    POST   /runs                        {"workflow": "refund", "input": {...}}: start one (201)
    GET    /runs/{id}                   one run, by its id or an unambiguous prefix of it, with
                                        its parent and what it waits for
    GET    /runs/{id}/steps             its steps, attempt by attempt, as `remit show` prints them
    POST   /runs/{id}/messages          {"topic": "paid", "payload": {...}}, optional
                                        `Idempotency-Key`: send it a message (201)
    GET    /runs/{id}/messages          the messages sent to it, in order
    GET    /runs/{id}/state             what it published, by key
    GET    /runs/{id}/children          the runs it started as its children
    POST   /runs/{id}/cancel            cancel it
    POST   /runs/{id}/retry             {"from_step": 3}, with an optional `Idempotency-Key`
    GET    /approvals                   ?status=pending&run=run_…&limit=100, newest first
    GET    /approvals/{id}              the approval with its audit rows
    POST   /approvals/{id}/decision     {"decision": "approved", "edits": {...}, "reason": "..."}
                                        with an `Idempotency-Key` header
    POST   /approvals/decisions         {"ids": [...], "decision": ..., "edits": {id: {...}}}:
                                        all or none, with an `Idempotency-Key` header
    GET    /tasks                       ?status=open&run=...&limit=100, newest first
    GET    /tasks/{id}                  the task with its audit rows
    POST   /tasks/{id}/resolution       {"done": true, "output": {...}}, optional `Idempotency-Key`
    GET    /ledger                      ?run=...&limit=200: op calls, one run's or the latest
    GET    /budgets                     each period's limit, spent, reserved, left and drift
    PUT    /budgets/{scope}/limit       {"limit": "75.00", "period": "2026-11"}
    GET    /deadlines                   what is due without anyone asking, earliest first
    GET    /workers                     the app's workers and their state
    GET    /denials                     what the policies refused, newest first
    GET    /audit                       ?target=...: the audit rows of an approval, task, run,
                                        token, `app:<name>` or `secret:<NAME>`
    POST   /pause, /resume              pause or resume the app
    POST   /reconcile                   {"dry_run": true}: one reconciler pass now
    GET    /secrets                     the stored secrets' names (never their values)
    PUT    /secrets/{name}              {"value": "..."}
    DELETE /secrets/{name}
    POST   /calls                       {"op": "shop.items.get", "input": {...}}, optional
                                        `Idempotency-Key`: a direct call
    POST   /login-links                 {"for": "user:ann", "expires": "15m"}: a one-time code that
                                        signs in to the web console (201)
    PUT    /passwords/{principal}       {"password": "..."}: a console password
    GET    /tokens                      the app's API tokens (never the tokens themselves)
    POST   /tokens                      {"for": "user:ann", "name": "...", "expires": "30d"} (201)
    DELETE /tokens/{id}                 revoke one
    POST   /changes                     {"branch": "fix-dns", "title": "...", "base": "main"},
                                        optional `Idempotency-Key`: open a change (201)
    GET    /changes                     ?branch=...&limit=50: the changes, newest first
    GET    /changes/{id}                one change: its status, checks, merge and deploy
    GET    /deploys                     ?host=...&limit=50: what each host was deployed with
    POST   /chats                       {"title": "..."}: open a chat with the operator agent (201)
    GET    /chats                       ?owner=user:ann&limit=50: the chats, newest first
    GET    /chats/{id}                  one chat with its messages and its draft
    POST   /chats/{id}/messages         {"text": "..."}: ask the agent; starts its turn (202)
    GET    /chats/{id}/messages         ?after=N: the messages after the N-th
    GET    /chats/{id}/events           ?after=N: the turn as it goes, as server-sent events
    POST   /chats/{id}/draft/confirm    do what the agent proposes, under the policies
    POST   /chats/{id}/draft/discard    drop it, doing nothing
    POST   /chats/{id}/draft/sandbox    try a drafted start on fresh fakes first
    POST   /forge/{remote}/events       the forge's webhook, signed with its secret (no token)
    GET    /records/{type}/{id}/activity  ?limit&after: a business record's timeline, oldest first
    POST   /records/{type}/{id}/archive   {"reason": "..."}: cancel the record's pending gates
    GET    /fakes/{vendor}              what a fake vendor holds (`remit demo` only)
    GET    /health                      {"ok": true} while the database answers
    GET    /wake                        start the worker if it stopped itself (`serve --worker`)
    GET    /openapi.json                the spec of every route above
    GET    /, /console/...              the web console's pages (`remit.console`), signed in
                                        by a one-time link or a password, not by a token

Every route but `/health`, `/wake` and the forge's webhook (whose signature is its
authentication) needs `Authorization: Bearer rmt_...`, an API token (`remit tokens
create --for user:ann`): the request acts as the token's principal, under the app's policies,
and nothing in a body says who acts. No token, or an unknown, expired or revoked one, is 401; an
act the policies refuse is 403, with their reason, and recorded among the denials. Reads are
the policies' too (`remit.reads`): a list holds what the principal may read, and one thing it
may not read is 403, recorded the same way. The `Host`
header must name one of the server's names (`allowed_hosts`), so that a page on another site
cannot reach a server on localhost by rebinding its own name to it.

`create_api(client)` builds the app on a `remit.Client` and `remit serve` runs it. Each act goes
through the client's verb for it. A decision takes the `Idempotency-Key` header as its decision
key, so a request sent again returns the first decision and decides nothing twice; a task's
answer, a retry, a message and a direct call take the header as their key when it is sent. Every error has
one JSON shape, `{"error": ..., "reasons": [{"approval_id": ..., "reason": ...}]}`, and a status
that says whose move it is: 400 and 422 for a request to fix, 404 for an unknown id, 409 for an
act refused as things stand (nothing written), 503 while the database does not answer. A body
field, or a query parameter, that the route does not take is refused (422) rather than passed
over, and so is text holding a NUL character, which no text the database keeps may hold. A
body past `REMIT_MAX_BODY_BYTES` is 413 before it is read whole (`serve/body.py`), and so is a
value in it past its own limit (`REMIT_MAX_INPUT_BYTES` and its siblings, `core/limits.py`).

The routes are in `serve/routes.py`; what they take and answer in `serve/params.py` and
`serve/models.py`; the error shape in `serve/errors.py`; `serve/server.py` runs the app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from remit._version import __version__
from remit.client import Client
from remit.connectors.base import Fake
from remit.console import app as console
from remit.core.errors import RemitError
from remit.serve.body import BodyLimit
from remit.serve.change_routes import change_routes, forge_routes
from remit.serve.chat_routes import chat_routes
from remit.serve.errors import ErrorBody, Problem, error_response, error_responses
from remit.serve.fake_routes import fake_routes
from remit.serve.models import Health, Woken
from remit.serve.routes import router
from remit.serve.signin_routes import signin_routes

# The names a server on this machine answers to when none are configured.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def create_api(
    client: Client,
    *,
    title: str | None = None,
    version: str = __version__,
    allowed_hosts: Sequence[str] = LOCAL_NAMES,
    wake: Callable[[], str] | None = None,
    around: tuple[Callable[[], None], Callable[[], None]] | None = None,
    fakes: Mapping[str, Fake] | None = None,
    secure_cookies: bool = False,
) -> FastAPI:
    """The HTTP API over `client`'s app. Route functions are synchronous (the database calls
    block), so FastAPI runs each in its threadpool. `allowed_hosts`: the names (`Host` header)
    it answers to; `*` answers to any (behind a proxy that checks them). `wake`, given by a
    server that runs its own worker, answers `GET /wake`: it starts the worker if it stopped
    itself, and returns what the worker was doing. `around` is called before and after each
    request (such a server closes its connections after a request while its worker is
    stopped). `fakes`, given by an instance that runs every connector on its fake (`remit
    demo`), answers `GET /fakes/{vendor}` with what each fake holds. The web console is served
    beside the API (`remit.console`); `secure_cookies` marks its session cookie Secure, for a
    server behind TLS."""
    api = FastAPI(
        title=title or f"remit: {client.app.name}",
        version=version,
        description="A remit app's runs, approvals, tasks, changes, ledger, budgets, secrets, "
        "tokens and controls: the client's verbs, each acting as the principal of the "
        "request's API token under the app's policies. Every route but /health and the "
        "forge's webhook (signed with its secret instead) needs `Authorization: Bearer <API "
        "token>` (`remit tokens create`, or POST /tokens).",
        # The spec is served behind the token like every other route; no browsable page
        # (it would load its scripts from elsewhere).
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    names = {name.lower() for name in allowed_hosts}

    @api.middleware("http")
    async def check_host(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        host = _host_name(request.headers.get("host", ""))
        if "*" in names or host in names:
            return await call_next(request)
        message = (
            f"this server does not answer to the name {host!r}: call it by one of "
            f"{', '.join(sorted(names))} (`remit serve --allowed-host` adds a name)"
        )
        return JSONResponse(ErrorBody(error=message).sent(), status_code=400)

    if around is not None:
        before, after = around

        @api.middleware("http")
        async def bracket(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            before()
            try:
                return await call_next(request)
            finally:
                after()

    api.add_middleware(BodyLimit, limit=client.settings.max_body_bytes)
    api.state.remit = client
    routes = router(client)
    signin_routes(routes, client)
    change_routes(routes, client)
    chat_routes(routes, client)
    if fakes is not None:
        fake_routes(routes, fakes)
    for error in (
        Problem,
        RequestValidationError,
        StarletteHTTPException,
        RemitError,
        sa.exc.OperationalError,
        sa.exc.InterfaceError,
        sa.exc.TimeoutError,
        Exception,
    ):
        api.add_exception_handler(error, error_response)

    @api.get("/health", responses=error_responses(503))
    def health() -> Health:
        """Whether the API can reach its database."""
        with client.db.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return Health(ok=True)

    forge_routes(api, client)

    if wake is not None:
        woken = wake

        @api.get("/wake")
        def wake_route() -> Woken:
            """Start the worker if it stopped itself when idle (the wakeup service calls this at
            the deadline the worker registered). Needs no token: a wake changes nothing but
            whether the worker runs, and one too many finds nothing to do."""
            return Woken(worker=woken())

    @routes.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        """The OpenAPI spec of these routes."""
        return api.openapi()

    api.include_router(routes)
    console.install(api, client, secure_cookies=secure_cookies, fallback=error_response)
    return api


def _host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `localhost:8080` is `localhost`,
    `[::1]:8080` is `[::1]`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header

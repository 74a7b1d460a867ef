"""The HTTP API for approvals: list them, show one with its audit trail, and decide one.

    GET  /approvals                   ?status=pending&run=run_…&limit=100, newest first
    GET  /approvals/{id}              the approval with its audit rows
    POST /approvals/{id}/decision     {"decision": "approved", "edits": {...}, "reason": "..."}
                                      with an `Idempotency-Key` header
    GET  /health                      {"ok": true} while the database answers

Every route but `/health` needs `Authorization: Bearer rmt_...`, an API token (`remit tokens
create --for user:ann`): the request acts as the token's principal, under the app's policies,
and nothing in a body says who acts. No token, or an unknown, expired or revoked one, is 401; an
act the policies refuse is 403, with their reason. The `Host` header must name one of the
server's names (`allowed_hosts`), so that a page on another site cannot reach a server on
localhost by rebinding its own name to it.

`create_api(client)` builds the app on a `remit.Client` and `remit serve` runs it. A decision
goes through `Client.decide()` with the `Idempotency-Key` header as its decision key, so a request sent
again returns the first decision and decides nothing twice. Every error has one JSON shape,
`{"error": ..., "reasons": [{"approval_id": ..., "reason": ...}]}`, and a status that says
whose move it is: 400 and 422 for a request to fix, 404 for an unknown approval, 409 for a
decision refused, 503 while the database does not answer.

"""

from __future__ import annotations

import ipaddress
import logging
import math
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path as FilePath
from types import FrameType
from typing import Annotated, Any, Literal

import sqlalchemy as sa
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from remit._version import __version__
from remit.client import Client
from remit.core.errors import (
    ApprovalNotFound,
    DatabaseError,
    DecisionRefused,
    KeyReused,
    RemitError,
    Unauthenticated,
)
from remit.people.approvals import Approval, Approvals, ApprovalStatus
from remit.policy.cedar import PolicyDenied

log = logging.getLogger("remit.http")

IDEMPOTENCY_HEADER = "Idempotency-Key"
_KEY_HINT = (
    f"send an {IDEMPOTENCY_HEADER} header of 1 to 200 characters, unique to this decision "
    "(a UUID will do); sending the request again with the same key returns the first decision"
)

# The names a server on this machine answers to when none are configured.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
_BEARER = "Bearer "


def _principal(request: Request) -> str:
    """The principal the request's API token acts as; 401 without a working one."""
    given = request.headers.get("Authorization", "")
    if not given.startswith(_BEARER):
        raise Unauthenticated(
            "send an API token as `Authorization: Bearer rmt_...` (make one with `remit tokens "
            "create --for user:<name>`)"
        )
    client: Client = request.app.state.remit
    return client.authenticate(given.removeprefix(_BEARER).strip())


# Who acts in a route: the principal of the request's API token.
Who = Annotated[str, Depends(_principal)]


class ErrorReason(BaseModel):
    """One thing to fix, about one approval where it concerns one."""

    approval_id: str | None = Field(description="The approval it concerns, if one.")
    reason: str


class ErrorBody(BaseModel):
    """Every error's body: what went wrong and what to change, with each reason listed."""

    error: str = Field(description="What went wrong and what to change, as one sentence.")
    reasons: list[ErrorReason] = Field(
        default_factory=list, description="Every reason, one per approval or field."
    )


class ApprovalView(BaseModel):
    """An approval as its row holds it."""

    id: str
    run_id: str
    key: str = Field(description="The gate's key within its run.")
    type: str = Field(description="The approval type, which names the draft's model.")
    title: str
    status: ApprovalStatus
    draft: dict[str, Any] = Field(description="The draft the run proposed.")
    edited_draft: dict[str, Any] | None = Field(
        description="The draft as approved, when the decider edited it."
    )
    assignee: str | None = Field(description="Who must decide it (or an admin); null: anyone.")
    created_at: datetime
    expires_at: datetime | None
    decided_by: str | None
    decided_via: str | None = Field(description="The channel: http, cli, expiry, cancel, ...")
    decided_at: datetime | None
    reason: str | None
    batch_id: str | None = Field(description="Shared by the approvals one call decided together.")
    resumed_workflow_id: str | None = Field(
        description="The attempt the decision resumed the run on."
    )

    @classmethod
    def of(cls, approval: Approval) -> ApprovalView:
        return cls.model_validate(_fields(approval))


class AuditEntry(BaseModel):
    """One audit row: who did what to the approval, when."""

    id: int
    at: datetime
    actor: str
    action: str = Field(description="e.g. approval.approved")
    meta: dict[str, Any]


class ApprovalDetail(ApprovalView):
    """An approval with its audit rows, oldest first."""

    audit: list[AuditEntry]


class DecisionRequest(BaseModel):
    """A decision on one approval."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approved", "rejected"]
    edits: dict[str, Any] | None = Field(
        default=None,
        description="Draft fields to change, approving only: merged over the draft and "
        "checked against the approval type's model.",
    )
    reason: str | None = Field(default=None, max_length=10_000, description="Why, kept with it.")

    @model_validator(mode="after")
    def _edits_approve(self) -> DecisionRequest:
        if self.edits and self.decision != "approved":
            raise ValueError(
                f"edits go with an approval, not a decision of {self.decision!r}: "
                "leave edits out, or approve"
            )
        return self


class DecisionResponse(BaseModel):
    """What a decision did: the approval as decided."""

    replayed: bool = Field(
        description="True when this Idempotency-Key had already decided: nothing was decided "
        "again, and the approval is as that first request left it."
    )
    approval: ApprovalView


class Health(BaseModel):
    ok: bool


class _Problem(Exception):
    """An error response this module answers with directly."""

    def __init__(self, status: int, error: str, reasons: Sequence[ErrorReason] = ()) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.reasons = list(reasons)


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses of a route, for the OpenAPI spec."""
    described = {
        400: "The request needs a change: the error names it.",
        401: "No API token, or one that is unknown, expired or revoked.",
        403: "The app's policies refuse the token's principal this act; the reason is given.",
        404: "No approval has that id.",
        409: "The decision was refused and nothing was written; every reason is listed.",
        422: "The body or the query does not parse (every field is listed), or the "
        "Idempotency-Key was sent before with another request.",
        503: "The database did not answer; send the request again.",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


def create_api(
    client: Client,
    *,
    title: str | None = None,
    version: str = __version__,
    allowed_hosts: Sequence[str] = LOCAL_NAMES,
) -> FastAPI:
    """The HTTP API over `client`'s app. Route functions are synchronous (the database calls
    block), so FastAPI runs each in its threadpool. `allowed_hosts`: the names (`Host` header)
    it answers to; `*` answers to any (behind a proxy that checks them)."""
    approvals = client.approvals
    api = FastAPI(
        title=title or f"remit: {client.app.name}",
        version=version,
        description="Approvals of durable runs: list them, show one, decide one. Every route "
        "but /health needs `Authorization: Bearer <API token>` (`remit tokens create`).",
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
        return JSONResponse(ErrorBody(error=message).model_dump(mode="json"), status_code=400)

    api.state.remit = client
    routes = APIRouter(dependencies=[Depends(_principal)])
    for error in (
        _Problem,
        RequestValidationError,
        StarletteHTTPException,
        RemitError,
        sa.exc.OperationalError,
        sa.exc.InterfaceError,
        sa.exc.TimeoutError,
        Exception,
    ):
        api.add_exception_handler(error, _error_response)

    @api.get("/health", responses=_errors(503))
    def health() -> Health:
        """Whether the API can reach its database."""
        with client.db.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return Health(ok=True)

    @routes.get("/approvals", responses=_errors(401, 422, 503))
    def list_approvals(
        status: Annotated[ApprovalStatus | None, Query(description="Only this status.")] = None,
        run: Annotated[
            str | None, Query(max_length=64, description="Only this run's approvals.")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="How many, newest first.")] = 100,
    ) -> list[ApprovalView]:
        """List approvals, newest first."""
        found = approvals.list(status=status, run_id=run, limit=limit)
        return [ApprovalView.of(each) for each in found]

    @routes.get("/approvals/{approval_id}", responses=_errors(401, 404, 422, 503))
    def get_approval(approval_id: Annotated[str, Path()]) -> ApprovalDetail:
        """Show one approval with its audit rows."""
        approval = _find(approvals, approval_id)
        audit = [AuditEntry.model_validate(row) for row in approvals.audit(approval_id)]
        return ApprovalDetail.model_validate({**_fields(approval), "audit": audit})

    @routes.post(
        "/approvals/{approval_id}/decision", responses=_errors(400, 401, 403, 404, 409, 422, 503)
    )
    def decide(
        approval_id: Annotated[str, Path()],
        body: DecisionRequest,
        who: Who,
        idempotency_key: Annotated[
            str,
            Header(
                alias=IDEMPOTENCY_HEADER,
                max_length=200,
                description="Unique to this decision; a request repeated with the same key "
                "returns the first decision.",
            ),
        ],
    ) -> DecisionResponse:
        """Approve (with edits to the draft) or reject a pending approval, and resume its run.

        The run resumes on whichever worker serves its queue; this API runs none.
        """
        if not idempotency_key.strip():
            blank = ErrorReason(
                approval_id=approval_id, reason=f"header `{IDEMPOTENCY_HEADER}` is blank"
            )
            raise _Problem(400, _KEY_HINT, [blank])
        approval = _find(approvals, approval_id)
        edits = body.edits or None
        if edits is not None:
            _check_edits(approvals, approval, edits)
        result = client.decide(
            [approval_id],
            body.decision,
            key=idempotency_key,
            edits=None if edits is None else {approval_id: edits},
            reason=body.reason,
            by=who,
            via="http",
        )
        return DecisionResponse(
            replayed=result.replayed, approval=ApprovalView.of(approvals.get(approval_id))
        )

    @routes.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        """The OpenAPI spec of these routes."""
        return api.openapi()

    api.include_router(routes)
    return api


def _host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `localhost:8080` is `localhost`,
    `[::1]:8080` is `[::1]`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _fields(approval: Approval) -> dict[str, Any]:
    stored = approval.as_json()  # the drafts as JSON
    return {name: stored[name] for name in ApprovalView.model_fields}


def _find(approvals: Approvals, approval_id: str) -> Approval:
    try:
        return approvals.get(approval_id)
    except ApprovalNotFound:
        message = f"no approval `{approval_id}`: GET /approvals lists the approvals"
        raise _Problem(404, message, [ErrorReason(approval_id=approval_id, reason=message)])


def _check_edits(approvals: Approvals, approval: Approval, edits: Mapping[str, Any]) -> None:
    """Refuse edits to a pending approval's draft that name no field of its model or do not
    parse against it, as a request to fix (422). `decide()` checks them again as it writes."""
    declared = approvals.types.get(approval.type)
    if declared is None or approval.status != "pending":
        return  # decide() refuses the decision, with its reason
    model = declared.draft
    name = model.__name__
    reasons: list[str] = []
    if model.model_config.get("extra") != "allow":
        known = set(model.model_fields) | {
            field.alias for field in model.model_fields.values() if field.alias
        }
        reasons += [
            f"edits.{field}: {name} has no field `{field}` (its fields: "
            f"{', '.join(model.model_fields)})"
            for field in sorted(set(edits) - known)
        ]
    try:
        model.model_validate({**approval.draft_json, **edits})
    except ValidationError as error:
        reasons += [
            f"edits.{'.'.join(str(part) for part in e['loc']) or 'draft'}: {e['msg']}"
            for e in error.errors(include_url=False)
        ]
    if reasons:
        raise _Problem(
            422,
            f"the edits to approval {approval.id} do not fit its draft ({name}): "
            f"{'; '.join(reasons)}",
            [ErrorReason(approval_id=approval.id, reason=reason) for reason in reasons],
        )


async def _error_response(request: Request, error: Exception) -> JSONResponse:
    """Every error as `ErrorBody`, with the status that says what the caller can do."""
    approval_id = request.path_params.get("approval_id")
    status = 400
    headers: Mapping[str, str] | None = None
    reasons: list[ErrorReason] = []
    if isinstance(error, _Problem):
        status, message, reasons = error.status, error.error, error.reasons
    elif isinstance(error, RequestValidationError):
        status, message, reasons = _invalid(error, approval_id)
    elif isinstance(error, Unauthenticated):
        status, message = 401, str(error)
        headers = {"WWW-Authenticate": 'Bearer realm="remit"'}
    elif isinstance(error, PolicyDenied):
        status, message = 403, str(error)
    elif isinstance(error, DecisionRefused) and error.by_policy:
        status, message = 403, str(error)
        reasons = [ErrorReason(approval_id=i, reason=r) for i, r in error.reasons]
    elif isinstance(error, KeyReused):
        status, message = 422, str(error)
        reasons = [ErrorReason(approval_id=approval_id, reason=message)]
    elif isinstance(error, DecisionRefused):
        status, message = 409, str(error)
        reasons = [ErrorReason(approval_id=i, reason=r) for i, r in error.reasons]
    elif isinstance(error, DatabaseError | sa.exc.OperationalError | sa.exc.InterfaceError):
        log.warning("%s %s: the database did not answer: %s", request.method, request.url, error)
        status, headers = 503, {"Retry-After": "1"}
        message = "the database did not answer: send the request again in a moment"
    elif isinstance(error, sa.exc.TimeoutError):
        status, headers = 503, {"Retry-After": "1"}
        message = "every database connection is busy: send the request again in a moment"
    elif isinstance(error, RemitError):
        message = str(error)
    elif isinstance(error, StarletteHTTPException):
        status, headers = error.status_code, error.headers
        message = _http_message(request, error)
    else:
        log.error("%s %s failed", request.method, request.url, exc_info=error)
        status = 500
        message = f"the server failed ({type(error).__name__}); its log has the details"
    body = ErrorBody(error=message, reasons=reasons)
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _invalid(
    error: RequestValidationError, approval_id: str | None
) -> tuple[int, str, list[ErrorReason]]:
    """A request that does not parse: 400 for a missing or bad Idempotency-Key, else 422."""
    problems = [_problem(each) for each in error.errors()]
    reasons = [ErrorReason(approval_id=approval_id, reason=problem) for problem in problems]
    if any(each["loc"][:1] == ("header",) for each in error.errors()):
        return 400, _KEY_HINT, reasons
    return 422, f"the request does not parse: {'; '.join(problems)}", reasons


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as a person reads it, naming the field and what to send."""
    where, *path = error.get("loc", ()) or ("request",)
    field = ".".join(str(part) for part in path)
    kind = error.get("type", "")
    if where == "body" and kind == "json_invalid":
        detail = error.get("ctx", {}).get("error", "")
        return f"the body is not valid JSON ({detail}): send a JSON object"
    if where == "body" and not field:
        hint = ": send a JSON object" if kind == "missing" else ""
        return f"the body: {error.get('msg', 'is not valid')}{hint}"
    if kind == "extra_forbidden":
        allowed = ", ".join(DecisionRequest.model_fields)
        if field == "by":
            return (
                "`by` is not a field of a decision: the decision is made as the principal of "
                f"the request's API token; send only {allowed}"
            )
        return f"`{field}` is not a field of a decision: send only {allowed}"
    label = {"query": "query parameter", "header": "header", "path": "path"}.get(str(where), "")
    return f"{label} `{field}`: {error.get('msg', 'is not valid')}".strip()


def _http_message(request: Request, error: StarletteHTTPException) -> str:
    route = f"{request.method} {request.url.path}"
    if error.status_code == 404:
        return f"{route} is not a route of this API: GET /openapi.json lists the routes"
    if error.status_code == 405:
        return f"{route}: the method is not allowed there: GET /openapi.json lists the routes"
    return f"{route}: {error.detail}"


class _Stopped(Exception):
    """SIGTERM or Ctrl-C reached the server: it has finished its requests and stops."""


def check_exposure(
    host: str, *, cert: FilePath | None, key: FilePath | None, behind_proxy: bool
) -> tuple[FilePath, FilePath] | None:
    """The certificate and key to serve HTTPS with, or None for plain HTTP; `RemitError` for
    plain HTTP on an address other machines reach, unless a proxy in front terminates TLS.
    Tokens and decisions must not cross a network in the clear."""
    if (cert is None) != (key is None):
        raise RemitError("give both --tls-cert and --tls-key, or neither")
    if cert is not None and key is not None:
        for given, flag in ((cert, "--tls-cert"), (key, "--tls-key")):
            if not given.is_file():
                raise RemitError(f"{flag} {given}: no such file")
        return cert, key
    if behind_proxy or _loopback(host):
        return None
    raise RemitError(
        f"--host {host} is reached from other machines, and API tokens would cross the network "
        "in plain HTTP: give --tls-cert and --tls-key, or serve behind a proxy that terminates "
        "TLS and pass --behind-proxy (or listen on 127.0.0.1)"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    api: FastAPI,
    *,
    host: str,
    port: int,
    drain_timeout: float = 30.0,
    tls: tuple[FilePath, FilePath] | None = None,
    listening: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve `api` on `host:port` (port 0: a free one) until SIGTERM or Ctrl-C, then return.
    Call it from the main thread, where signals arrive.

    `listening` is called with the URL once the socket is bound. On a signal the server stops
    taking connections and lets open requests finish for up to `drain_timeout` seconds. Raises
    `RemitError` if the address cannot be listened on.
    """
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        api,
        log_config=None,
        lifespan="off",
        timeout_graceful_shutdown=math.ceil(drain_timeout),
        ssl_certfile=None if tls is None else str(tls[0]),
        ssl_keyfile=None if tls is None else str(tls[1]),
    )
    server = uvicorn.Server(config)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # uvicorn handles the signal, shuts down, then raises it again to the handler it found:
        # this one, so the process ends by returning rather than dying of the signal.
        for sig in previous:
            signal.signal(sig, _stop)
        listening(f"http://{shown}:{bound_port}")
        server.run(sockets=[sock])
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        sock.close()


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port`, or a `RemitError` naming the setting to change."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise RemitError(
            f"cannot listen on {host!r} ({error.strerror}): pass --host or set REMIT_HTTP_HOST "
            "to an address of this machine, e.g. 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise RemitError(
            f"cannot listen on {host}:{port} ({error.strerror}): pass another --port or set "
            "REMIT_HTTP_PORT (0 picks a free port)"
        ) from None
    return sock

"""The HTTP API's one error shape: every error, whoever raised it, answered as `ErrorBody` with
the status that says whose move it is."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from remit.core.errors import (
    ApprovalNotFound,
    ChangeGoing,
    ChatBusy,
    ChatNotFound,
    DatabaseError,
    DecisionRefused,
    InputInvalid,
    KeyReused,
    NoDraft,
    RemitError,
    RetryRefused,
    RowLocked,
    RunNotFound,
    SendRefused,
    TaskNotFound,
    TaskRefused,
    TooLarge,
    Unauthenticated,
    UnknownWorkflow,
)
from remit.core.text import PROBLEMS, excerpt, listed
from remit.policy.cedar import PolicyDenied
from remit.serve.models import RequestBody
from remit.serve.params import KEY_HINT

log = logging.getLogger("remit.http")


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
    code: str | None = Field(
        default=None,
        description="What kind of error it is, for a program to tell apart without reading "
        "the words: the name of remit's error (`ChatBusy`, `NoDraft`, `ChatNotFound`, "
        "`DecisionRefused`, `PolicyDenied`, `UnknownWorkflow`...). Sent by the routes of "
        "chats (`/chats`); absent elsewhere.",
    )

    def sent(self) -> dict[str, Any]:
        """The body as it goes on the wire: `code` only where there is one."""
        return self.model_dump(mode="json", exclude={"code"} if self.code is None else None)


class Problem(Exception):
    """An error response this module answers with directly."""

    def __init__(self, status: int, error: str, reasons: Sequence[ErrorReason] = ()) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.reasons = list(reasons)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses of a route, for the OpenAPI spec."""
    described = {
        400: "The request needs a change: the error names it.",
        401: "No API token, or one that is unknown, expired or revoked.",
        403: "The app's policies refuse the token's principal this act; the reason is given.",
        404: "Nothing has that id: the error names the route that lists them.",
        409: "The act was refused as things stand and nothing was written; every reason is listed.",
        413: "The body, or a value in it, is past its size limit (`REMIT_MAX_*`): the error "
        "names the limit and the setting that raises it; nothing was written.",
        422: "The body or the query does not parse (every field is listed), or the "
        "Idempotency-Key was sent before with another request.",
        503: "The database did not answer, or a row it needed stayed locked by another "
        "session past `REMIT_LOCK_TIMEOUT` (the error names it); nothing was written: send the "
        "request again.",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


# The route that lists each kind of thing an id may name and find nothing.
_LISTED: dict[type[RemitError], str] = {
    RunNotFound: "GET /runs lists the runs",
    TaskNotFound: "GET /tasks lists the tasks",
    ApprovalNotFound: "GET /approvals lists the approvals",
}


async def error_response(request: Request, error: Exception) -> JSONResponse:
    """Every error as `ErrorBody`, with the status that says what the caller can do."""
    approval_id = request.path_params.get("approval_id")
    status = 400
    headers: Mapping[str, str] | None = None
    reasons: list[ErrorReason] = []
    if isinstance(error, Problem):
        status, message, reasons = error.status, error.error, error.reasons
    elif isinstance(error, RequestValidationError):
        status, message, reasons = _invalid(request, error, approval_id)
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
    elif isinstance(error, TaskRefused):
        status, message = 403 if error.by_policy else 409, str(error)
        reasons = [ErrorReason(approval_id=None, reason=r) for r in error.reasons]
    elif isinstance(error, RetryRefused | SendRefused | ChangeGoing | NoDraft):
        status, message = 409, str(error)
        reasons = [ErrorReason(approval_id=None, reason=message)]
    elif isinstance(error, ChatBusy):
        # The turn's run is named, for the caller to follow or wait for.
        status, message = 409, str(error)
        if error.run_id not in message:
            message = f"{message} (its turn is the run {error.run_id})"
        reasons = [ErrorReason(approval_id=None, reason=message)]
    elif isinstance(error, ChatNotFound):
        # No such chat, or an app with no operator agent: the error says which.
        status, message = 404, str(error)
        reasons = [ErrorReason(approval_id=None, reason=message)]
    elif isinstance(error, TooLarge):
        status, message = 413 if error.unit == "bytes" else 422, str(error)
        reasons = [ErrorReason(approval_id=approval_id, reason=message)]
    elif isinstance(error, InputInvalid):
        status, message = 422, str(error)
        reasons = [
            ErrorReason(
                approval_id=None,
                reason=f"input.{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}",
            )
            for e in error.errors
        ] or [ErrorReason(approval_id=None, reason=message)]
    elif isinstance(error, UnknownWorkflow):
        status, message = 404, str(error)
    elif isinstance(error, RunNotFound | TaskNotFound | ApprovalNotFound):
        # The error names the id (`no run `x`: ...`); the route that lists them follows.
        status = 404
        message = f"{str(error).split(':', 1)[0]}: {_LISTED[type(error)]}"
    elif isinstance(error, RowLocked):
        # Another session holds the row: the message names it; trying again is safe.
        status, headers, message = 503, {"Retry-After": "1"}, str(error)
        reasons = [ErrorReason(approval_id=approval_id, reason=message)]
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
    body = ErrorBody(error=message, reasons=reasons, code=_code(request, error))
    return JSONResponse(body.sent(), status_code=status, headers=headers)


def _code(request: Request, error: Exception) -> str | None:
    """The error's kind, for a program to map it on (see `ErrorBody.code`): remit's error's
    name, on the routes of chats."""
    if not isinstance(error, RemitError) or not request.url.path.startswith("/chats"):
        return None
    return type(error).__name__


def _invalid(
    request: Request, error: RequestValidationError, approval_id: str | None
) -> tuple[int, str, list[ErrorReason]]:
    """A request that does not parse: 400 for a missing or bad Idempotency-Key, else 422."""
    body = _body_model(request)
    found = error.errors()
    problems = [excerpt(_problem(each, body), 300) for each in found]
    reasons = [ErrorReason(approval_id=approval_id, reason=problem) for problem in problems]
    reasons = reasons[:PROBLEMS]
    if any(each["loc"][:1] == ("header",) for each in found):
        return 400, KEY_HINT, reasons
    return 422, f"the request does not parse: {listed(problems)}", reasons


def _body_model(request: Request) -> type[RequestBody] | None:
    """The model of the body the request's route takes, if it takes one."""
    route = request.scope.get("route")
    field = route.body_field if isinstance(route, APIRoute) else None
    if field is None:
        return None
    annotation = field.field_info.annotation
    for kind in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(kind, type) and issubclass(kind, RequestBody):
            return kind
    return None


def _problem(error: Mapping[str, Any], body: type[RequestBody] | None) -> str:
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
    if kind == "extra_forbidden" and body is not None:
        allowed = ", ".join(each.alias or name for name, each in body.model_fields.items())
        if field == "by":
            return (
                f"`by` is not a field of {body.noun}: {body.made} as the principal of the "
                f"request's API token; send only {allowed}"
            )
        return f"`{field}` is not a field of {body.noun}: send only {allowed}"
    label = {"query": "query parameter", "header": "header", "path": "path"}.get(str(where), "")
    return f"{label} `{field}`: {error.get('msg', 'is not valid')}".strip()


def _http_message(request: Request, error: StarletteHTTPException) -> str:
    route = f"{request.method} {request.url.path}"
    if error.status_code == 404:
        return f"{route} is not a route of this API: GET /openapi.json lists the routes"
    if error.status_code == 405:
        return f"{route}: the method is not allowed there: GET /openapi.json lists the routes"
    return f"{route}: {error.detail}"

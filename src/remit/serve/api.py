"""The HTTP API: a client's verbs over HTTP, each acting as the principal of the request's token.

    GET    /runs                        ?status=failed&workflow=...&limit=50, newest first
    POST   /runs                        {"workflow": "refund", "input": {...}}: start one (201)
    GET    /runs/{id}                   one run, by its id or an unambiguous prefix of it
    GET    /runs/{id}/steps             its steps, attempt by attempt, as `remit show` prints them
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
    GET    /tokens                      the app's API tokens (never the tokens themselves)
    POST   /tokens                      {"for": "user:ann", "name": "...", "expires": "30d"} (201)
    DELETE /tokens/{id}                 revoke one
    GET    /records/{type}/{id}/activity  ?limit&after: a business record's timeline, oldest first
    POST   /records/{type}/{id}/archive   {"reason": "..."}: cancel the record's pending gates
    GET    /health                      {"ok": true} while the database answers
    GET    /openapi.json                the spec of every route above

Every route but `/health` needs `Authorization: Bearer rmt_...`, an API token (`remit tokens
create --for user:ann`): the request acts as the token's principal, under the app's policies,
and nothing in a body says who acts. No token, or an unknown, expired or revoked one, is 401; an
act the policies refuse is 403, with their reason, and recorded among the denials. The `Host`
header must name one of the server's names (`allowed_hosts`), so that a page on another site
cannot reach a server on localhost by rebinding its own name to it.

`create_api(client)` builds the app on a `remit.Client` and `remit serve` runs it. Each act goes
through the client's verb for it. A decision takes the `Idempotency-Key` header as its decision
key, so a request sent again returns the first decision and decides nothing twice; a task's
answer, a retry and a direct call take the header as their key when it is sent. Every error has
one JSON shape, `{"error": ..., "reasons": [{"approval_id": ..., "reason": ...}]}`, and a status
that says whose move it is: 400 and 422 for a request to fix, 404 for an unknown id, 409 for an
act refused as things stand (nothing written), 503 while the database does not answer. A body
field, or a query parameter, that the route does not take is refused (422) rather than passed
over, and so is text holding a NUL character, which no text the database keeps may hold.

"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import math
import re
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path as FilePath
from types import FrameType
from typing import Annotated, Any, ClassVar, Literal

import sqlalchemy as sa
import uvicorn
from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from remit._version import __version__
from remit.budgets.model import PeriodState
from remit.client import Client
from remit.connectors.credentials import check_name
from remit.core.audit import audit_of
from remit.core.errors import (
    ApprovalNotFound,
    DatabaseError,
    DecisionRefused,
    InputInvalid,
    KeyReused,
    RemitError,
    RetryRefused,
    RunNotFound,
    TaskNotFound,
    TaskRefused,
    Unauthenticated,
    UnknownWorkflow,
)
from remit.core.ids import full_id
from remit.core.runs import Run, RunStatus, attempt_workflow_id
from remit.core.schema import approvals as approvals_table
from remit.core.schema import runs as runs_table
from remit.core.schema import tasks as tasks_table
from remit.ops.registry import WorkerState
from remit.ops.registry import state as worker_state
from remit.people.approvals import Approval, Approvals, ApprovalStatus
from remit.people.tasks import Task, TaskStatus
from remit.policy.cedar import PolicyDenied
from remit.policy.tokens import TokenInfo, parse_duration

log = logging.getLogger("remit.http")

IDEMPOTENCY_HEADER = "Idempotency-Key"
_KEY_HINT = (
    f"send an {IDEMPOTENCY_HEADER} header of 1 to 200 printable characters with no spaces, "
    "unique to this request (a UUID will do); sending the request again with the same key "
    "returns the first result"
)
# No text the database keeps may hold a NUL character: the spec says so of every string field
# and parameter, and the API refuses one (422) rather than let the database fail on it.
_NUL_FREE: dict[str, Any] = {"pattern": r"^[^\u0000]*$"}
# What a key is: printable ASCII with no spaces (`remit.core.keys`).
_KEY_FORM = r"^[!-~]+$"
# A principal a token may act as, a secret's name, a token's lifetime, as the spec states them
# (the routes check them too, with messages that say what to send).
_PRINCIPAL_FORM = re.compile(r"^(user|agent):[A-Za-z0-9][A-Za-z0-9._@+-]*$")
_SECRET_FORM = r"^[A-Z_][A-Z0-9_]*$"
# At most 999999 days (or as many weeks as fit): a token's expiry stays a date a database holds.
# A budget's limit as a string: up to 11 digits, to the micro-dollar (the column holds 18, 6).
_AMOUNT_FORM = re.compile(r"^[0-9]{1,11}(\.[0-9]{1,6})?$")
_DURATION_FORM = re.compile(r"^([1-9][0-9]{0,5}[mhd]|[1-9][0-9]{0,4}w)$")
# The most rows a list route returns at once.
MAX_LIMIT = 1000
# The longest a summary of a step's output or error is.
_SUMMARY = 200

# The names a server on this machine answers to when none are configured.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
_BEARER = HTTPBearer(
    auto_error=False,
    bearerFormat="rmt_...",
    description="An API token of this app (`remit tokens create --for user:<name>`, or "
    "POST /tokens): the request acts as its principal.",
)


def _principal(
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
    return client.authenticate(credentials.credentials.strip())


# Who acts in a route: the principal of the request's API token.
Who = Annotated[str, Depends(_principal)]


def _plain_query(request: Request) -> None:
    """Refuse a query parameter the route does not take, or one given more than once, rather
    than answer as if it had not been sent; and a NUL character in the path or the query,
    which no text the database keeps may hold (422)."""
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
        raise _Problem(
            422,
            f"the request does not parse: {'; '.join(problems)}",
            [ErrorReason(approval_id=None, reason=problem) for problem in problems],
        )


def _limit(what: str) -> Any:
    return Query(ge=1, le=MAX_LIMIT, description=f"How many (1 to {MAX_LIMIT}), {what}.")


NewestFirst = Annotated[int, _limit("newest first")]
# An optional Idempotency-Key: the same request sent again with it returns the first result.
OptionalKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=200,
        pattern=_KEY_FORM,
        description="Optional, unique to this request: sent again with the same key and the "
        "same body, the request returns its first result and does nothing twice.",
    ),
]
RequiredKey = Annotated[
    str,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=200,
        pattern=_KEY_FORM,
        description="Unique to this decision; a request repeated with the same key returns the "
        "first decision.",
    ),
]
# A direct call's key is kept in the ledger as `direct:<key>`: at most 100 characters.
CallKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=100,
        pattern=_KEY_FORM,
        description="Optional, unique to this call: sent again with the same key and the same "
        "body, the call returns its first outcome and calls nothing again.",
    ),
]
RunId = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=_NUL_FREE,
        description="The run's id, or a prefix of it that only it begins with.",
    ),
]
SecretName = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra={"pattern": _SECRET_FORM},
        description="The secret's name, written like an environment variable's: SHOP_TOKEN.",
    ),
]
TaskId = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=_NUL_FREE,
        description="The task's id, or a prefix only it begins with.",
    ),
]
ApprovalId = Annotated[str, Path(json_schema_extra=_NUL_FREE, description="The approval's id.")]


# Errors.


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
        404: "Nothing has that id: the error names the route that lists them.",
        409: "The act was refused as things stand and nothing was written; every reason is listed.",
        422: "The body or the query does not parse (every field is listed), or the "
        "Idempotency-Key was sent before with another request.",
        503: "The database did not answer; send the request again.",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


# Request bodies.


class _Body(BaseModel):
    """A request body: a field it does not name is refused, and none says who acts."""

    model_config = ConfigDict(extra="forbid")

    # What the body asks for, and how it is made, for the message refusing a field it lacks.
    noun: ClassVar[str] = "this request"
    made: ClassVar[str] = "it is made"

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        found = [
            f"`{name}`"
            for name, value in (data.items() if isinstance(data, dict) else ())
            if any("\x00" in each for each in _texts(value))
        ]
        if found:
            raise ValueError(
                f"{', '.join(found)} holds a NUL character (\\u0000), which no text the "
                "database keeps may hold: remove it"
            )
        return data


class _Decision(_Body):
    """What every decision says: approved or rejected, and why; edits go with an approval."""

    noun: ClassVar[str] = "a decision"
    made: ClassVar[str] = "the decision is made"

    decision: Literal["approved", "rejected"]
    reason: str | None = Field(
        default=None,
        max_length=10_000,
        json_schema_extra=_NUL_FREE,
        description="Why, kept with it.",
    )
    edits: Any = None

    @model_validator(mode="after")
    def _edits_approve(self) -> _Decision:
        if self.edits and self.decision != "approved":
            raise ValueError(
                f"edits go with an approval, not a decision of {self.decision!r}: "
                "leave edits out, or approve"
            )
        return self


class DecisionRequest(_Decision):
    """A decision on one approval."""

    edits: dict[str, Any] | None = Field(
        default=None,
        description="Draft fields to change, approving only: merged over the draft and "
        "checked against the approval type's model.",
    )


class DecisionsRequest(_Decision):
    """One decision on several approvals: all of them are decided, or none is."""

    ids: list[Annotated[str, Field(min_length=1, max_length=200, json_schema_extra=_NUL_FREE)]] = (
        Field(min_length=1, max_length=MAX_LIMIT, description="The approvals to decide.")
    )
    edits: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="Per approval id, draft fields to change, approving only: merged over its "
        "draft and checked against its type's model.",
    )

    @model_validator(mode="after")
    def _edits_fit(self) -> DecisionsRequest:
        stray = sorted(set(self.edits or {}) - set(self.ids))
        if stray:
            raise ValueError(
                f"edits name {', '.join(stray)}, which `ids` does not: add them to `ids`, or "
                "drop their edits"
            )
        return self


class RecordRef(_Body):
    """A business record: its type and id."""

    noun: ClassVar[str] = "a record"
    made: ClassVar[str] = "the record is named"

    type: str = Field(min_length=1, max_length=100, json_schema_extra=_NUL_FREE)
    id: str = Field(min_length=1, max_length=200, json_schema_extra=_NUL_FREE)


class StartRequest(_Body):
    """A run to start."""

    noun: ClassVar[str] = "a start"
    made: ClassVar[str] = "the run is started"

    workflow: str = Field(
        min_length=1,
        max_length=200,
        json_schema_extra=_NUL_FREE,
        description="The workflow's name.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="The run's input, parsed against the workflow's model."
    )
    record: RecordRef | None = Field(
        default=None,
        description="The business record the run concerns; default: the one its workflow "
        "derives from its input, if any.",
    )


class RetryRequest(_Body):
    """Where a retry carries on from."""

    noun: ClassVar[str] = "a retry"
    made: ClassVar[str] = "the retry is made"

    from_step: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="The step to carry on from (the steps before it are copied); default: "
        "after the last step that finished.",
    )


class ResolutionRequest(_Body):
    """A task's answer: whether its call happened."""

    noun: ClassVar[str] = "a task's answer"
    made: ClassVar[str] = "the task is answered"

    done: bool = Field(description="True: the call happened; false: it did not.")
    output: dict[str, Any] | None = Field(
        default=None,
        description="With done, what the call returned, checked against the op's output model.",
    )


class LimitRequest(_Body):
    """A budget period's new limit."""

    noun: ClassVar[str] = "a budget limit"
    made: ClassVar[str] = "the limit is set"

    limit: Annotated[
        Decimal,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "number", "minimum": 0, "maximum": 99_999_999_999},
                    {"type": "string", "pattern": _AMOUNT_FORM.pattern},
                ]
            }
        ),
    ] = Field(
        ge=0,
        le=Decimal("99999999999.999999"),
        description="The period's new limit in USD, as a number or a decimal string (75.50).",
    )
    period: str | None = Field(
        default=None,
        min_length=1,
        json_schema_extra=_NUL_FREE,
        max_length=20,
        description="The period, e.g. 2026-11, 2026-W48 or 2026-11-29; default: the current one.",
    )

    @field_validator("limit", mode="before")
    @classmethod
    def _amount(cls, value: object) -> object:
        if isinstance(value, bool) or (
            isinstance(value, str) and not _AMOUNT_FORM.fullmatch(value)
        ):
            raise ValueError(
                f"{value!r} is not an amount in USD: give a number, or a decimal string of at "
                "most 11 digits and 6 places, e.g. 75.50"
            )
        return value


class ReconcileRequest(_Body):
    """A reconciler pass."""

    noun: ClassVar[str] = "a reconciler pass"
    made: ClassVar[str] = "the pass is run"

    dry_run: bool = Field(default=False, description="Say what the pass would do, and do none.")


class SecretRequest(_Body):
    """A secret's new value."""

    noun: ClassVar[str] = "a secret"
    made: ClassVar[str] = "the secret is set"

    value: str = Field(
        min_length=1,
        max_length=65_536,
        json_schema_extra=_NUL_FREE,
        description="The value, kept encrypted.",
    )


class CallRequest(_Body):
    """A direct call of one op."""

    noun: ClassVar[str] = "a call"
    made: ClassVar[str] = "the call is made"

    op: str = Field(
        min_length=1,
        max_length=300,
        json_schema_extra=_NUL_FREE,
        description="The op, e.g. shop.items.get.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="The op's input, parsed against its model."
    )


class TokenRequest(_Body):
    """An API token to make."""

    noun: ClassVar[str] = "a token"
    made: ClassVar[str] = "the token is made"

    for_: str = Field(
        alias="for",
        max_length=200,
        json_schema_extra={"pattern": _PRINCIPAL_FORM.pattern},
        description="Who the token acts as: user:<name> or agent:<name>.",
    )
    name: str = Field(
        default="",
        max_length=100,
        json_schema_extra=_NUL_FREE,
        description="What it is for, to tell it by.",
    )
    expires: str | None = Field(
        default=None,
        max_length=20,
        json_schema_extra={"pattern": _DURATION_FORM.pattern},
        description="How long it lasts: a whole number and m, h, d or w (30d), of at most "
        "999999d; default: until revoked.",
    )

    @field_validator("for_")
    @classmethod
    def _principal_form(cls, value: str) -> str:
        if not _PRINCIPAL_FORM.fullmatch(value):
            raise ValueError(
                "give who the token acts as: user:<name> or agent:<name> (letters, digits and "
                ". _ @ + -), e.g. user:ann"
            )
        return value


# Responses.


class Health(BaseModel):
    ok: bool


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
    """One audit row: who did what, when."""

    id: int
    at: datetime
    actor: str
    action: str = Field(description="e.g. approval.approved")
    meta: dict[str, Any]


class ApprovalDetail(ApprovalView):
    """An approval with its audit rows, oldest first."""

    audit: list[AuditEntry]


class DecisionResponse(BaseModel):
    """What a decision did: the approval as decided."""

    replayed: bool = Field(
        description="True when this Idempotency-Key had already decided: nothing was decided "
        "again, and the approval is as that first request left it."
    )
    approval: ApprovalView


class DecisionsResponse(BaseModel):
    """What a decision on several approvals did: each approval as decided."""

    replayed: bool = Field(
        description="True when this Idempotency-Key had already decided: nothing was decided again."
    )
    batch_id: str | None = Field(description="Shared by the approvals decided together.")
    approvals: list[ApprovalView] = Field(description="The approvals, in the order of `ids`.")


class RunView(BaseModel):
    """A run as its row holds it."""

    run_id: str
    workflow: str
    queue: str
    input: dict[str, Any]
    status: RunStatus
    attempt: int = Field(description="The current attempt, from 1.")
    workflow_id: str = Field(description="The current attempt's DBOS workflow id.")
    version: str | None = Field(description="The app version the current attempt runs on.")
    started_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    output: Any = Field(description="What the run returned, once done.")
    error: str | None

    @classmethod
    def of(cls, run: Run) -> RunView:
        return cls.model_validate({name: getattr(run, name) for name in cls.model_fields})


class StepView(BaseModel):
    """One step of one attempt, as DBOS checkpointed it."""

    attempt: int
    function_id: int = Field(description="The step's position in the attempt, from 1.")
    name: str
    output: str | None = Field(
        description="What the step returned, as text (cut to 200 characters); an approval "
        "step's gate as `apr_… approved by user:ann via http`."
    )
    error: str | None = Field(description="The step's error message, cut to 200 characters.")
    started_at: datetime | None
    finished_at: datetime | None
    took_ms: int | None
    copied: bool = Field(
        description="True when a later attempt's fork copied the step from the one before: it "
        "did not run again."
    )


class RetryResponse(BaseModel):
    """What a retry did (or, replayed by its key, did the first time)."""

    run_id: str
    attempt: int = Field(description="The attempt the run carries on as.")
    workflow_id: str
    from_step: int
    replayed: bool


class TaskView(BaseModel):
    """A task: a person says whether a write whose outcome is unknown happened."""

    id: str
    run_id: str
    workflow_id: str = Field(description="The attempt that made the call.")
    step_id: int
    op_id: str
    idempotency_key: str = Field(description="The call's key in the ledger.")
    title: str
    status: TaskStatus
    output: Any = Field(description="What the call returned, as the answer gave it.")
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resumed_workflow_id: str | None = Field(description="The attempt the answer resumed.")

    @classmethod
    def of(cls, task: Task) -> TaskView:
        stored = task.as_json()
        return cls.model_validate({name: stored[name] for name in cls.model_fields})


class TaskDetail(TaskView):
    """A task with its audit rows, oldest first."""

    audit: list[AuditEntry]


class ResolutionResponse(BaseModel):
    """What an answer did (or, replayed by its key, did the first time)."""

    replayed: bool
    then: Literal["continue", "retry", "fail"] = Field(
        description="What follows for the call: the run continues with the output, the op is "
        "called again, or the run fails."
    )
    resumed_workflow_id: str | None = Field(
        description="The attempt the run resumes on; null when none waited on the task."
    )
    task: TaskView


class LedgerEntry(BaseModel):
    """One op call in the ledger."""

    id: int
    run_id: str = Field(description="The run, or `call_…` for a direct call.")
    attempt: int
    step_id: int
    op_id: str
    effect: str = Field(description="read or write")
    idempotent: bool
    idempotency_key: str
    status: str
    tries: int
    actor: str
    started_at: datetime
    finished_at: datetime | None
    output: Any
    error: str | None
    cost_usd: str | None = Field(description="What the call cost in USD, as a decimal string.")


class BudgetPeriod(BaseModel):
    """One budget period: its limit, what it spent, what calls in flight reserved, and drift."""

    scope: str = Field(description="`app`, or `workflow:<name>`.")
    period: str = Field(description="e.g. 2026-11, 2026-W48, 2026-11-29")
    limit_usd: str = Field(description="Decimal strings in USD, here and below.")
    spent_usd: str = Field(description="What settled calls cost.")
    reserved_usd: str = Field(description="The most the calls in flight may still cost.")
    left_usd: str = Field(description="The limit less spent and reserved (below 0: over).")
    drift_usd: str = Field(
        description="The counter less the sum of its calls' ledger costs: 0 unless something "
        "wrote one without the other."
    )
    limit_set_by: str | None = Field(description="Who set the limit by hand; null: declared.")
    updated_at: datetime | None


class DeadlineView(BaseModel):
    """One thing due: a run's wake-up, an approval's expiry, or a schedule's next instant."""

    at: datetime
    kind: Literal["wake", "expiry", "schedule"]
    run_id: str = Field(description="The run it concerns; empty for a schedule.")
    target: str = Field(
        description="`<run_id>:<step>` for a sleep, the approval's id for an expiry, the "
        "workflow's name for a schedule."
    )


class WorkerView(BaseModel):
    """One worker of the app."""

    executor_id: str
    state: WorkerState
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    taken_over_by: str | None
    taken_over_at: datetime | None


class DenialView(BaseModel):
    """One act the policies refused."""

    id: str
    at: datetime
    principal: str
    action: str
    resource: str
    context: dict[str, Any]
    reason: str


class Paused(BaseModel):
    """The app paused: its queues take no new work, and runs park before their next step."""

    paused: bool
    queues: list[str] = Field(description="The queues this stopped.")


class Resumed(BaseModel):
    """The app resumed."""

    paused: bool
    queues: list[str] = Field(description="The queues restored.")
    carried_on: list[str] = Field(description="The parked runs carried on.")


class ReconcileAction(BaseModel):
    run_id: str
    workflow_id: str
    status: str
    reason: str
    kind: str


class DriftView(BaseModel):
    scope: str
    period: str
    spent_usd: str
    ledger_usd: str
    drift_usd: str


class ReconcileReport(BaseModel):
    """What one reconciler pass did (or, dry, would do), and what it could not do."""

    dry_run: bool
    actions: list[ReconcileAction]
    errors: list[str]
    drift: list[DriftView] = Field(description="Budget periods whose counter is off the ledger.")


class SecretView(BaseModel):
    """A stored secret: its name, when and by whom it was set. Never its value."""

    name: str
    set_at: datetime
    set_by: str


class SecretDeleted(BaseModel):
    name: str
    deleted: bool


class CallView(BaseModel):
    """What a direct call came to: `ok` or `failed` (made now), or `held` (a run waits at an
    approval before making it)."""

    status: Literal["ok", "failed", "held"]
    op: str
    idempotency_key: str | None = Field(description="The call's key in the ledger.")
    output: Any
    error: str | None
    run_id: str | None = Field(description="A held call's run.")
    note: str = Field(description="A held call's note, from the policy that held it.")
    replayed: bool = Field(description="True when the key had already called: nothing was again.")


class TokenView(BaseModel):
    """An API token, never the token itself."""

    id: str
    principal: str
    name: str
    state: Literal["active", "expired", "revoked"]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None


class TokenMade(BaseModel):
    """A token just made: `token` is shown this once and kept nowhere."""

    token: str = Field(description="Send it as `Authorization: Bearer <token>`.")
    info: TokenView


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
    api = FastAPI(
        title=title or f"remit: {client.app.name}",
        version=version,
        description="A remit app's runs, approvals, tasks, ledger, budgets, secrets, tokens and "
        "controls: the client's verbs, each acting as the principal of the request's API "
        "token under the app's policies. Every route but /health needs `Authorization: Bearer "
        "<API token>` (`remit tokens create`, or POST /tokens).",
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
    routes = APIRouter(dependencies=[Depends(_principal), Depends(_plain_query)])
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

    _run_routes(routes, client)
    _approval_routes(routes, client)
    _task_routes(routes, client)
    _record_routes(routes, client)
    _control_routes(routes, client)
    _secret_routes(routes, client)
    _call_routes(routes, client)
    _token_routes(routes, client)
    _activity_routes(routes, client)

    @routes.get("/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        """The OpenAPI spec of these routes."""
        return api.openapi()

    api.include_router(routes)
    return api


def _run_routes(routes: APIRouter, client: Client) -> None:
    """Runs: list, show, their steps, start, cancel, retry."""

    @routes.get("/runs", responses=_errors(401, 422, 503))
    def list_runs(
        status: Annotated[RunStatus | None, Query(description="Only this status.")] = None,
        workflow: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=_NUL_FREE,
                description="Only this workflow's runs.",
            ),
        ] = None,
        limit: NewestFirst = 50,
    ) -> list[RunView]:
        """List runs, newest first."""
        return [
            RunView.of(run) for run in client.runs(status=status, workflow=workflow, limit=limit)
        ]

    @routes.post("/runs", status_code=201, responses=_errors(400, 401, 403, 404, 422, 503))
    def start_run(body: StartRequest, who: Who) -> RunView:
        """Start a run of a workflow, as the policies allow (`start` on the workflow); a worker
        serving its queue runs it. A workflow the app does not have is 404."""
        record = None if body.record is None else (body.record.type, body.record.id)
        return RunView.of(client.start_row(body.workflow, body.input, by=who, record=record))

    @routes.get("/runs/{run_id}", responses=_errors(400, 401, 404, 422, 503))
    def get_run(run_id: RunId) -> RunView:
        """Show one run, by its id or a prefix only it begins with."""
        return RunView.of(_run(client, run_id))

    @routes.get("/runs/{run_id}/steps", responses=_errors(400, 401, 404, 422, 503))
    def run_steps(run_id: RunId) -> list[StepView]:
        """A run's steps, attempt by attempt, as DBOS checkpointed them (`remit show`)."""
        return _steps(client, _run(client, run_id))

    @routes.post("/runs/{run_id}/cancel", responses=_errors(400, 401, 403, 404, 422, 503))
    def cancel_run(run_id: RunId, who: Who) -> RunView:
        """Cancel a run that has not finished, as the policies allow (`cancel` on its
        workflow); a finished one is left as it is."""
        return RunView.of(client.cancel(_run(client, run_id).run_id, by=who))

    @routes.post("/runs/{run_id}/retry", responses=_errors(400, 401, 403, 404, 409, 422, 503))
    def retry_run(
        run_id: RunId,
        who: Who,
        idempotency_key: OptionalKey = None,
        body: Annotated[RetryRequest | None, Body()] = None,
    ) -> RetryResponse:
        """Retry a failed or cancelled run on the current code, as the policies allow (`retry`
        on its workflow): from `from_step`, or after its last finished step. With an
        Idempotency-Key, the same request again returns the first retry and starts nothing."""
        found = _run(client, run_id)
        retried = client.retry(
            found.run_id,
            from_step=None if body is None else body.from_step,
            key=idempotency_key,
            by=who,
        )
        return RetryResponse(
            run_id=retried.run_id,
            attempt=retried.attempt,
            workflow_id=retried.workflow_id,
            from_step=retried.from_step,
            replayed=retried.replayed,
        )


def _approval_routes(routes: APIRouter, client: Client) -> None:
    """Approvals: list, show, decide one, decide several."""
    approvals = client.approvals

    @routes.get("/approvals", responses=_errors(401, 422, 503))
    def list_approvals(
        status: Annotated[ApprovalStatus | None, Query(description="Only this status.")] = None,
        run: Annotated[
            str | None,
            Query(
                max_length=64, json_schema_extra=_NUL_FREE, description="Only this run's approvals."
            ),
        ] = None,
        limit: NewestFirst = 100,
    ) -> list[ApprovalView]:
        """List approvals, newest first."""
        found = approvals.list(status=status, run_id=run, limit=limit)
        return [ApprovalView.of(each) for each in found]

    @routes.get("/approvals/{approval_id}", responses=_errors(401, 404, 422, 503))
    def get_approval(approval_id: ApprovalId) -> ApprovalDetail:
        """Show one approval with its audit rows."""
        approval = _find(approvals, approval_id)
        audit = [AuditEntry.model_validate(row) for row in approvals.audit(approval.id)]
        return ApprovalDetail.model_validate({**_fields(approval), "audit": audit})

    @routes.post(
        "/approvals/{approval_id}/decision", responses=_errors(400, 401, 403, 404, 409, 422, 503)
    )
    def decide(
        approval_id: ApprovalId,
        body: DecisionRequest,
        who: Who,
        idempotency_key: RequiredKey,
    ) -> DecisionResponse:
        """Approve (with edits to the draft) or reject a pending approval, and resume its run.

        The run resumes on whichever worker serves its queue; this API runs none.
        """
        approval = _find(approvals, approval_id)
        approval_id = approval.id
        edits = body.edits or None
        if edits is not None:
            _check_edits(approvals, {approval_id: (approval, edits)})
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

    @routes.post("/approvals/decisions", responses=_errors(400, 401, 403, 409, 422, 503))
    def decide_many(
        body: DecisionsRequest, who: Who, idempotency_key: RequiredKey
    ) -> DecisionsResponse:
        """Approve or reject several pending approvals at once, all or none, and resume their
        runs. Refused, nothing is decided and every reason is listed: 403 when each is the
        policies', else 409."""
        edits = {approval_id: edit for approval_id, edit in (body.edits or {}).items() if edit}
        found: dict[str, tuple[Approval, Mapping[str, Any]]] = {}
        for approval_id, edit in edits.items():
            # An unknown one: decide() refuses the batch, naming it with every other reason.
            with contextlib.suppress(ApprovalNotFound):
                found[approval_id] = (approvals.get(approval_id), edit)
        _check_edits(approvals, found)
        result = client.decide(
            body.ids,
            body.decision,
            key=idempotency_key,
            edits=edits or None,
            reason=body.reason,
            by=who,
            via="http",
        )
        ids = list(dict.fromkeys(body.ids))
        return DecisionsResponse(
            replayed=result.replayed,
            batch_id=result.batch_id,
            approvals=[ApprovalView.of(approvals.get(approval_id)) for approval_id in ids],
        )


def _task_routes(routes: APIRouter, client: Client) -> None:
    """Tasks: list, show, answer."""
    tasks = client.tasks

    @routes.get("/tasks", responses=_errors(400, 401, 422, 503))
    def list_tasks(
        status: Annotated[TaskStatus | None, Query(description="Only this status.")] = None,
        run: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=_NUL_FREE,
                description="Only this run's tasks (an id or prefix).",
            ),
        ] = None,
        limit: NewestFirst = 100,
    ) -> list[TaskView]:
        """List tasks, newest first."""
        run_id = None if run is None else full_id(client.db, runs_table.c.run_id, run, what="run")
        return [TaskView.of(each) for each in tasks.list(status=status, run_id=run_id, limit=limit)]

    @routes.get("/tasks/{task_id}", responses=_errors(400, 401, 404, 422, 503))
    def get_task(task_id: TaskId) -> TaskDetail:
        """Show one task with its audit rows."""
        task = _task(client, task_id)
        audit = [AuditEntry.model_validate(row) for row in tasks.audit(task.id)]
        return TaskDetail.model_validate({**TaskView.of(task).model_dump(), "audit": audit})

    @routes.post("/tasks/{task_id}/resolution", responses=_errors(400, 401, 404, 409, 422, 503))
    def resolve_task(
        task_id: TaskId, body: ResolutionRequest, who: Who, idempotency_key: OptionalKey = None
    ) -> ResolutionResponse:
        """Say whether a task's call happened, and carry its run on, as the policies allow
        (`resolve` on the op). Refused (by the policies too), it is 409 with every reason."""
        task = _task(client, task_id)
        resolved = client.resolve(
            task.id,
            done=body.done,
            output=body.output,
            key=idempotency_key,
            by=who,
        )
        return ResolutionResponse(
            replayed=resolved.replayed,
            then=resolved.then,
            resumed_workflow_id=resolved.resumed_workflow_id,
            task=TaskView.of(tasks.get(task.id)),
        )


def _record_routes(routes: APIRouter, client: Client) -> None:
    """What the app keeps to read: the ledger, budgets, deadlines, workers, denials, audit."""

    @routes.get("/ledger", responses=_errors(400, 401, 404, 422, 503))
    def ledger(
        run: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=_NUL_FREE,
                description="Only this run's calls, in order (an id or prefix).",
            ),
        ] = None,
        limit: Annotated[int, _limit("one run's in order, else the latest")] = 200,
    ) -> list[LedgerEntry]:
        """Op calls: one run's in order, or the latest."""
        run_id = None if run is None else _run(client, run).run_id
        return [
            LedgerEntry(
                id=row.id,
                run_id=row.run_id,
                attempt=row.attempt,
                step_id=row.step_id,
                op_id=row.op_id,
                effect=row.effect,
                idempotent=row.idempotent,
                idempotency_key=row.idempotency_key,
                status=row.status,
                tries=row.tries,
                actor=row.actor,
                started_at=row.started_at,
                finished_at=row.finished_at,
                output=row.output,
                error=row.error,
                cost_usd=None if row.cost is None else _usd(row.cost),
            )
            for row in client.ledger(run_id, limit=limit)
        ]

    @routes.get("/budgets", responses=_errors(401, 422, 503))
    def budgets(limit: NewestFirst = 50) -> list[BudgetPeriod]:
        """Each budget period: its limit, spent, reserved by calls in flight, what is left, and
        drift."""
        states = client.budgets.periods(limit=limit)
        return _periods(client, states)

    @routes.put("/budgets/{scope}/limit", responses=_errors(400, 401, 403, 404, 422, 503))
    def set_limit(
        scope: Annotated[
            str,
            Path(
                max_length=250,
                json_schema_extra=_NUL_FREE,
                description="`app`, or `workflow:<name>`.",
            ),
        ],
        body: LimitRequest,
        who: Who,
    ) -> BudgetPeriod:
        """Set one budget period's limit, as the policies allow (`set_budget` on the scope).
        Later periods start at the app's declared limit again. A scope the app declares no
        budget for is 404."""
        scopes = sorted({budget.scope for budget in client.app.budgets})
        if scope not in scopes:
            message = (
                f"app `{client.app.name}` declares no budget for scope `{scope}` (it has: "
                f"{', '.join(scopes) or 'none'}): GET /budgets lists the budgets"
            )
            raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        state = client.set_budget(scope, str(body.limit), period=body.period, by=who)
        return _periods(client, [state])[0]

    @routes.get("/deadlines", responses=_errors(401, 422, 503))
    def deadlines(limit: Annotated[int, _limit("earliest first")] = 20) -> list[DeadlineView]:
        """What is due without anyone asking: wake-ups, expiries, schedules."""
        return [
            DeadlineView(at=each.at, kind=each.kind, run_id=each.run_id, target=each.target)
            for each in client.deadlines(limit=limit)
        ]

    @routes.get("/workers", responses=_errors(401, 422, 503))
    def workers(limit: NewestFirst = 100) -> list[WorkerView]:
        """The app's workers: live, dead, stopped, or taken over by another."""
        now = datetime.now(UTC)
        dead_after = timedelta(seconds=client.settings.dead_after)
        return [
            WorkerView(
                executor_id=row.executor_id,
                state=worker_state(row, now=now, dead_after=dead_after),
                host=row.host,
                pid=row.pid,
                version=row.version,
                started_at=row.started_at,
                heartbeat_at=row.heartbeat_at,
                stopped_at=row.stopped_at,
                taken_over_by=row.taken_over_by,
                taken_over_at=row.taken_over_at,
            )
            for row in client.workers()[:limit]
        ]

    @routes.get("/denials", responses=_errors(401, 422, 503))
    def denials(limit: NewestFirst = 100) -> list[DenialView]:
        """What the policies refused, newest first."""
        return [
            DenialView(
                id=each.id,
                at=each.at,
                principal=each.principal,
                action=each.action,
                resource=each.resource,
                context=each.context,
                reason=each.reason,
            )
            for each in client.guard.denials(limit=limit)
        ]

    @routes.get("/audit", responses=_errors(401, 422, 503))
    def audit(
        target: Annotated[
            str,
            Query(
                min_length=1,
                json_schema_extra=_NUL_FREE,
                max_length=200,
                description="What the rows are about: an approval's, task's, run's or token's "
                "id, `app:<name>` or `secret:<NAME>`.",
            ),
        ],
        limit: Annotated[int, _limit("the latest, oldest first")] = 100,
    ) -> list[AuditEntry]:
        """The audit rows about one thing: who did what to it, when."""
        rows = audit_of(client.db, target)
        return [AuditEntry.model_validate(row) for row in rows[-limit:]]


def _control_routes(routes: APIRouter, client: Client) -> None:
    """The app's controls: pause, resume, a reconciler pass."""

    @routes.post("/pause", responses=_errors(400, 401, 403, 422, 503))
    def pause(who: Who) -> Paused:
        """Pause the app, as the policies allow: its queues take no new work, and each run
        parks before its next step."""
        return Paused(paused=True, queues=client.pause(by=who))

    @routes.post("/resume", responses=_errors(400, 401, 403, 422, 503))
    def resume(who: Who) -> Resumed:
        """Resume the app, as the policies allow: its queues again, its parked runs on."""
        queues, carried_on = client.resume(by=who)
        return Resumed(paused=False, queues=queues, carried_on=carried_on)

    @routes.post("/reconcile", responses=_errors(400, 401, 403, 422, 503))
    def reconcile(
        who: Who, body: Annotated[ReconcileRequest | None, Body()] = None
    ) -> ReconcileReport:
        """Run one reconciler pass now, as the policies allow (a dry run says what it would do
        and does none)."""
        report = client.reconcile(dry_run=body is not None and body.dry_run, by=who)
        return ReconcileReport(
            dry_run=report.dry_run,
            actions=[
                ReconcileAction(
                    run_id=a.run_id,
                    workflow_id=a.workflow_id,
                    status=a.status,
                    reason=a.reason,
                    kind=a.kind,
                )
                for a in report.actions
            ],
            errors=list(report.errors),
            drift=[
                DriftView(
                    scope=d.scope,
                    period=d.period,
                    spent_usd=_usd(d.spent_usd),
                    ledger_usd=_usd(d.ledger_usd),
                    drift_usd=_usd(d.drift_usd),
                )
                for d in report.drift
            ],
        )


def _secret_routes(routes: APIRouter, client: Client) -> None:
    """The app's stored credentials: names only, set, delete."""

    @routes.get("/secrets", responses=_errors(401, 422, 503))
    def list_secrets(
        limit: Annotated[int, _limit("by name")] = 100,
    ) -> list[SecretView]:
        """The app's secrets: names, and when and by whom each was set; never values."""
        return [
            SecretView(name=each.name, set_at=each.set_at, set_by=each.set_by)
            for each in client.secrets.list()[:limit]
        ]

    @routes.put("/secrets/{name}", responses=_errors(400, 401, 403, 422, 503))
    def set_secret(name: SecretName, body: SecretRequest, who: Who) -> SecretView:
        """Store a secret (replacing its value), as the policies allow (`set_secret`)."""
        check_name(name)
        info = client.set_secret(name, body.value, by=who)
        return SecretView(name=info.name, set_at=info.set_at, set_by=info.set_by)

    @routes.delete("/secrets/{name}", responses=_errors(400, 401, 403, 404, 422, 503))
    def delete_secret(name: SecretName, who: Who) -> SecretDeleted:
        """Delete a secret, as the policies allow (`delete_secret`)."""
        check_name(name)
        if not client.delete_secret(name, by=who):
            message = f"no secret `{name}`: GET /secrets lists the secrets"
            raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return SecretDeleted(name=name, deleted=True)


def _call_routes(routes: APIRouter, client: Client) -> None:
    """Direct calls of one op, outside any run."""

    @routes.post("/calls", responses=_errors(400, 401, 403, 404, 422, 503))
    def call(body: CallRequest, who: Who, idempotency_key: CallKey = None) -> CallView:
        """Call one op directly, outside any run, as the policies allow (`call` on the op); a
        policy may hold it for an approval, and a run then waits to make it. An op the app
        does not have is 404."""
        if body.op not in client.app.ops:
            known = sorted(client.app.ops)
            shown = ", ".join(known[:30]) + (", …" if len(known) > 30 else "")
            message = f"app `{client.app.name}` has no op `{body.op}` (it has: {shown or 'none'})"
            raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        result = client.call(body.op, body.input, key=idempotency_key, by=who)
        return CallView(
            status=result.status,
            op=result.op,
            idempotency_key=result.idempotency_key,
            output=result.output,
            error=result.error,
            run_id=result.run_id,
            note=result.note,
            replayed=result.replayed,
        )


def _token_routes(routes: APIRouter, client: Client) -> None:
    """The app's API tokens: list, make, revoke."""

    @routes.get("/tokens", responses=_errors(400, 401, 403, 422, 503))
    def list_tokens(who: Who, limit: NewestFirst = 100) -> list[TokenView]:
        """The app's API tokens, newest first, as the policies allow (`manage_tokens`)."""
        now = client.clock.now()
        return [_token(each, now) for each in client.list_tokens(by=who)[:limit]]

    @routes.post("/tokens", status_code=201, responses=_errors(400, 401, 403, 422, 503))
    def create_token(body: TokenRequest, who: Who) -> TokenMade:
        """Make an API token that acts as `for`, as the policies allow (`manage_tokens`). The
        token is in this answer only: it is kept nowhere."""
        expires_in = None if body.expires is None else _duration(body.expires)
        info, token = client.create_token(body.for_, name=body.name, expires_in=expires_in, by=who)
        return TokenMade(token=token, info=_token(info, client.clock.now()))

    @routes.delete("/tokens/{token_id}", responses=_errors(400, 401, 403, 404, 422, 503))
    def revoke_token(
        token_id: Annotated[
            str,
            Path(max_length=100, json_schema_extra=_NUL_FREE, description="The token's id, tok_…."),
        ],
        who: Who,
    ) -> TokenView:
        """Revoke an API token, as the policies allow (`manage_tokens`): it authenticates
        nothing from now on. Revoking one already revoked changes nothing."""
        try:
            client.tokens.get(token_id)
        except RemitError:
            message = f"no token `{token_id}`: GET /tokens lists the tokens"
            raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return _token(client.revoke_token(token_id, by=who), client.clock.now())


class ActivityView(BaseModel):
    """One thing that happened about a business record."""

    id: int = Field(description="The row's number: pass it as `after` for the rows after it.")
    record_type: str
    record_id: str
    at: datetime
    kind: str = Field(description="run.started, approval.approved, task.done, record.archived, ...")
    actor: str
    run_id: str | None
    target: str | None = Field(description="The approval or task it is about.")
    summary: str
    meta: dict[str, Any]


class ArchiveRequest(_Body):
    """An archive of a record: its pending gates are cancelled."""

    noun: ClassVar[str] = "an archive"
    made: ClassVar[str] = "the record is archived"

    reason: str | None = Field(
        default=None, max_length=10_000, json_schema_extra=_NUL_FREE, description="Why."
    )


class ArchivedView(BaseModel):
    """What an archive did: the gates it cancelled (none when none was pending)."""

    record_type: str
    record_id: str
    cancelled: list[str] = Field(description="The approvals cancelled.")
    replayed: bool


RecordPart = Annotated[
    str, Path(min_length=1, max_length=200, json_schema_extra=_NUL_FREE, description="")
]


def _activity_routes(routes: APIRouter, client: Client) -> None:
    """A business record's timeline, and archiving it."""

    @routes.get(
        "/records/{record_type}/{record_id}/activity", responses=_errors(400, 401, 422, 503)
    )
    def activity(
        record_type: RecordPart,
        record_id: RecordPart,
        limit: Annotated[int, _limit("oldest first")] = 100,
        after: Annotated[
            int | None, Query(ge=0, description="Only the rows after this one.")
        ] = None,
    ) -> list[ActivityView]:
        """What happened about a record, oldest first: its runs, gates and tasks."""
        found = client.activity(record_type, record_id, limit=limit, after=after)
        return [ActivityView.model_validate(each.as_json()) for each in found]

    @routes.post(
        "/records/{record_type}/{record_id}/archive",
        responses=_errors(400, 401, 403, 409, 422, 503),
    )
    def archive(
        record_type: RecordPart, record_id: RecordPart, body: ArchiveRequest, who: Who
    ) -> ArchivedView:
        """Archive a record: cancel its pending gates, as one decision the policies check."""
        done = client.archive_record(record_type, record_id, by=who, reason=body.reason)
        return ArchivedView(
            record_type=done.record_type,
            record_id=done.record_id,
            cancelled=[each.approval_id for each in done.cancelled],
            replayed=done.replayed,
        )


def _host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `localhost:8080` is `localhost`,
    `[::1]:8080` is `[::1]`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _texts(value: Any) -> list[str]:
    """A body field's text: itself if a string, its strings if a list (the JSON objects a body
    carries, a run's input say, are kept as JSON, where a NUL is written as `\\u0000`)."""
    if isinstance(value, str):
        return [value]
    return [each for each in value if isinstance(each, str)] if isinstance(value, list) else []


def _fields(approval: Approval) -> dict[str, Any]:
    stored = approval.as_json()  # the drafts as JSON
    return {name: stored[name] for name in ApprovalView.model_fields}


def _find(approvals: Approvals, approval_id: str) -> Approval:
    """The approval `approval_id` names, in full or by a prefix only it begins with; 404 for
    none, 400 for a prefix several begin with."""
    try:
        return approvals.get(
            full_id(approvals.db, approvals_table.c.id, approval_id, what="approval")
        )
    except ApprovalNotFound:
        message = f"no approval `{approval_id}`: GET /approvals lists the approvals"
        raise _Problem(404, message, [ErrorReason(approval_id=approval_id, reason=message)])


def _run(client: Client, given: str) -> Run:
    """The run `given` names, in full or by a prefix only it begins with; 404 for none, 400
    for a prefix several begin with."""
    run_id = full_id(client.db, runs_table.c.run_id, given, what="run")
    try:
        return client.get_run(run_id)
    except RunNotFound:
        message = f"no run `{given}`: GET /runs lists the runs"
        raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])


def _task(client: Client, given: str) -> Task:
    """The task `given` names, in full or by a prefix only it begins with; 404 for none."""
    task_id = full_id(client.db, tasks_table.c.id, given, what="task")
    try:
        return client.tasks.get(task_id)
    except TaskNotFound:
        message = f"no task `{given}`: GET /tasks lists the tasks"
        raise _Problem(404, message, [ErrorReason(approval_id=None, reason=message)])


def _token(info: TokenInfo, now: datetime) -> TokenView:
    return TokenView(
        id=info.id,
        principal=info.principal,
        name=info.name,
        state=info.state(now),
        created_at=info.created_at,
        created_by=info.created_by,
        expires_at=info.expires_at,
        revoked_at=info.revoked_at,
        revoked_by=info.revoked_by,
    )


def _duration(text: str) -> timedelta:
    """A token's `expires` as a duration; 422 naming the form otherwise."""
    if not _DURATION_FORM.fullmatch(text):
        message = (
            f"`expires` {text!r} is not a duration a token may last: give a whole number and a "
            "unit, m, h, d or w, of at most 999999d (e.g. 30d, 12h)"
        )
        raise _Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
    return parse_duration(text)


def _periods(client: Client, states: Sequence[PeriodState]) -> list[BudgetPeriod]:
    """Budget periods as the API shows them, each with its drift."""
    drift = {(d.scope, d.period): d.drift_usd for d in client.budgets.drift(states)}
    return [
        BudgetPeriod(
            scope=state.scope,
            period=state.period,
            limit_usd=_usd(state.limit_usd),
            spent_usd=_usd(state.spent_usd),
            reserved_usd=_usd(state.reserved_usd),
            left_usd=_usd(state.limit_usd - state.spent_usd - state.reserved_usd),
            drift_usd=_usd(drift.get((state.scope, state.period), Decimal(0))),
            limit_set_by=state.limit_set_by,
            updated_at=state.updated_at,
        )
        for state in states
    ]


def _usd(value: Decimal) -> str:
    """An amount in USD as a decimal string: to the cent (`5.00`), or every digit that
    matters (`0.000123`)."""
    if value == value.quantize(Decimal("0.01")):
        return f"{value:.2f}"
    return f"{value.normalize():f}"


def _steps(client: Client, run: Run) -> list[StepView]:
    """A run's steps, attempt by attempt, as `remit show` reads them from DBOS."""
    shown: list[StepView] = []
    earlier: dict[int, Any] = {}
    for attempt in range(1, run.attempt + 1):
        for step in client.dbos.list_workflow_steps(attempt_workflow_id(run.run_id, attempt)):
            started, finished = step["started_at_epoch_ms"], step["completed_at_epoch_ms"]
            before = earlier.get(step["function_id"])
            copied = before is not None and (before["started_at_epoch_ms"], before["output"]) == (
                started,
                step["output"],
            )
            earlier[step["function_id"]] = step
            output, error = _outcome(step["function_name"], step["output"], step["error"])
            shown.append(
                StepView(
                    attempt=attempt,
                    function_id=step["function_id"],
                    name=step["function_name"],
                    output=output,
                    error=error,
                    started_at=_moment(started),
                    finished_at=_moment(finished),
                    took_ms=None if started is None or finished is None else finished - started,
                    copied=copied,
                )
            )
    return shown


def _outcome(name: str, output: Any, error: Any) -> tuple[str | None, str | None]:
    """A step's result as a person reads it: its value, or its error's message."""
    if error is not None:
        return None, _short(str(error))
    if isinstance(output, dict) and isinstance(output.get("error"), dict):
        return None, _short(output["error"].get("message", output["error"]))
    if isinstance(output, dict) and "error" in output:
        return None, _short(output["error"])
    if name.startswith("approval:") and isinstance(output, dict):
        text = f"{output.get('id')} {output.get('status')}"
        if output.get("decided_by"):
            text += f" by {output['decided_by']} via {output.get('decided_via')}"
        if output.get("edited_draft") is not None:
            text += " (edited)"
        return text, None
    if isinstance(output, dict) and "ok" in output:
        return _short(output["ok"]), None
    return (None if output is None else _short(output)), None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _SUMMARY else text[: _SUMMARY - 1] + "…"


def _moment(epoch_ms: int | None) -> datetime | None:
    return None if epoch_ms is None else datetime.fromtimestamp(epoch_ms / 1000, UTC)


def _check_edits(
    approvals: Approvals, edited: Mapping[str, tuple[Approval, Mapping[str, Any]]]
) -> None:
    """Refuse edits to pending approvals' drafts that name no field of their model or do not
    parse against it, as a request to fix (422), naming each approval and field. `decide()`
    checks them again as it writes."""
    reasons: list[ErrorReason] = []
    names: list[str] = []
    for approval_id, (approval, edits) in edited.items():
        found = _edit_problems(approvals, approval, edits)
        if found:
            declared = approvals.types[approval.type].draft.__name__
            names.append(f"the edits to approval {approval_id} do not fit its draft ({declared})")
            reasons += [ErrorReason(approval_id=approval_id, reason=each) for each in found]
    if reasons:
        raise _Problem(422, f"{'; '.join(names)}: {'; '.join(r.reason for r in reasons)}", reasons)


def _edit_problems(approvals: Approvals, approval: Approval, edits: Mapping[str, Any]) -> list[str]:
    """What is wrong with `edits` to a pending approval's draft, one problem per field."""
    declared = approvals.types.get(approval.type)
    if declared is None or approval.status != "pending":
        return []  # decide() refuses the decision, with its reason
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
    return reasons


# The route that lists each kind of thing an id may name and find nothing.
_LISTED: dict[type[RemitError], str] = {
    RunNotFound: "GET /runs lists the runs",
    TaskNotFound: "GET /tasks lists the tasks",
    ApprovalNotFound: "GET /approvals lists the approvals",
}


async def _error_response(request: Request, error: Exception) -> JSONResponse:
    """Every error as `ErrorBody`, with the status that says what the caller can do."""
    approval_id = request.path_params.get("approval_id")
    status = 400
    headers: Mapping[str, str] | None = None
    reasons: list[ErrorReason] = []
    if isinstance(error, _Problem):
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
    elif isinstance(error, RetryRefused):
        status, message = 409, str(error)
        reasons = [ErrorReason(approval_id=None, reason=message)]
    elif isinstance(error, InputInvalid):
        status, message = 422, str(error)
        reasons = [
            ErrorReason(
                approval_id=None,
                reason=f"input.{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}",
            )
            for e in error.errors
        ]
    elif isinstance(error, UnknownWorkflow):
        status, message = 404, str(error)
    elif isinstance(error, RunNotFound | TaskNotFound | ApprovalNotFound):
        # The error names the id (`no run `x`: ...`); the route that lists them follows.
        status = 404
        message = f"{str(error).split(':', 1)[0]}: {_LISTED[type(error)]}"
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
    request: Request, error: RequestValidationError, approval_id: str | None
) -> tuple[int, str, list[ErrorReason]]:
    """A request that does not parse: 400 for a missing or bad Idempotency-Key, else 422."""
    body = _body_model(request)
    problems = [_problem(each, body) for each in error.errors()]
    reasons = [ErrorReason(approval_id=approval_id, reason=problem) for problem in problems]
    if any(each["loc"][:1] == ("header",) for each in error.errors()):
        return 400, _KEY_HINT, reasons
    return 422, f"the request does not parse: {'; '.join(problems)}", reasons


def _body_model(request: Request) -> type[_Body] | None:
    """The model of the body the request's route takes, if it takes one."""
    route = request.scope.get("route")
    field = route.body_field if isinstance(route, APIRoute) else None
    if field is None:
        return None
    annotation = field.field_info.annotation
    for kind in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(kind, type) and issubclass(kind, _Body):
            return kind
    return None


def _problem(error: Mapping[str, Any], body: type[_Body] | None) -> str:
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

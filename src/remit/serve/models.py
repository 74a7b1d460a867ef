"""What the HTTP API takes and answers: the forms of its parameters, its request bodies (a field
a body does not name is refused, and none says who acts), its responses, and its one error
shape, `ErrorBody`. `serve/api.py` builds the routes on them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from fastapi import Path
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from remit.budgets.model import PeriodState
from remit.core.ledger import LedgerRow
from remit.core.runs import Run, RunStatus
from remit.ops.registry import WorkerRow, WorkerState
from remit.ops.registry import state as worker_state
from remit.ops.runs import Step
from remit.people.approvals import Approval, ApprovalStatus
from remit.people.tasks import Task, TaskStatus
from remit.policy.tokens import TokenInfo
from remit.serve.params import (
    AMOUNT_FORM,
    DURATION_FORM,
    MAX_LIMIT,
    NUL_FREE,
    PRINCIPAL_FORM,
    SUMMARY,
)

# Request bodies.


class RequestBody(BaseModel):
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
            if any("\x00" in each for each in texts_of(value))
        ]
        if found:
            raise ValueError(
                f"{', '.join(found)} holds a NUL character (\\u0000), which no text the "
                "database keeps may hold: remove it"
            )
        return data


class _Decision(RequestBody):
    """What every decision says: approved or rejected, and why; edits go with an approval."""

    noun: ClassVar[str] = "a decision"
    made: ClassVar[str] = "the decision is made"

    decision: Literal["approved", "rejected"]
    reason: str | None = Field(
        default=None,
        max_length=10_000,
        json_schema_extra=NUL_FREE,
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


class WithdrawRequest(RequestBody):
    """A gate withdrawn by whoever asked for it, and why."""

    noun: ClassVar[str] = "a withdrawal"
    made: ClassVar[str] = "the gate is withdrawn"

    reason: str | None = Field(
        default=None,
        max_length=10_000,
        json_schema_extra=NUL_FREE,
        description="Why, kept with it.",
    )


class DecisionsRequest(_Decision):
    """One decision on several approvals: all of them are decided, or none is."""

    ids: list[Annotated[str, Field(min_length=1, max_length=200, json_schema_extra=NUL_FREE)]] = (
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


class RecordRef(RequestBody):
    """A business record: its type and id."""

    noun: ClassVar[str] = "a record"
    made: ClassVar[str] = "the record is named"

    type: str = Field(min_length=1, max_length=100, json_schema_extra=NUL_FREE)
    id: str = Field(min_length=1, max_length=200, json_schema_extra=NUL_FREE)


class StartRequest(RequestBody):
    """A run to start."""

    noun: ClassVar[str] = "a start"
    made: ClassVar[str] = "the run is started"

    workflow: str = Field(
        min_length=1,
        max_length=200,
        json_schema_extra=NUL_FREE,
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


class RetryRequest(RequestBody):
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


class ResolutionRequest(RequestBody):
    """A task's answer: whether its call happened."""

    noun: ClassVar[str] = "a task's answer"
    made: ClassVar[str] = "the task is answered"

    done: bool = Field(description="True: the call happened; false: it did not.")
    output: dict[str, Any] | None = Field(
        default=None,
        description="With done, what the call returned, checked against the op's output model.",
    )


class LimitRequest(RequestBody):
    """A budget period's new limit."""

    noun: ClassVar[str] = "a budget limit"
    made: ClassVar[str] = "the limit is set"

    limit: Annotated[
        Decimal,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "number", "minimum": 0, "maximum": 99_999_999_999},
                    {"type": "string", "pattern": AMOUNT_FORM.pattern},
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
        json_schema_extra=NUL_FREE,
        max_length=20,
        description="The period, e.g. 2026-11, 2026-W48 or 2026-11-29; default: the current one.",
    )

    @field_validator("limit", mode="before")
    @classmethod
    def _amount(cls, value: object) -> object:
        if isinstance(value, bool) or (isinstance(value, str) and not AMOUNT_FORM.fullmatch(value)):
            raise ValueError(
                f"{value!r} is not an amount in USD: give a number, or a decimal string of at "
                "most 11 digits and 6 places, e.g. 75.50"
            )
        return value


class ReconcileRequest(RequestBody):
    """A reconciler pass."""

    noun: ClassVar[str] = "a reconciler pass"
    made: ClassVar[str] = "the pass is run"

    dry_run: bool = Field(default=False, description="Say what the pass would do, and do none.")


class SecretRequest(RequestBody):
    """A secret's new value."""

    noun: ClassVar[str] = "a secret"
    made: ClassVar[str] = "the secret is set"

    value: str = Field(
        min_length=1,
        max_length=65_536,
        json_schema_extra=NUL_FREE,
        description="The value, kept encrypted.",
    )


class CallRequest(RequestBody):
    """A direct call of one op."""

    noun: ClassVar[str] = "a call"
    made: ClassVar[str] = "the call is made"

    op: str = Field(
        min_length=1,
        max_length=300,
        json_schema_extra=NUL_FREE,
        description="The op, e.g. shop.items.get.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="The op's input, parsed against its model."
    )


class TokenRequest(RequestBody):
    """An API token to make."""

    noun: ClassVar[str] = "a token"
    made: ClassVar[str] = "the token is made"

    for_: str = Field(
        alias="for",
        max_length=200,
        json_schema_extra={"pattern": PRINCIPAL_FORM.pattern},
        description="Who the token acts as: user:<name> or agent:<name>.",
    )
    name: str = Field(
        default="",
        max_length=100,
        json_schema_extra=NUL_FREE,
        description="What it is for, to tell it by.",
    )
    expires: str | None = Field(
        default=None,
        max_length=20,
        json_schema_extra={"pattern": DURATION_FORM.pattern},
        description="How long it lasts: a whole number and m, h, d or w (30d), of at most "
        "999999d; default: until revoked.",
    )

    @field_validator("for_")
    @classmethod
    def _principal_form(cls, value: str) -> str:
        if not PRINCIPAL_FORM.fullmatch(value):
            raise ValueError(
                "give who the token acts as: user:<name> or agent:<name> (letters, digits and "
                ". _ @ + -), e.g. user:ann"
            )
        return value


# Responses.


class Health(BaseModel):
    ok: bool


class Woken(BaseModel):
    """What the worker was doing when `GET /wake` arrived: `stopped` (it starts now),
    `starting`, `running` or `stopping` (it starts again once stopped)."""

    worker: str


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
    editable: list[str] | None = Field(
        description="The draft's fields a decider may change; an edit changing any other is "
        "refused. Null when this server does not declare the approval type."
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
        return cls.model_validate(approval_fields(approval))


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

    @classmethod
    def of(cls, step: Step) -> StepView:
        """A step as `remit show` shows it, its output or error cut to `SUMMARY` characters."""
        started, finished = step.started_ms, step.finished_ms
        output, error = step.summary(width=SUMMARY)
        return cls(
            attempt=step.attempt,
            function_id=step.function_id,
            name=step.name,
            output=output,
            error=error,
            started_at=_moment(started),
            finished_at=_moment(finished),
            took_ms=None if started is None or finished is None else finished - started,
            copied=step.copied,
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
    input: Any = Field(
        default=None,
        description="What the call was sent, its secrets redacted (null: not kept, for a "
        "call made before remit kept it).",
    )
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


class EarlierTryView(BaseModel):
    """An outcome of an op call that its ledger row no longer holds."""

    run_id: str
    attempt: int
    actor: str = Field(description="Who made the call then.")
    try_number: int = Field(description="Which try of that attempt's call.")
    status: str = Field(description="`failed` (refused), or the row's status then.")
    error: str | None = Field(description="What the vendor or the driver said.")
    at: datetime


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
    earlier: list[EarlierTryView] = Field(
        default_factory=list,
        description="The outcomes before this one, oldest first: each try the vendor refused "
        "before the call was tried again, and what an earlier attempt left before it was made "
        "again under its key.",
    )

    @classmethod
    def of(cls, row: LedgerRow) -> LedgerEntry:
        """A ledger row as the API shows it: its cost a decimal string, its input hash left out."""
        fields = {name: getattr(row, name) for name in cls.model_fields if name != "cost_usd"}
        earlier = [EarlierTryView.model_validate(each.__dict__) for each in row.earlier]
        cost = None if row.cost is None else usd_text(row.cost)
        return cls.model_validate({**fields, "cost_usd": cost, "earlier": earlier})


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

    @classmethod
    def of(cls, state: PeriodState, drift: Decimal) -> BudgetPeriod:
        """A budget period as the API shows it, with its drift."""
        return cls(
            scope=state.scope,
            period=state.period,
            limit_usd=usd_text(state.limit_usd),
            spent_usd=usd_text(state.spent_usd),
            reserved_usd=usd_text(state.reserved_usd),
            left_usd=usd_text(state.limit_usd - state.spent_usd - state.reserved_usd),
            drift_usd=usd_text(drift),
            limit_set_by=state.limit_set_by,
            updated_at=state.updated_at,
        )


class DeadlineView(BaseModel):
    """One thing due: a run's wake-up, an approval's expiry, the timeout of a run's wait for a
    message, or a schedule's next instant."""

    at: datetime
    kind: Literal["wake", "expiry", "message", "schedule"]
    run_id: str = Field(description="The run it concerns; empty for a schedule.")
    target: str = Field(
        description="`<run_id>:<step>` for a sleep, the approval's id for an expiry, the topic "
        "for a wait for a message, the workflow's name for a schedule."
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

    @classmethod
    def of(cls, row: WorkerRow, *, now: datetime, dead_after: timedelta) -> WorkerView:
        """A worker as the API shows it: its state as seen at `now`."""
        state = worker_state(row, now=now, dead_after=dead_after)
        return cls.model_validate({**row.__dict__, "state": state})


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

    @classmethod
    def of(cls, info: TokenInfo, now: datetime) -> TokenView:
        return cls(
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


class TokenMade(BaseModel):
    """A token just made: `token` is shown this once and kept nowhere."""

    token: str = Field(description="Send it as `Authorization: Bearer <token>`.")
    info: TokenView


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


class ArchiveRequest(RequestBody):
    """An archive of a record: its pending gates are cancelled."""

    noun: ClassVar[str] = "an archive"
    made: ClassVar[str] = "the record is archived"

    reason: str | None = Field(
        default=None, max_length=10_000, json_schema_extra=NUL_FREE, description="Why."
    )


class ArchivedView(BaseModel):
    """What an archive did: the gates it cancelled (none when none was pending)."""

    record_type: str
    record_id: str
    cancelled: list[str] = Field(description="The approvals cancelled.")
    replayed: bool


RecordPart = Annotated[
    str, Path(min_length=1, max_length=200, json_schema_extra=NUL_FREE, description="")
]


def texts_of(value: Any) -> list[str]:
    """A body field's text: itself if a string, its strings if a list (the JSON objects a body
    carries, a run's input say, are kept as JSON, where a NUL is written as `\\u0000`)."""
    if isinstance(value, str):
        return [value]
    return [each for each in value if isinstance(each, str)] if isinstance(value, list) else []


def approval_fields(approval: Approval) -> dict[str, Any]:
    stored = {**approval.as_json(), "editable": approval.editable}  # the drafts as JSON
    return {name: stored[name] for name in ApprovalView.model_fields}


def usd_text(value: Decimal) -> str:
    """An amount in USD as a decimal string: to the cent (`5.00`), or every digit that
    matters (`0.000123`)."""
    if value == value.quantize(Decimal("0.01")):
        return f"{value:.2f}"
    return f"{value.normalize():f}"


def _moment(epoch_ms: int | None) -> datetime | None:
    return None if epoch_ms is None else datetime.fromtimestamp(epoch_ms / 1000, UTC)

"""The HTTP API's routes, each acting as the principal of the request's API token through the
client's verb for it. `router(client)` is every route but `/health`, behind the token: those of
runs, approvals, tasks and records here, a run's messages, state and children in
`message_routes.py`, those that run the app in `operation_routes.py`."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query
from pydantic import ValidationError

from remit.client import Client
from remit.core.audit import audit_of
from remit.core.errors import ApprovalNotFound, RemitError, TaskNotFound
from remit.core.filters import record_filter, since_filter
from remit.core.runs import RunStatus
from remit.core.text import PROBLEMS, excerpt, listed
from remit.people.activity import LAST_ROW
from remit.people.approvals import Approval, Approvals, ApprovalStatus, check_decision
from remit.people.tasks import Task, TaskStatus
from remit.policy.refusals import read_only_changes, read_only_refusal
from remit.reads import Reader
from remit.serve.errors import ErrorReason, Problem, error_responses
from remit.serve.lookups import find_run, readable_run
from remit.serve.message_routes import RunDetail, message_routes, run_detail
from remit.serve.models import (
    ActivityView,
    ApprovalDetail,
    ApprovalView,
    ArchivedView,
    ArchiveRequest,
    AuditEntry,
    BudgetPeriod,
    DeadlineView,
    DecisionRequest,
    DecisionResponse,
    DecisionsRequest,
    DecisionsResponse,
    DenialView,
    LedgerEntry,
    LimitRequest,
    RecordPart,
    ResolutionRequest,
    ResolutionResponse,
    RetryRequest,
    RetryResponse,
    RunView,
    StartRequest,
    StepView,
    TaskDetail,
    TaskView,
    WithdrawRequest,
    WorkerView,
    approval_fields,
)
from remit.serve.operation_routes import call_routes, control_routes, secret_routes, token_routes
from remit.serve.params import (
    NUL_FREE,
    ApprovalId,
    NewestFirst,
    OptionalKey,
    RequiredKey,
    RunId,
    TaskId,
    limit_query,
)
from remit.serve.requests import Who, plain_query, principal
from remit.serve.schedule_routes import schedule_routes


def router(client: Client) -> APIRouter:
    """Every route of the API but `/health` and the spec, each needing an API token."""
    routes = APIRouter(dependencies=[Depends(principal), Depends(plain_query)])
    _run_routes(routes, client)
    message_routes(routes, client)
    _approval_routes(routes, client)
    _task_routes(routes, client)
    _record_routes(routes, client)
    control_routes(routes, client)
    secret_routes(routes, client)
    call_routes(routes, client)
    token_routes(routes, client)
    _activity_routes(routes, client)
    schedule_routes(routes, client)
    return routes


def _run_routes(routes: APIRouter, client: Client) -> None:
    """Runs: list, show, their steps, start, cancel, retry."""

    @routes.get("/runs", responses=error_responses(401, 422, 503))
    def list_runs(
        who: Who,
        status: Annotated[RunStatus | None, Query(description="Only this status.")] = None,
        workflow: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only this workflow's runs.",
            ),
        ] = None,
        record: Annotated[
            str | None,
            Query(
                max_length=301,
                json_schema_extra=NUL_FREE,
                description="Only the runs about this record, as `type:id` (invoice:inv_1003).",
            ),
        ] = None,
        started_by: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only the runs this principal started (user:ann, remit:schedule).",
            ),
        ] = None,
        since: Annotated[
            str | None,
            Query(
                max_length=50,
                json_schema_extra=NUL_FREE,
                description="Only the runs started then or later: an ISO date or time (UTC "
                "unless it names a zone), or how long ago (30m, 2h, 3d, 1w).",
            ),
        ] = None,
        limit: NewestFirst = 50,
        parent: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only the runs this run started as its children (an id or prefix).",
            ),
        ] = None,
    ) -> list[RunView]:
        """List runs, newest first: those the policies let the token's principal read
        (`read_runs` on each workflow)."""
        try:
            about = None if record is None else record_filter(record, where="record")
            after = (
                None
                if since is None
                else since_filter(since, now=client.clock.now(), where="since")
            )
        except RemitError as error:
            raise Problem(422, str(error), [ErrorReason(approval_id=None, reason=str(error))])
        reader = Reader(client, who)
        found = reader.runs(
            status=status,
            workflow=workflow,
            record=about,
            started_by=started_by,
            since=after,
            parent=None if parent is None else reader.find_id("run", parent),
            limit=limit,
        )
        return [RunView.of(run) for run in found]

    @routes.post(
        "/runs",
        status_code=201,
        responses=error_responses(400, 401, 403, 404, 413, 422, 503),
    )
    def start_run(body: StartRequest, who: Who, idempotency_key: OptionalKey = None) -> RunView:
        """Start a run of a workflow, as the policies allow (`start` on the workflow); a worker
        serving its queue runs it. A workflow the app does not have is 404. With an
        Idempotency-Key, the same request again answers with the run the first one started
        and starts nothing; the key sent with another workflow or input is 422."""
        record = None if body.record is None else (body.record.type, body.record.id)
        started = client.runs.start_row(
            body.workflow, body.input, by=who, record=record, key=idempotency_key
        )
        return RunView.of(started)

    @routes.get("/runs/{run_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def get_run(run_id: RunId, who: Who) -> RunDetail:
        """Show one run, by its id or a prefix only it begins with, with the run that started
        it (if one did) and what it waits for, as the policies allow (`read_runs` on its
        workflow)."""
        return run_detail(client, readable_run(client, who, run_id))

    @routes.get("/runs/{run_id}/steps", responses=error_responses(400, 401, 403, 404, 422, 503))
    def run_steps(run_id: RunId, who: Who) -> list[StepView]:
        """A run's steps, attempt by attempt, as DBOS checkpointed them (`remit show`), as the
        policies allow (`read_runs` on its workflow)."""
        found = readable_run(client, who, run_id)
        return [StepView.of(step) for step in client.runs.steps(found.run_id)]

    @routes.post(
        "/runs/{run_id}/cancel", responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def cancel_run(run_id: RunId, who: Who) -> RunView:
        """Cancel a run that has not finished, as the policies allow (`cancel` on its
        workflow); a finished one is left as it is."""
        return RunView.of(client.runs.cancel(find_run(client, run_id).run_id, by=who))

    @routes.post(
        "/runs/{run_id}/retry", responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503)
    )
    def retry_run(
        run_id: RunId,
        who: Who,
        idempotency_key: OptionalKey = None,
        body: Annotated[RetryRequest | None, Body()] = None,
    ) -> RetryResponse:
        """Retry a failed or cancelled run on the current code, as the policies allow (`retry`
        on its workflow): from `from_step`, or after its last finished step. With an
        Idempotency-Key, the same request again returns the first retry and starts nothing."""
        found = find_run(client, run_id)
        retried = client.runs.retry(
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
    """Approvals: list, show, decide one, decide several, withdraw one."""
    approvals = client.services.approvals

    @routes.get("/approvals", responses=error_responses(401, 422, 503))
    def list_approvals(
        who: Who,
        status: Annotated[ApprovalStatus | None, Query(description="Only this status.")] = None,
        run: Annotated[
            str | None,
            Query(
                max_length=64, json_schema_extra=NUL_FREE, description="Only this run's approvals."
            ),
        ] = None,
        limit: NewestFirst = 100,
    ) -> list[ApprovalView]:
        """List approvals, newest first: those the policies let the token's principal read
        (`read_approvals` on each approval type)."""
        found = Reader(client, who).approvals(status=status, run_id=run, limit=limit)
        return [ApprovalView.of(each) for each in found]

    @routes.get("/approvals/{approval_id}", responses=error_responses(401, 403, 404, 422, 503))
    def get_approval(approval_id: ApprovalId, who: Who) -> ApprovalDetail:
        """Show one approval with its audit rows, as the policies allow (`read_approvals` on
        its type)."""
        reader = Reader(client, who)
        approval = reader.approval(_find(client, approval_id, reader).id)
        audit = [AuditEntry.model_validate(row) for row in approvals.audit(approval.id)]
        return ApprovalDetail.model_validate({**approval_fields(approval), "audit": audit})

    @routes.post(
        "/approvals/{approval_id}/decision",
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
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
        approval = _find(client, approval_id)
        approval_id = approval.id
        edits = body.edits or None
        check_decision([approval_id], None if edits is None else {approval_id: edits}, body.reason)
        if edits is not None:
            _check_edits(approvals, {approval_id: (approval, edits)})
        result = client.approvals.decide(
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

    @routes.post(
        "/approvals/{approval_id}/withdraw",
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def withdraw(
        approval_id: ApprovalId,
        who: Who,
        idempotency_key: OptionalKey = None,
        body: Annotated[WithdrawRequest | None, Body()] = None,
    ) -> DecisionResponse:
        """Withdraw a pending approval as whoever asked for it, as the policies allow
        (`withdraw` on its type, told who started the run), and resume its run, which reads
        the gate as `withdrawn`. 409 when it is no longer pending (a withdrawn gate is decided
        by no one after). With an Idempotency-Key, the same request again returns the first
        result."""
        approval_id = _find(client, approval_id).id
        reason = None if body is None else body.reason
        check_decision([approval_id], None, reason)
        result = client.approvals.withdraw(
            approval_id, key=idempotency_key, reason=reason, by=who, via="http"
        )
        return DecisionResponse(
            replayed=result.replayed, approval=ApprovalView.of(approvals.get(approval_id))
        )

    @routes.post(
        "/approvals/decisions", responses=error_responses(400, 401, 403, 409, 413, 422, 503)
    )
    def decide_many(
        body: DecisionsRequest, who: Who, idempotency_key: RequiredKey
    ) -> DecisionsResponse:
        """Approve or reject several pending approvals at once, all or none, and resume their
        runs. Refused, nothing is decided and every reason is listed: 403 when each is the
        policies', else 409."""
        edits = {approval_id: edit for approval_id, edit in (body.edits or {}).items() if edit}
        check_decision(body.ids, edits, body.reason)
        found: dict[str, tuple[Approval, Mapping[str, Any]]] = {}
        for approval_id, edit in edits.items():
            # An unknown one: decide() refuses the batch, naming it with every other reason.
            with contextlib.suppress(ApprovalNotFound):
                found[approval_id] = (approvals.get(approval_id), edit)
        _check_edits(approvals, found)
        result = client.approvals.decide(
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
    tasks = client.services.tasks

    @routes.get("/tasks", responses=error_responses(400, 401, 422, 503))
    def list_tasks(
        who: Who,
        status: Annotated[TaskStatus | None, Query(description="Only this status.")] = None,
        run: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only this run's tasks (an id or prefix).",
            ),
        ] = None,
        limit: NewestFirst = 100,
    ) -> list[TaskView]:
        """List tasks, newest first: those of runs the policies let the token's principal read
        (`read_runs` on each workflow)."""
        reader = Reader(client, who)
        run_id = None if run is None else reader.find_id("run", run)
        found = reader.tasks(status=status, run_id=run_id, limit=limit)
        return [TaskView.of(each) for each in found]

    @routes.get("/tasks/{task_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def get_task(task_id: TaskId, who: Who) -> TaskDetail:
        """Show one task with its audit rows, as the policies allow (`read_runs` on its run's
        workflow)."""
        reader = Reader(client, who)
        task = reader.task(_task(client, task_id, reader).id)
        audit = [AuditEntry.model_validate(row) for row in tasks.audit(task.id)]
        return TaskDetail.model_validate({**TaskView.of(task).model_dump(), "audit": audit})

    @routes.post(
        "/tasks/{task_id}/resolution", responses=error_responses(400, 401, 404, 409, 413, 422, 503)
    )
    def resolve_task(
        task_id: TaskId, body: ResolutionRequest, who: Who, idempotency_key: OptionalKey = None
    ) -> ResolutionResponse:
        """Say whether a task's call happened, and carry its run on, as the policies allow
        (`resolve` on the op). Refused (by the policies too), it is 409 with every reason."""
        task = _task(client, task_id)
        resolved = client.tasks.resolve(
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

    @routes.get("/ledger", responses=error_responses(400, 401, 403, 404, 422, 503))
    def ledger(
        who: Who,
        run: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only this run's calls, in order (an id or prefix).",
            ),
        ] = None,
        limit: Annotated[int, limit_query("one run's in order, else the latest")] = 200,
    ) -> list[LedgerEntry]:
        """Op calls: one run's in order (as the policies allow, `read_runs` on its workflow), or
        the latest of runs the token's principal may read, with direct calls' for those who
        may read the operations."""
        reader = Reader(client, who)
        run_id = None if run is None else find_run(client, run, reader).run_id
        return [LedgerEntry.of(row) for row in reader.ledger(run_id, limit=limit)]

    @routes.get("/budgets", responses=error_responses(401, 403, 422, 503))
    def budgets(who: Who, limit: NewestFirst = 50) -> list[BudgetPeriod]:
        """Each budget period: its limit, spent, reserved by calls in flight, what is left, and
        drift (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            BudgetPeriod.of(state, drift) for state, drift in client.budgets.periods(limit=limit)
        ]

    @routes.put(
        "/budgets/{scope}/limit", responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def set_limit(
        scope: Annotated[
            str,
            Path(
                max_length=250,
                json_schema_extra=NUL_FREE,
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
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        state = client.budgets.set(scope, str(body.limit), period=body.period, by=who)
        drift = sum((d.drift_usd for d in client.services.budgets.drift([state])), Decimal(0))
        return BudgetPeriod.of(state, drift)

    @routes.get("/deadlines", responses=error_responses(401, 403, 422, 503))
    def deadlines(
        who: Who, limit: Annotated[int, limit_query("earliest first")] = 20
    ) -> list[DeadlineView]:
        """What is due without anyone asking: wake-ups, expiries, schedules
        (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            DeadlineView.model_validate(each, from_attributes=True)
            for each in client.ops.deadlines(limit=limit)
        ]

    @routes.get("/workers", responses=error_responses(401, 403, 422, 503))
    def workers(who: Who, limit: NewestFirst = 100) -> list[WorkerView]:
        """The app's workers: live, dead, stopped, or taken over by another
        (`read_operations`)."""
        Reader(client, who).require_operations()
        now = datetime.now(UTC)
        dead_after = timedelta(seconds=client.settings.dead_after)
        return [
            WorkerView.of(row, now=now, dead_after=dead_after)
            for row in client.ops.workers()[:limit]
        ]

    @routes.get("/denials", responses=error_responses(401, 403, 422, 503))
    def denials(who: Who, limit: NewestFirst = 100) -> list[DenialView]:
        """What the policies refused, newest first (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            DenialView.model_validate(each, from_attributes=True)
            for each in client.services.guard.denials(limit=limit)
        ]

    @routes.get("/audit", responses=error_responses(401, 403, 422, 503))
    def audit(
        who: Who,
        target: Annotated[
            str,
            Query(
                min_length=1,
                json_schema_extra=NUL_FREE,
                max_length=200,
                description="What the rows are about: an approval's, task's, run's or token's "
                "id, `app:<name>`, `secret:<NAME>` or `schedule:<workflow>`.",
            ),
        ],
        limit: Annotated[int, limit_query("the latest, oldest first")] = 100,
    ) -> list[AuditEntry]:
        """The audit rows about one thing: who did what to it, when (`read_operations`)."""
        Reader(client, who).require_operations()
        rows = audit_of(client.db, target)
        return [AuditEntry.model_validate(row) for row in rows[-limit:]]


def _activity_routes(routes: APIRouter, client: Client) -> None:
    """A business record's timeline, and archiving it."""

    @routes.get(
        "/records/{record_type}/{record_id}/activity", responses=error_responses(400, 401, 422, 503)
    )
    def activity(
        who: Who,
        record_type: RecordPart,
        record_id: RecordPart,
        limit: Annotated[int, limit_query("oldest first")] = 100,
        after: Annotated[
            int | None, Query(ge=0, le=LAST_ROW, description="Only the rows after this one.")
        ] = None,
    ) -> list[ActivityView]:
        """What happened about a record, oldest first: its runs, gates and tasks, of the runs
        the token's principal may read (`read_runs` on each workflow)."""
        found = Reader(client, who).activity(record_type, record_id, limit=limit, after=after)
        return [ActivityView.model_validate(each.as_json()) for each in found]

    @routes.post(
        "/records/{record_type}/{record_id}/archive",
        responses=error_responses(400, 401, 403, 409, 413, 422, 503),
    )
    def archive(
        record_type: RecordPart, record_id: RecordPart, body: ArchiveRequest, who: Who
    ) -> ArchivedView:
        """Archive a record: cancel its pending gates, as one decision the policies check."""
        done = client.records.archive(record_type, record_id, by=who, reason=body.reason)
        return ArchivedView(
            record_type=done.record_type,
            record_id=done.record_id,
            cancelled=[each.approval_id for each in done.cancelled],
            replayed=done.replayed,
        )


def _find(client: Client, approval_id: str, reader: Reader | None = None) -> Approval:
    """The approval `approval_id` names, in full or by a prefix only it begins with (of those
    `reader` may read, if given); 404 for none, 400 for a prefix several begin with."""
    find = client.find_id if reader is None else reader.find_id
    try:
        return client.approvals.get(find("approval", approval_id))
    except ApprovalNotFound:
        message = f"no approval `{approval_id}`: GET /approvals lists the approvals"
        raise Problem(404, message, [ErrorReason(approval_id=approval_id, reason=message)])


def _task(client: Client, given: str, reader: Reader | None = None) -> Task:
    """The task `given` names, in full or by a prefix only it begins with (of those `reader`
    may read, if given); 404 for none."""
    find = client.find_id if reader is None else reader.find_id
    try:
        return client.tasks.get(find("task", given))
    except TaskNotFound:
        message = f"no task `{given}`: GET /tasks lists the tasks"
        raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])


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
        problems = [r.reason for r in reasons]
        raise Problem(422, f"{'; '.join(names)}: {listed(problems)}", reasons[:PROBLEMS])


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
            f"edits.{excerpt(field, 40)}: {name} has no field `{excerpt(field, 40)}` (its fields: "
            f"{excerpt(', '.join(model.model_fields), 200)})"
            for field in sorted(set(edits) - known)
        ]
    reasons += [
        f"edits.{field}: {read_only_refusal(declared, [field])}"
        for field in read_only_changes(declared, approval.draft_json, edits)
    ]
    try:
        model.model_validate({**approval.draft_json, **edits})
    except ValidationError as error:
        reasons += [
            excerpt(f"edits.{'.'.join(str(part) for part in e['loc']) or 'draft'}: {e['msg']}", 200)
            for e in error.errors(include_url=False, include_input=False)
        ]
    return reasons

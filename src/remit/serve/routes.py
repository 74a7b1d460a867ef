"""The HTTP API's routes, each acting as the principal of the request's API token through the
client's verb for it. `router(client)` is every route but `/health`, behind the token."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Security
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import (
    ValidationError,
)

from remit.client import Client
from remit.connectors.credentials import check_name
from remit.core.audit import audit_of
from remit.core.errors import (
    ApprovalNotFound,
    RemitError,
    RunNotFound,
    TaskNotFound,
    Unauthenticated,
)
from remit.core.runs import Run, RunStatus
from remit.core.text import PROBLEMS, excerpt, listed
from remit.ops.registry import state as worker_state
from remit.people.activity import LAST_ROW
from remit.people.approvals import Approval, Approvals, ApprovalStatus, check_decision
from remit.people.tasks import Task, TaskStatus
from remit.policy.tokens import parse_duration
from remit.reads import Reader
from remit.serve.models import (
    ActivityView,
    ApprovalDetail,
    ApprovalView,
    ArchivedView,
    ArchiveRequest,
    AuditEntry,
    BudgetPeriod,
    CallRequest,
    CallView,
    DeadlineView,
    DecisionRequest,
    DecisionResponse,
    DecisionsRequest,
    DecisionsResponse,
    DenialView,
    DriftView,
    EarlierTryView,
    ErrorReason,
    LedgerEntry,
    LimitRequest,
    Paused,
    Problem,
    ReconcileAction,
    ReconcileReport,
    ReconcileRequest,
    RecordPart,
    ResolutionRequest,
    ResolutionResponse,
    Resumed,
    RetryRequest,
    RetryResponse,
    RunView,
    SecretDeleted,
    SecretRequest,
    SecretView,
    StartRequest,
    StepView,
    TaskDetail,
    TaskView,
    TokenMade,
    TokenRequest,
    TokenView,
    WorkerView,
    approval_fields,
    error_responses,
    usd_text,
)
from remit.serve.params import (
    DURATION_FORM,
    NUL_FREE,
    ApprovalId,
    CallKey,
    NewestFirst,
    OptionalKey,
    RequiredKey,
    RunId,
    SecretName,
    TaskId,
    limit_query,
)

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
    if not route.dependant.body_params and _has_body(request):
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


def _has_body(request: Request) -> bool:
    """Whether the request declares a body: a length over 0, or one sent in chunks."""
    length = request.headers.get("content-length", "0").strip()
    return length != "0" or "transfer-encoding" in request.headers


def router(client: Client) -> APIRouter:
    """Every route of the API but `/health` and the spec, each needing an API token."""
    routes = APIRouter(dependencies=[Depends(_principal), Depends(_plain_query)])
    _run_routes(routes, client)
    _approval_routes(routes, client)
    _task_routes(routes, client)
    _record_routes(routes, client)
    _control_routes(routes, client)
    _secret_routes(routes, client)
    _call_routes(routes, client)
    _token_routes(routes, client)
    _activity_routes(routes, client)
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
        limit: NewestFirst = 50,
    ) -> list[RunView]:
        """List runs, newest first: those the policies let the token's principal read
        (`read_runs` on each workflow)."""
        found = Reader(client, who).runs(status=status, workflow=workflow, limit=limit)
        return [RunView.of(run) for run in found]

    @routes.post(
        "/runs", status_code=201, responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def start_run(body: StartRequest, who: Who) -> RunView:
        """Start a run of a workflow, as the policies allow (`start` on the workflow); a worker
        serving its queue runs it. A workflow the app does not have is 404."""
        record = None if body.record is None else (body.record.type, body.record.id)
        return RunView.of(client.start_row(body.workflow, body.input, by=who, record=record))

    @routes.get("/runs/{run_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def get_run(run_id: RunId, who: Who) -> RunView:
        """Show one run, by its id or a prefix only it begins with, as the policies allow
        (`read_runs` on its workflow)."""
        return RunView.of(_readable_run(client, who, run_id))

    @routes.get("/runs/{run_id}/steps", responses=error_responses(400, 401, 403, 404, 422, 503))
    def run_steps(run_id: RunId, who: Who) -> list[StepView]:
        """A run's steps, attempt by attempt, as DBOS checkpointed them (`remit show`), as the
        policies allow (`read_runs` on its workflow)."""
        found = _readable_run(client, who, run_id)
        return [StepView.of(step) for step in client.steps(found.run_id)]

    @routes.post(
        "/runs/{run_id}/cancel", responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def cancel_run(run_id: RunId, who: Who) -> RunView:
        """Cancel a run that has not finished, as the policies allow (`cancel` on its
        workflow); a finished one is left as it is."""
        return RunView.of(client.cancel(_run(client, run_id).run_id, by=who))

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
        run_id = None if run is None else _run(client, run, reader).run_id
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
                cost_usd=None if row.cost is None else usd_text(row.cost),
                earlier=[EarlierTryView.model_validate(each.__dict__) for each in row.earlier],
            )
            for row in reader.ledger(run_id, limit=limit)
        ]

    @routes.get("/budgets", responses=error_responses(401, 403, 422, 503))
    def budgets(who: Who, limit: NewestFirst = 50) -> list[BudgetPeriod]:
        """Each budget period: its limit, spent, reserved by calls in flight, what is left, and
        drift (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            BudgetPeriod.of(state, drift) for state, drift in client.budget_periods(limit=limit)
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
        state = client.set_budget(scope, str(body.limit), period=body.period, by=who)
        drift = sum((d.drift_usd for d in client.budgets.drift([state])), Decimal(0))
        return BudgetPeriod.of(state, drift)

    @routes.get("/deadlines", responses=error_responses(401, 403, 422, 503))
    def deadlines(
        who: Who, limit: Annotated[int, limit_query("earliest first")] = 20
    ) -> list[DeadlineView]:
        """What is due without anyone asking: wake-ups, expiries, schedules
        (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            DeadlineView(at=each.at, kind=each.kind, run_id=each.run_id, target=each.target)
            for each in client.deadlines(limit=limit)
        ]

    @routes.get("/workers", responses=error_responses(401, 403, 422, 503))
    def workers(who: Who, limit: NewestFirst = 100) -> list[WorkerView]:
        """The app's workers: live, dead, stopped, or taken over by another
        (`read_operations`)."""
        Reader(client, who).require_operations()
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

    @routes.get("/denials", responses=error_responses(401, 403, 422, 503))
    def denials(who: Who, limit: NewestFirst = 100) -> list[DenialView]:
        """What the policies refused, newest first (`read_operations`)."""
        Reader(client, who).require_operations()
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
                "id, `app:<name>` or `secret:<NAME>`.",
            ),
        ],
        limit: Annotated[int, limit_query("the latest, oldest first")] = 100,
    ) -> list[AuditEntry]:
        """The audit rows about one thing: who did what to it, when (`read_operations`)."""
        Reader(client, who).require_operations()
        rows = audit_of(client.db, target)
        return [AuditEntry.model_validate(row) for row in rows[-limit:]]


def _control_routes(routes: APIRouter, client: Client) -> None:
    """The app's controls: pause, resume, a reconciler pass."""

    @routes.post("/pause", responses=error_responses(400, 401, 403, 413, 422, 503))
    def pause(who: Who) -> Paused:
        """Pause the app, as the policies allow: its queues take no new work, and each run
        parks before its next step."""
        return Paused(paused=True, queues=client.pause(by=who))

    @routes.post("/resume", responses=error_responses(400, 401, 403, 413, 422, 503))
    def resume(who: Who) -> Resumed:
        """Resume the app, as the policies allow: its queues again, its parked runs on."""
        queues, carried_on = client.resume(by=who)
        return Resumed(paused=False, queues=queues, carried_on=carried_on)

    @routes.post("/reconcile", responses=error_responses(400, 401, 403, 413, 422, 503))
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
                    spent_usd=usd_text(d.spent_usd),
                    ledger_usd=usd_text(d.ledger_usd),
                    drift_usd=usd_text(d.drift_usd),
                )
                for d in report.drift
            ],
        )


def _secret_routes(routes: APIRouter, client: Client) -> None:
    """The app's stored credentials: names only, set, delete."""

    @routes.get("/secrets", responses=error_responses(401, 403, 422, 503))
    def list_secrets(
        who: Who,
        limit: Annotated[int, limit_query("by name")] = 100,
    ) -> list[SecretView]:
        """The app's secrets: names, and when and by whom each was set; never values
        (`read_operations`)."""
        Reader(client, who).require_operations()
        return [
            SecretView(name=each.name, set_at=each.set_at, set_by=each.set_by)
            for each in client.secrets.list()[:limit]
        ]

    @routes.put("/secrets/{name}", responses=error_responses(400, 401, 403, 413, 422, 503))
    def set_secret(name: SecretName, body: SecretRequest, who: Who) -> SecretView:
        """Store a secret (replacing its value), as the policies allow (`set_secret`)."""
        check_name(name)
        info = client.set_secret(name, body.value, by=who)
        return SecretView(name=info.name, set_at=info.set_at, set_by=info.set_by)

    @routes.delete("/secrets/{name}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def delete_secret(name: SecretName, who: Who) -> SecretDeleted:
        """Delete a secret, as the policies allow (`delete_secret`)."""
        check_name(name)
        if not client.delete_secret(name, by=who):
            message = f"no secret `{name}`: GET /secrets lists the secrets"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return SecretDeleted(name=name, deleted=True)


def _call_routes(routes: APIRouter, client: Client) -> None:
    """Direct calls of one op, outside any run."""

    @routes.post("/calls", responses=error_responses(400, 401, 403, 404, 413, 422, 503))
    def call(body: CallRequest, who: Who, idempotency_key: CallKey = None) -> CallView:
        """Call one op directly, outside any run, as the policies allow (`call` on the op); a
        policy may hold it for an approval, and a run then waits to make it. An op the app
        does not have is 404."""
        if body.op not in client.app.ops:
            known = sorted(client.app.ops)
            shown = ", ".join(known[:30]) + (", …" if len(known) > 30 else "")
            message = f"app `{client.app.name}` has no op `{body.op}` (it has: {shown or 'none'})"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
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

    @routes.get("/tokens", responses=error_responses(400, 401, 403, 422, 503))
    def list_tokens(who: Who, limit: NewestFirst = 100) -> list[TokenView]:
        """The app's API tokens, newest first, as the policies allow (`manage_tokens`)."""
        now = client.clock.now()
        return [TokenView.of(each, now) for each in client.list_tokens(by=who)[:limit]]

    @routes.post(
        "/tokens", status_code=201, responses=error_responses(400, 401, 403, 413, 422, 503)
    )
    def create_token(body: TokenRequest, who: Who) -> TokenMade:
        """Make an API token that acts as `for`, as the policies allow (`manage_tokens`). The
        token is in this answer only: it is kept nowhere."""
        expires_in = None if body.expires is None else duration(body.expires)
        info, token = client.create_token(body.for_, name=body.name, expires_in=expires_in, by=who)
        return TokenMade(token=token, info=TokenView.of(info, client.clock.now()))

    @routes.delete("/tokens/{token_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def revoke_token(
        token_id: Annotated[
            str,
            Path(max_length=100, json_schema_extra=NUL_FREE, description="The token's id, tok_…."),
        ],
        who: Who,
    ) -> TokenView:
        """Revoke an API token, as the policies allow (`manage_tokens`): it authenticates
        nothing from now on. Revoking one already revoked changes nothing."""
        try:
            client.tokens.get(token_id)
        except RemitError:
            message = f"no token `{token_id}`: GET /tokens lists the tokens"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return TokenView.of(client.revoke_token(token_id, by=who), client.clock.now())


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
        done = client.archive_record(record_type, record_id, by=who, reason=body.reason)
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
        return client.get_approval(find("approval", approval_id))
    except ApprovalNotFound:
        message = f"no approval `{approval_id}`: GET /approvals lists the approvals"
        raise Problem(404, message, [ErrorReason(approval_id=approval_id, reason=message)])


def _readable_run(client: Client, who: str, given: str) -> Run:
    """The run `given` names (as `_run` finds it), if `who` may read it: 403 otherwise."""
    reader = Reader(client, who)
    return reader.run(_run(client, given, reader).run_id)


def _run(client: Client, given: str, reader: Reader | None = None) -> Run:
    """The run `given` names, in full or by a prefix only it begins with (of those `reader`
    may read, if given); 404 for none, 400 for a prefix several begin with."""
    find = client.find_id if reader is None else reader.find_id
    try:
        return client.get_run(find("run", given))
    except RunNotFound:
        message = f"no run `{given}`: GET /runs lists the runs"
        raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])


def _task(client: Client, given: str, reader: Reader | None = None) -> Task:
    """The task `given` names, in full or by a prefix only it begins with (of those `reader`
    may read, if given); 404 for none."""
    find = client.find_id if reader is None else reader.find_id
    try:
        return client.get_task(find("task", given))
    except TaskNotFound:
        message = f"no task `{given}`: GET /tasks lists the tasks"
        raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])


def duration(text: str) -> timedelta:
    """A token's `expires` as a duration; 422 naming the form otherwise."""
    if not DURATION_FORM.fullmatch(text):
        message = (
            f"`expires` {text!r} is not a duration a token may last: give a whole number and a "
            "unit, m, h, d or w, of at most 999999d (e.g. 30d, 12h)"
        )
        raise Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
    return parse_duration(text)


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
    try:
        model.model_validate({**approval.draft_json, **edits})
    except ValidationError as error:
        reasons += [
            excerpt(f"edits.{'.'.join(str(part) for part in e['loc']) or 'draft'}: {e['msg']}", 200)
            for e in error.errors(include_url=False, include_input=False)
        ]
    return reasons

"""The routes of changes (`remit.changes`): opening one (`POST /changes`, the policy action
`start` on the workflow `change`), reading them and the hosts' deploys (`read_runs` on `change`),
and the forge's webhook (`POST /forge/{remote}/events`), which needs no token: the delivery's
signature, checked against the remote's webhook secret, is its authentication.

A list holds only what the token's principal may read, as every list of the API: nothing, for
one who may not read the runs of `change`. One change they may not read is 403, recorded. An
app with no forge remote has no changes: their routes are 404 there, saying so."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, FastAPI, Path, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from remit.changes.store import Change, Deploy
from remit.changes.workflow import CHANGE
from remit.client import Client
from remit.ops.changes import ChangeNotFound, EventRefused, ForgeEvents, Taken
from remit.reads import Reader
from remit.serve.errors import ErrorReason, Problem, error_responses
from remit.serve.models import RequestBody
from remit.serve.params import IDEMPOTENCY_HEADER, KEY_FORM, NUL_FREE, NewestFirst, OptionalKey
from remit.serve.requests import Who

# The forge's webhook: what a person reads in the spec of it.
WEBHOOK_PATH = "/forge/{remote}/events"
# How long a branch or a base may be (the column's width).
BRANCH_LENGTH = 255

ChangeId = Annotated[
    str,
    Path(max_length=64, json_schema_extra=NUL_FREE, description="The change's id: chg_…"),
]


class OpenChangeRequest(RequestBody):
    """A change to open: a branch of the operations repo, to be merged into `base`."""

    noun: ClassVar[str] = "a change"
    made: ClassVar[str] = "the change is opened"

    branch: str = Field(
        min_length=1,
        max_length=BRANCH_LENGTH,
        json_schema_extra={"pattern": KEY_FORM},
        description="The branch of the operations repo the change is: fix-dns.",
    )
    title: str = Field(
        default="",
        max_length=1000,
        json_schema_extra=NUL_FREE,
        description="What it changes, in a line (default: the branch).",
    )
    base: str = Field(
        default="main",
        min_length=1,
        max_length=BRANCH_LENGTH,
        json_schema_extra={"pattern": KEY_FORM},
        description="The branch it is merged into.",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        json_schema_extra={"pattern": KEY_FORM},
        description=f"Optional, as the {IDEMPOTENCY_HEADER} header (give one or the other): "
        "the same open again under its key answers with the first one's change.",
    )


class ChangeView(BaseModel):
    """A change: a branch moving through checks, review, merge and deploy in its run."""

    id: str
    app: str
    remote: str = Field(description="The forge remote (its connector's vendor) it is opened at.")
    branch: str
    base: str
    run_id: str = Field(description="The run of the built-in workflow `change` that carries it.")
    author: str = Field(description="Who opened it: they may not approve it.")
    title: str
    number: int | None = Field(description="The change request's number at the forge.")
    url: str | None = Field(description="The change request's page at the forge.")
    head: str | None = Field(description="The commit checked last.")
    status: str = Field(
        description="opened, checking, failing, review, rejected, merged, deploying, deployed, "
        "unhealthy, rolled_back, closed or failed."
    )
    checks: dict[str, Any] | None = Field(
        description='The last checks: {"head", "results": {name: {"ok", "exit", "summary"}}, '
        '"commits"}.'
    )
    merge_commit: str | None
    deployed: str | None = Field(description="The revision its deploy put on the hosts.")
    created_at: datetime
    updated_at: datetime
    run_status: str | None = Field(description="Its run's status.")

    @classmethod
    def of(cls, change: Change) -> ChangeView:
        return cls.model_validate(change.__dict__)


class DeployView(BaseModel):
    """What one host was deployed with, and whether it was healthy after."""

    id: int
    app: str
    host: str
    revision: str
    kind: str = Field(description="deploy, or rollback.")
    change_id: str | None = Field(description="The change deployed; null for a push's apply.")
    run_id: str
    healthy: bool
    detail: str
    at: datetime

    @classmethod
    def of(cls, deploy: Deploy) -> DeployView:
        return cls.model_validate(deploy.__dict__)


class TakenView(BaseModel):
    """What a forge delivery did."""

    delivery: str = Field(description="The forge's delivery id.")
    kind: str = Field(description="push, comment, merge, closed or other.")
    action: str = Field(
        description="sent (to the change run `run_id`), apply (a run of `apply` started), or "
        "ignored (`why`)."
    )
    run_id: str | None
    why: str
    duplicate: bool = Field(
        description="True when the delivery was taken before: it answers as it did then and "
        "does nothing now."
    )

    @classmethod
    def of(cls, taken: Taken) -> TakenView:
        return cls.model_validate(taken.as_json())


def change_routes(routes: APIRouter, client: Client) -> None:
    """`POST` and `GET /changes`, `GET /changes/{id}` and `GET /deploys`, behind the token."""

    def may_read(who: str) -> bool:
        return Reader(client, who).may_read_runs_of(CHANGE)

    def has_changes() -> None:
        """404 for an app with no forge remote: it has no workflow `change`, so no changes,
        as `POST /runs` is 404 for a workflow the app does not have."""
        if CHANGE not in client.app.workflows:
            message = (
                f"app `{client.app.name}` has no forge remote, so it has no changes: give the "
                "connector of its repo's git host a remote (`Connector(..., remote=Remote(...))`)"
            )
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])

    @routes.post(
        "/changes",
        status_code=201,
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def open_change(
        body: OpenChangeRequest, who: Who, idempotency_key: OptionalKey = None
    ) -> ChangeView:
        """Open a change of a branch, as the policies allow (`start` on the workflow `change`):
        its run opens the change request at the forge, checks the branch, asks for review,
        merges and deploys. The token's principal is its author, who may not approve it. A
        branch with a change going is refused, unless the open is keyed: with a key (the
        Idempotency-Key header, or `key`), the same open again answers with the first one's
        change; the key sent with another branch is 422."""
        has_changes()
        if body.key is not None and idempotency_key is not None and body.key != idempotency_key:
            message = (
                f"the body's `key` ({body.key}) and the {IDEMPOTENCY_HEADER} header "
                f"({idempotency_key}) differ: give the open's key once"
            )
            raise Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
        opened = client.changes.open(
            body.branch,
            title=body.title,
            base=body.base,
            by=who,
            key=body.key or idempotency_key,
        )
        return ChangeView.of(opened)

    @routes.get("/changes", responses=error_responses(401, 404, 422, 503))
    def list_changes(
        who: Who,
        branch: Annotated[
            str | None,
            Query(
                max_length=BRANCH_LENGTH,
                json_schema_extra=NUL_FREE,
                description="Only this branch's changes.",
            ),
        ] = None,
        limit: NewestFirst = 50,
    ) -> list[ChangeView]:
        """The changes, newest first, as the policies allow (`read_runs` on the workflow
        `change`): none for a principal who may not read them."""
        if not may_read(who):
            return []
        has_changes()
        return [ChangeView.of(each) for each in client.changes.list(branch=branch, limit=limit)]

    @routes.get("/changes/{change_id}", responses=error_responses(400, 401, 403, 404, 422, 503))
    def get_change(change_id: ChangeId, who: Who) -> ChangeView:
        """One change, as the policies allow (`read_runs` on the workflow `change`). Its run
        (`GET /runs/{run_id}`) and its activity (`GET /records/change/{id}/activity`) say
        the rest."""
        if not may_read(who):
            client.services.guard.require(who, "read_runs", CHANGE, {})  # refused, recorded
        has_changes()
        try:
            found = client.changes.get(change_id)
        except ChangeNotFound:
            message = f"no change `{change_id}`: GET /changes lists the changes"
            raise Problem(404, message, [ErrorReason(approval_id=None, reason=message)])
        return ChangeView.of(found)

    @routes.get("/deploys", responses=error_responses(401, 422, 503))
    def list_deploys(
        who: Who,
        host: Annotated[
            str | None,
            Query(
                max_length=200,
                json_schema_extra=NUL_FREE,
                description="Only this host's deploys (its declaration's name: web).",
            ),
        ] = None,
        limit: NewestFirst = 50,
    ) -> list[DeployView]:
        """What the hosts were deployed with, newest first, and whether each was healthy after,
        as the policies allow (`read_runs` on the workflow `change`): none for a principal who
        may not read them."""
        if not may_read(who):
            return []
        return [DeployView.of(each) for each in client.changes.deploys(host=host, limit=limit)]


def forge_routes(api: FastAPI, client: Client) -> None:
    """`POST /forge/{remote}/events`, the forge's webhook: needs no token, since the
    delivery's signature is checked against the remote's webhook secret."""

    responses = error_responses(400, 401, 404, 413, 422, 503)
    responses[401] = {
        **responses[401],
        "description": "The delivery's signature does not match the remote's webhook secret "
        "(or no secret is set): nothing was recorded.",
    }
    responses[404] = {**responses[404], "description": "The app has no forge remote by that name."}

    @api.post(
        WEBHOOK_PATH,
        responses=responses,
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "The forge's delivery as it sent it (GitHub's shape), signed in "
                "X-Hub-Signature-256, named by X-GitHub-Event and X-GitHub-Delivery.",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
    )
    async def forge_events(
        request: Request,
        remote: Annotated[
            str,
            Path(
                max_length=100,
                json_schema_extra=NUL_FREE,
                description="The forge remote: its connector's vendor (forge).",
            ),
        ],
    ) -> TakenView:
        """Take one delivery of the forge's webhook. Its signature (X-Hub-Signature-256, an
        HMAC-SHA256 of the body under the remote's webhook secret) is its authentication: a
        delivery that fails it is 401, one that cannot be read 400, a remote the app does not
        have 404, and none of them records anything. A push to a branch with a change going,
        and a comment on or the closing of its change request, are sent to the change's run;
        a push to the base branch that no change merged starts `apply` at the pushed
        revision; anything else is ignored, saying why. A delivery taken before answers as
        it did then, with `duplicate`, and does nothing again."""
        body = await request.body()
        headers = dict(request.headers)
        try:
            taken = await run_in_threadpool(ForgeEvents(client).take, remote, headers, body)
        except EventRefused as refused:
            message = str(refused)
            raise Problem(
                refused.status, message, [ErrorReason(approval_id=None, reason=message)]
            ) from None
        return TakenView.of(taken)

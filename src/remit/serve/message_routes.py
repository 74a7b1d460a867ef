"""The routes of what runs wait for, publish and start (`ops/messages.py`): sending a run a
message (`POST /runs/{id}/messages`, the policy action `send` on its workflow), and reading its
messages, its published state and its child runs (`read_runs` on its workflow, as every read of
a run). `GET /runs/{id}` answers with `RunDetail`: the run, its parent and what it waits for."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from remit.client import Client
from remit.core.runs import Run, RunStatus
from remit.ops.messages import Child, Waiting
from remit.reads import Reader
from remit.serve.errors import ErrorReason, Problem, error_responses
from remit.serve.lookups import find_run, readable_run
from remit.serve.models import RequestBody, RunView
from remit.serve.params import IDEMPOTENCY_HEADER, KEY_FORM, OptionalKey, RunId
from remit.serve.requests import Who


class SendRequest(RequestBody):
    """A message to a run, on a topic."""

    noun: ClassVar[str] = "a message"
    made: ClassVar[str] = "the message is sent"

    topic: str = Field(
        min_length=1,
        max_length=100,
        json_schema_extra={"pattern": KEY_FORM},
        description="The topic the run waits on, or will (`ctx.wait_for(topic)`): printable "
        "characters with no spaces, e.g. paid.",
    )
    payload: Any = Field(
        default=None,
        description="The message, any JSON: parsed against the wait's model when a wait takes it.",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        json_schema_extra={"pattern": KEY_FORM},
        description=f"Optional, as the {IDEMPOTENCY_HEADER} header (give one or the other): "
        "the same message sent again under its key is kept once and answers with the first "
        "send.",
    )


class SentView(BaseModel):
    """What a send did (or, replayed by its key, did the first time)."""

    seq: int = Field(description="The message's number, in the order messages were sent.")
    run_id: str
    topic: str
    resumed_workflow_id: str | None = Field(
        description="The attempt the message moved the run to; null when the run was not "
        "waiting on the topic (a wait takes the message later) or the send is replayed."
    )
    replayed: bool = Field(
        description="True when the key had already sent this message: nothing was sent again."
    )


class MessageView(BaseModel):
    """A message sent to a run."""

    seq: int
    run_id: str
    topic: str
    payload: Any
    key: str | None
    sent_by: str
    sent_at: datetime
    status: Literal["queued", "taken", "refused"] = Field(
        description="queued: no wait has taken it; taken: a wait took it (at `step_id`); "
        "refused: its payload did not parse as the wait's model (`error`)."
    )
    step_id: int | None
    taken_at: datetime | None
    error: str | None


class WaitingView(BaseModel):
    """What a run waits for at a step of its current attempt, other than people and time."""

    step_id: int
    kind: Literal["message", "children"]
    topic: str | None = Field(description="The topic of a wait for a message.")
    children: list[str] = Field(description="The child runs a wait for children waits for.")
    deadline: datetime | None = Field(
        description="When a wait for a message times out (the wait returns null); null: never."
    )
    since: datetime

    @classmethod
    def of(cls, waiting: Waiting) -> WaitingView:
        return cls.model_validate(waiting.__dict__)


class ChildView(BaseModel):
    """A child run, as its parent started it (`ctx.start`)."""

    run_id: str
    parent_run_id: str
    workflow: str
    key: str = Field(description="The start's key within its parent.")
    step_id: int = Field(description="The parent's step that started it.")
    detached: bool = Field(description="True: cancelling the parent leaves it running.")
    status: RunStatus
    created_at: datetime

    @classmethod
    def of(cls, child: Child) -> ChildView:
        return cls.model_validate(child.__dict__)


class ParentView(BaseModel):
    """The run that started a run as its child."""

    run_id: str = Field(description="The parent run.")
    step_id: int = Field(description="The parent's step that started the child.")
    key: str = Field(description="The start's key within the parent.")
    detached: bool

    @classmethod
    def of(cls, child: Child) -> ParentView:
        return cls(
            run_id=child.parent_run_id,
            step_id=child.step_id,
            key=child.key,
            detached=child.detached,
        )


class RunDetail(RunView):
    """A run with its parent and what it waits for."""

    parent: ParentView | None = Field(
        description="The run that started it as its child (`ctx.start`); null for a run "
        "nothing started."
    )
    waiting: list[WaitingView] = Field(
        description="What it waits for on its current attempt: a message on a topic, or its "
        "child runs (gates and tasks have their own routes)."
    )

    @classmethod
    def of_run(cls, run: Run, *, parent: Child | None, waiting: list[Waiting]) -> RunDetail:
        return cls.model_validate(
            {
                **RunView.of(run).model_dump(),
                "parent": None if parent is None else ParentView.of(parent),
                "waiting": [WaitingView.of(each) for each in waiting],
            }
        )


def run_detail(client: Client, run: Run) -> RunDetail:
    """`run` as `GET /runs/{id}` answers with it."""
    return RunDetail.of_run(
        run, parent=client.runs.parent(run.run_id), waiting=client.runs.waiting(run.run_id)
    )


def message_routes(routes: APIRouter, client: Client) -> None:
    """`POST` and `GET /runs/{id}/messages`, `GET /runs/{id}/state` and `.../children`."""

    @routes.post(
        "/runs/{run_id}/messages",
        status_code=201,
        responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    )
    def send_message(
        run_id: RunId, body: SendRequest, who: Who, idempotency_key: OptionalKey = None
    ) -> SentView:
        """Send a run a message on a topic, as the policies allow (`send` on its workflow,
        with the `topic`). A run waiting on the topic (`ctx.wait_for`) carries on with it, on
        whichever worker serves its queue; a run not waiting on it yet keeps it until a wait
        takes it, in the order sent. A finished run is 409 and keeps nothing. With a key (the
        Idempotency-Key header, or `key`), the same message again answers as the first send
        did, `replayed`, and sends nothing; the key sent with another message is 422."""
        found = find_run(client, run_id)
        if body.key is not None and idempotency_key is not None and body.key != idempotency_key:
            message = (
                f"the body's `key` ({body.key}) and the {IDEMPOTENCY_HEADER} header "
                f"({idempotency_key}) differ: give the message's key once"
            )
            raise Problem(422, message, [ErrorReason(approval_id=None, reason=message)])
        sent = client.runs.send(
            found.run_id, body.topic, body.payload, key=body.key or idempotency_key, by=who
        )
        return SentView.model_validate(sent.as_json())

    @routes.get("/runs/{run_id}/messages", responses=error_responses(400, 401, 403, 404, 422, 503))
    def run_messages(run_id: RunId, who: Who) -> list[MessageView]:
        """The messages sent to a run, in the order they were sent: queued, taken or refused,
        as the policies allow (`read_runs` on its workflow)."""
        found = readable_run(client, who, run_id)
        return [
            MessageView.model_validate(each.__dict__) for each in client.runs.messages(found.run_id)
        ]

    @routes.get("/runs/{run_id}/state", responses=error_responses(400, 401, 403, 404, 422, 503))
    def run_state(run_id: RunId, who: Who) -> dict[str, Any]:
        """What a run published (`ctx.publish`): the latest value of each key, by key, as
        the policies allow (`read_runs` on its workflow)."""
        found = readable_run(client, who, run_id)
        return client.runs.state(found.run_id)

    @routes.get("/runs/{run_id}/children", responses=error_responses(400, 401, 403, 404, 422, 503))
    def run_children(run_id: RunId, who: Who) -> list[ChildView]:
        """The runs a run started as its children (`ctx.start`), oldest first, as the
        policies allow (`read_runs` on its workflow): those the token's principal may read
        (`read_runs` on each child's workflow)."""
        reader = Reader(client, who)
        found = reader.run(find_run(client, run_id, reader).run_id)
        return [ChildView.of(each) for each in reader.children(found.run_id)]

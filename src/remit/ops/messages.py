"""Messages to runs, what runs publish, and their children, as `client.runs` reads and sends
them (`client.send`, `client.state`).

A message is sent to one run on a topic. The send is one transaction: it locks the run, keeps
the message, and, when the run waits on that topic on its current attempt (`ctx.wait_for`),
moves it to its next attempt with an outbox row, forked after the commit; the attempt's wait
then takes the oldest message kept on the topic. A message sent before the run waits is kept
until a wait takes it. Each send is the policy action `send` on the run's workflow (context:
its `topic`) and an audit row `run.message`; its payload is held to `REMIT_MAX_INPUT_BYTES`.

With a `key`, the same send again (same topic and payload) answers with the first one's
message and moves nothing again; the key used again for another message is refused
(`KeyReused`).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from remit.core.audit import audit_row
from remit.core.clock import Clock
from remit.core.database import Database
from remit.core.errors import InputInvalid, KeyReused, RunNotFound, SendRefused
from remit.core.fence import advance, lock
from remit.core.keys import key_problem
from remit.core.limits import check_json
from remit.core.outbox import Resume, Resumer
from remit.core.schema import children, messages, run_state, runs, waits
from remit.core.waiting import first_waiting

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.policy.guard import Guard


@dataclass(frozen=True)
class Sent:
    """A message as its send answered: its number (`seq`, in the order messages were sent),
    the attempt it moved its run to (None: the run was not waiting on its topic), and whether
    it is the first send's answer replayed under its key."""

    seq: int
    run_id: str
    topic: str
    resumed_workflow_id: str | None
    replayed: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Message:
    """A message kept for a run: `queued` (no wait has taken it), `taken` (at the step
    `step_id`), or `refused` (its payload did not parse as the wait's model: `error`)."""

    seq: int
    run_id: str
    topic: str
    payload: Any
    key: str | None
    sent_by: str
    sent_at: datetime
    status: str
    step_id: int | None
    taken_at: datetime | None
    error: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in self.__dict__.items()
        }


@dataclass(frozen=True)
class Waiting:
    """What a run waits for at a step of its current attempt: a message on `topic` (until
    `deadline`, if it has a timeout), or its child runs `children`."""

    step_id: int
    kind: str
    topic: str | None
    children: list[str]
    deadline: datetime | None
    since: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in self.__dict__.items()
        }


@dataclass(frozen=True)
class Child:
    """A child run, as its parent started it."""

    run_id: str
    parent_run_id: str
    workflow: str
    key: str
    step_id: int
    detached: bool
    status: str
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in self.__dict__.items()
        }


def check_topic(topic: object) -> str:
    problem = key_problem(topic, what="topic", longest=100, example="paid")
    if problem is not None:
        raise InputInvalid(problem, target="topic", errors=[])
    assert isinstance(topic, str)
    return topic


def payload_json(payload: Any, *, topic: str) -> Any:
    """A message's payload as JSON, within `REMIT_MAX_INPUT_BYTES`; refused naming the topic."""
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    try:
        jsonable = to_jsonable_python(payload)
    except Exception as error:
        raise InputInvalid(
            f"the payload of a message on `{topic}` is not JSON ({type(error).__name__}: "
            f"{error}): send plain data or a pydantic model",
            target=topic,
            errors=[],
        ) from None
    check_json(
        jsonable, what=f"the payload of a message on `{topic}`", cap="input_bytes", target=topic
    )
    return jsonable


class Messages:
    """Sending messages to runs, and reading what runs wait for, publish and started."""

    def __init__(self, db: Database, client: DBOSClient, *, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self.resumer = Resumer(db, client, clock=clock)

    def send(
        self,
        guard: Guard,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        by: str,
        key: str | None = None,
    ) -> Sent:
        """Send `payload` to run `run_id` on `topic`, as `by`, if the policies let them (`send`
        on the run's workflow). Refused with `SendRefused` once the run has finished, and with
        `RowLocked` when another session holds the run's row past `REMIT_LOCK_TIMEOUT`
        (Postgres), nothing written."""
        topic = check_topic(topic)
        if key is not None:
            problem = key_problem(key, what="message key", longest=200, example="payment-pi_3Nq")
            if problem is not None:
                raise InputInvalid(problem, target="key", errors=[])
        body = payload_json(payload, topic=topic)
        with self.db.engine.connect() as conn:
            workflow = conn.execute(
                sa.select(runs.c.workflow).where(runs.c.run_id == run_id)
            ).scalar_one_or_none()
        if workflow is None:
            raise RunNotFound(f"no run `{run_id}`: `remit runs` lists the runs")
        guard.require(by, "send", workflow, {"topic": topic})
        for tries_left in (1, 0):
            try:
                sent, resume = self.db.retrying(
                    f"run {run_id}: message on {topic}",
                    lambda: self._send(run_id, topic, body, by=by, key=key),
                )
                break
            except sa.exc.IntegrityError:
                # The same key committed first, from another send: the next try replays it.
                if tries_left == 0 or key is None:
                    raise
        self.resumer.fork_all(resume)
        return sent

    def _send(
        self, run_id: str, topic: str, body: Any, *, by: str, key: str | None
    ) -> tuple[Sent, list[Resume]]:
        now = self.clock.now()
        with self.db.begin_bounded(f"send to run {run_id} on {topic}") as conn:
            if key is not None and (replayed := self._first(conn, run_id, topic, body, key)):
                return replayed
            run = lock(conn, run_id)
            if run is None:
                raise RunNotFound(f"no run `{run_id}`: `remit runs` lists the runs")
            if run.finished:
                raise SendRefused(
                    f"run {run_id} is {run.status}: it waits for no more messages, and the "
                    f"message on `{topic}` was not kept",
                    run_id=run_id,
                )
            wait = conn.execute(
                sa.select(waits.c.step_id)
                .where(
                    waits.c.run_id == run_id,
                    waits.c.kind == "message",
                    waits.c.topic == topic,
                    waits.c.status == "waiting",
                    waits.c.workflow_id == run.workflow_id,
                )
                .order_by(waits.c.step_id)
                .limit(1)
            ).scalar_one_or_none()
            resume = None
            if wait is not None and run.status in ("running", "waiting"):
                first = first_waiting(conn, run_id, run.workflow_id)
                resume = advance(conn, run, wait if first is None else min(first, wait), now=now)
                conn.execute(
                    waits.update()
                    .where(waits.c.run_id == run_id, waits.c.step_id == wait)
                    .values(status="ready", resumed_workflow_id=resume.workflow_id)
                )
            seq = conn.execute(
                messages.insert()
                .values(
                    run_id=run_id,
                    topic=topic,
                    payload=body,
                    key=key,
                    sent_by=by,
                    sent_at=now,
                    status="queued",
                    resumed_workflow_id=None if resume is None else resume.workflow_id,
                )
                .returning(messages.c.seq)
            ).scalar_one()
            audit_row(
                conn,
                at=now,
                actor=by,
                action="run.message",
                target=run_id,
                meta={"topic": topic, "seq": seq, "key": key},
            )
        sent = Sent(seq, run_id, topic, None if resume is None else resume.workflow_id)
        return sent, [] if resume is None else [resume]

    def _first(
        self, conn: sa.Connection, run_id: str, topic: str, body: Any, key: str
    ) -> tuple[Sent, list[Resume]] | None:
        """The message first sent under `key` to the run, if it is this one, and the resume it
        made if that is still in the outbox (its sender did not live to fork it: it is forked
        now); else `KeyReused`."""
        first = conn.execute(
            sa.select(
                messages.c.seq,
                messages.c.topic,
                messages.c.payload,
                messages.c.resumed_workflow_id,
            ).where(messages.c.run_id == run_id, messages.c.key == key)
        ).one_or_none()
        if first is None:
            return None
        if first.topic != topic or first.payload != body:
            raise KeyReused("message key", key, f"send message {first.seq} on `{first.topic}`")
        resumed = first.resumed_workflow_id
        pending = self.resumer.pending(conn, [] if resumed is None else [resumed])
        return Sent(first.seq, run_id, first.topic, resumed, replayed=True), pending

    # -- reads --------------------------------------------------------------------------------

    def messages(self, run_id: str) -> builtins.list[Message]:
        """The messages sent to a run, in the order they were sent."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(messages).where(messages.c.run_id == run_id).order_by(messages.c.seq)
            )
            return [
                Message(**{name: row._mapping[name] for name in Message.__dataclass_fields__})
                for row in rows
            ]

    def state(self, run_id: str) -> dict[str, Any]:
        """The latest value of each key the run published (`ctx.publish`), by key."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(run_state.c.key, run_state.c.value)
                .where(run_state.c.run_id == run_id)
                .order_by(run_state.c.key)
            )
            return {row.key: row.value for row in rows}

    def waiting(self, run_id: str) -> builtins.list[Waiting]:
        """What the run waits for on its current attempt, other than people and time: a
        message on a topic, or its children."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(waits)
                .join(runs, runs.c.run_id == waits.c.run_id)
                .where(
                    waits.c.run_id == run_id,
                    waits.c.status.in_(("waiting", "ready")),
                    runs.c.workflow_id == waits.c.workflow_id,
                    runs.c.status.in_(("running", "waiting")),
                )
                .order_by(waits.c.step_id)
            )
            return [
                Waiting(
                    step_id=row.step_id,
                    kind=row.kind,
                    topic=row.topic,
                    children=list(row.children or []),
                    deadline=row.deadline,
                    since=row.created_at,
                )
                for row in rows
            ]

    def children(self, run_id: str) -> builtins.list[Child]:
        """The runs `run_id` started as its children, oldest first."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(children, runs.c.status)
                .join(runs, runs.c.run_id == children.c.run_id)
                .where(children.c.parent_run_id == run_id)
                .order_by(children.c.created_at, children.c.step_id)
            )
            return [_child(row._mapping) for row in rows]

    def parent(self, run_id: str) -> Child | None:
        """How `run_id` was started by its parent, or None for a run nothing started."""
        with self.db.engine.connect() as conn:
            row = conn.execute(
                sa.select(children, runs.c.status)
                .join(runs, runs.c.run_id == children.c.run_id)
                .where(children.c.run_id == run_id)
            ).one_or_none()
            return None if row is None else _child(row._mapping)


def _child(row: Any) -> Child:
    return Child(**{name: row[name] for name in Child.__dataclass_fields__})

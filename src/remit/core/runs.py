"""Runs: the user-visible unit of work, one row each, with fenced status writes.

A run's attempt N is the DBOS workflow `<run_id>:<N>`. The row's `workflow_id` names the current
attempt, and every status write an attempt makes is fenced on it: once a run has moved to a later
attempt, a write from an earlier one matches no row and changes nothing. The fence itself (locks,
holds, moving a run on) is `fence.py`; this module reads runs and writes them through it.
"""

from __future__ import annotations

import builtins
import functools
import logging
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError

from remit.core.activity import (
    RUN_STARTED,
    Record,
    RecordRef,
    activity_row,
    check_record,
    record_of_run,
    record_of_run_columns,
    ref_of,
    run_ended,
    runs_of_record,
)
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import InputInvalid, RemitError, RunNotFound, TooLarge
from remit.core.fence import FINISHED as FINISHED
from remit.core.fence import attempt_workflow_id as attempt_workflow_id
from remit.core.fence import fenced_update, hold, lock, next_attempt, status_write
from remit.core.limits import check_json
from remit.core.outbox import CHANNEL, announce, doorbell
from remit.core.schema import audit, children, runs
from remit.core.text import PROBLEMS, excerpt

if TYPE_CHECKING:
    from dbos import DBOSClient

log = logging.getLogger("remit.runs")


@dataclass(frozen=True)
class ParentLink:
    """A child run's parent: the run, the step that started it, the start's key there, and
    whether the child outlives a cancel of its parent (`detached`)."""

    run_id: str
    # The parent's attempt starting it: a start from an attempt the parent has moved on from
    # (or a parent cancelled meanwhile) is refused (`RunMovedOn`), so no child outlives a
    # cancel that did not see it.
    workflow_id: str
    step_id: int
    key: str
    detached: bool = False


class Startable(Protocol):
    """What a run's start reads of its workflow: `declare.workflows.Workflow`, which sits
    above the runs it starts. Its `record` (a function of the parsed input), if it has one,
    is read with `getattr`."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def input(self) -> type[BaseModel]: ...


RunStatus = Literal[
    "queued", "running", "waiting", "sleeping", "paused", "done", "failed", "cancelled"
]
STATUSES: tuple[str, ...] = (
    "queued",
    "running",
    "waiting",
    "sleeping",
    "paused",
    "done",
    "failed",
    "cancelled",
)


@dataclass(frozen=True)
class Concerns:
    """The record a run concerns, as its attempt's claim read it: None, none."""

    record: RecordRef | None


@dataclass(frozen=True)
class Claim:
    """An attempt's claim of its run (`RunStore.begin_attempt`)."""

    # The attempt began before, and DBOS is running it again after its worker stopped.
    again: bool
    # Read in the claim's own statement, so that the run's end need not read it.
    concerns: Concerns
    # The run that started this one as its child (`ctx.start`), read there too: the end of a
    # run that is no one's child looks for no parent to move on.
    parent: str | None = None


@dataclass(frozen=True)
class RunInfo:
    """The attempt a call belongs to."""

    run_id: str
    attempt: int
    workflow_id: str
    actor: str
    # A direct call (`remit call`) belongs to no run: its writes are not fenced on one.
    direct: bool = False
    # The run's workflow, whose own budgets its calls count against (None: a direct call).
    workflow: str | None = None
    # The attempt began before, and DBOS is running it again after its worker stopped.
    again: bool = False
    # When the run must have ended by, from its workflow's `timeout=` (None: no bound).
    deadline: datetime | None = None
    # The record the run concerns, as the attempt's claim read it (None: not read).
    concerns: Concerns | None = None
    # The run's parent, as the claim read it (None: it has none, or it was not read).
    parent: str | None = None


@dataclass(frozen=True)
class ParsedInput:
    """A run's input as `parse_input` gave it for the workflow `workflow`: `RunStore.start`
    takes it as it is rather than parsing it again (a checked start parsed it to ask the
    policies)."""

    workflow: str
    payload: dict[str, Any]


def queue_id(app: str | None, queue: str) -> str:
    """The DBOS queue of the app `app`'s queue `queue`: `<app>:<queue>`, so two apps sharing a
    database (each with a queue `default`) neither serve nor pause each other's runs."""
    return queue if app is None else f"{app}:{queue}"


def app_runs(app: str | None) -> sa.ColumnElement[bool]:
    """The rows of the app `app`'s runs (every run: None): each run an app starts is on one of
    its queues, `<app>:<queue>`, so apps sharing a database leave each other's runs alone."""
    if app is None:
        return sa.true()
    return runs.c.queue.startswith(f"{app}:", autoescape=True)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Run:
    """One run as its row holds it."""

    run_id: str
    workflow: str
    queue: str
    input: dict[str, Any]
    status: str
    attempt: int
    workflow_id: str
    version: str | None
    started_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    output: Any
    error: str | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class RunStore:
    """Reads and writes of the runs table. Every status write an attempt makes is fenced.

    `app` names the app whose runs this store starts, and `record` the record they concern
    unless a start names its own (see `naming`).
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock | None = None,
        app: str | None = None,
        record: Record | None = None,
    ) -> None:
        self.db = db
        self.clock = clock or SystemClock()
        self.app = app
        self.record = None if record is None else check_record(record, where="RunStore(record=...)")

    def naming(self, record: Record | None, *, app: str) -> RunStore:
        """The same store, whose starts are the app `app`'s and concern `record` (None: the
        record the workflow derives from its input, if it does)."""
        return RunStore(self.db, clock=self.clock, app=app, record=record)

    def adopt_queues(self, workflows: Iterable[str], queues: Iterable[str]) -> int:
        """Move the store's app's runs written before queues were named by app (queue
        `default`, not `<app>:default`) onto the app's own queues, so a later attempt of theirs
        (a resume, a retry, the reconciler's enqueue) is served by the app's workers and stopped
        by its pause. Returns how many rows moved. An attempt DBOS already holds on the old
        queue stays there, served while DBOS keeps that queue for the app."""
        if self.app is None:
            raise RemitError("adopting runs onto an app's queues needs RunStore(app=...)")
        names = list(workflows)
        moved = 0
        with self.db.begin() as conn:
            for queue in queues:
                moved += conn.execute(
                    runs.update()
                    .where(runs.c.queue == queue, runs.c.workflow.in_(names))
                    .values(queue=queue_id(self.app, queue))
                ).rowcount
        return moved

    def start(
        self,
        client: DBOSClient,
        workflow: Startable,
        input: Mapping[str, Any] | BaseModel | ParsedInput,
        *,
        started_by: str,
        run_id: str | None = None,
        record: Record | None = None,
        parent: ParentLink | None = None,
    ) -> Run:
        """Write the run's row and enqueue its first attempt, in one transaction.

        The input is parsed first: one that does not parse raises `InputInvalid` and nothing
        is written. Works from any process; no worker needs to run here.

        The run concerns `record`, else the store's, else the one its workflow derives from
        its input (`@workflow(record=...)`), if any: its start is then written to the record's
        activity in the same transaction. A child run (`ctx.start`) is linked to its `parent`
        in it too.
        """
        if self.app is None:
            # Its queue is the app's (`queue_id`): without the app, no worker would serve it.
            raise RemitError(
                f"a run of `{workflow.name}` is started on its app's queue, and this store knows "
                "no app: start it through the app's client (`client.runs.start`) or a "
                "RunStore(app=...)"
            )
        app = self.app
        if isinstance(input, ParsedInput) and input.workflow == workflow.name:
            payload = input.payload
        else:
            payload = parse_input(
                workflow, input.payload if isinstance(input, ParsedInput) else input
            )
        if record is not None:
            record = check_record(record, where=f"start of workflow `{workflow.name}`")
        record = record or self.record or derived_record(workflow, payload)
        run_id = run_id or new_run_id()
        workflow_id = attempt_workflow_id(run_id, 1)
        now = self.clock.now()
        run = Run(
            run_id=run_id,
            workflow=workflow.name,
            queue=queue_id(app, workflow.queue),
            input=payload,
            status="queued",
            attempt=1,
            workflow_id=workflow_id,
            version=None,
            started_by=started_by,
            created_at=now,
            updated_at=now,
            finished_at=None,
            output=None,
            error=None,
        )
        row = {k: v for k, v in run.__dict__.items() if v is not None}
        with self.db.begin() as conn:
            if parent is not None:
                hold(conn, parent.run_id, parent.workflow_id)
            if self.db.is_sqlite:
                conn.execute(_INSERT, row)
            else:  # the row's insert announces the run too: one round trip less
                conn.execute(_INSERT_ANNOUNCED, {**row, "announce_queue": run.queue})
            enqueue_first(conn, client, run, announced=not self.db.is_sqlite)
            if parent is not None:
                conn.execute(
                    children.insert().values(
                        run_id=run_id,
                        parent_run_id=parent.run_id,
                        step_id=parent.step_id,
                        key=parent.key,
                        workflow=workflow.name,
                        detached=parent.detached,
                        created_at=now,
                    )
                )
            audit_row(
                conn,
                at=now,
                actor=started_by,
                action="run.started",
                target=run_id,
                meta={"workflow": workflow.name}
                if parent is None
                else {"workflow": workflow.name, "parent": parent.run_id},
            )
            if record is not None:
                activity_row(
                    conn,
                    RecordRef(app, *record),
                    at=now,
                    kind=RUN_STARTED,
                    actor=started_by,
                    summary=f"started {workflow.name}",
                    run_id=run_id,
                    meta={"workflow": workflow.name, "attempt": 1},
                )
        doorbell.ring(run.queue)  # a worker of this process dequeues it now, not at its poll
        return run

    def get(self, run_id: str) -> Run:
        found = self.find(run_id)
        if found is None:
            raise _not_found(run_id)
        return found

    def timed_since(self, run_id: str) -> datetime:
        """When the run's `timeout=` began to count: its start, or its latest retry (a retry
        gives the run its whole bound again), as the retry's audit row says."""

        def read(conn: sa.Connection) -> tuple[datetime | None, datetime | None]:
            created = conn.execute(
                sa.select(runs.c.created_at).where(runs.c.run_id == run_id)
            ).scalar_one_or_none()
            retried = conn.execute(
                sa.select(audit.c.at)
                .where(audit.c.target == run_id, audit.c.action == "run.retry")
                .order_by(audit.c.id.desc())
                .limit(1)
            ).scalar_one_or_none()
            return created, retried

        created, retried = self.db.read(f"run {run_id}: its start", read)
        if created is None:
            raise _not_found(run_id)
        since: datetime = created if retried is None else max(created, retried)
        return since

    def find(self, run_id: str) -> Run | None:
        """The run, or None when there is no run with that id."""
        if "\x00" in run_id:
            return None  # no id holds a NUL character (and Postgres could not look one up)
        with self.db.engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).one_or_none()
        return None if row is None else _run(row)

    def list(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        app: str | None = None,
        started_by: str | None = None,
        record: Record | None = None,
        since: datetime | None = None,
        id_prefix: str | None = None,
        parent: str | None = None,
        before: tuple[datetime, str] | None = None,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[Run]:
        """Runs, newest first (ties by id). `app` is an app of the repo (`ar`: the workflows
        `ar.*`; `""`: the root's); `record` the record they concern; `since` the earliest
        start; `id_prefix` how their ids begin; `parent` the run that started them as its
        children (`ctx.start`); `before` the (created at, run id) of the last
        run of the page before, for the next page; `only` a further condition (what a
        principal may read, `remit.reads`)."""
        query = sa.select(runs).order_by(runs.c.created_at.desc(), runs.c.run_id).limit(limit)
        if only is not None:
            query = query.where(only)
        if status is not None:
            query = query.where(runs.c.status == status)
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        if app is not None:
            inside = runs.c.workflow.startswith(f"{app}.", autoescape=True)
            query = query.where(inside if app else ~runs.c.workflow.contains(".", autoescape=True))
        if started_by is not None:
            query = query.where(runs.c.started_by == started_by)
        if record is not None:
            query = query.where(runs.c.run_id.in_(runs_of_record(self.app, record)))
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        if id_prefix:
            query = query.where(runs.c.run_id.startswith(id_prefix, autoescape=True))
        if parent is not None:
            query = query.where(
                runs.c.run_id.in_(
                    sa.select(children.c.run_id).where(children.c.parent_run_id == parent)
                )
            )
        if before is not None:
            at, run_id = before
            query = query.where(
                sa.or_(
                    runs.c.created_at < at,
                    sa.and_(runs.c.created_at == at, runs.c.run_id > run_id),
                )
            )
        with self.db.engine.connect() as conn:
            return [_run(row) for row in conn.execute(query)]

    def in_flight(self, workflow: str | None = None) -> builtins.list[tuple[str, str]]:
        """(run id, current attempt's workflow id) of every run of the store's app (of every
        app: a store with none) queued or running; of `workflow` only, when given."""
        query = sa.select(runs.c.run_id, runs.c.workflow_id).where(
            runs.c.status.in_(("queued", "running")), app_runs(self.app)
        )
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        with self.db.engine.connect() as conn:
            rows = conn.execute(query)
            return [(row.run_id, row.workflow_id) for row in rows]

    def claim(self, run_id: str, workflow_id: str, version: str) -> bool:
        """An attempt's first write: mark the run running under `version`.

        False when the run has moved to another attempt, or finished, or was cancelled: the
        attempt must then stop without running anything.
        """
        return self.begin_attempt(run_id, workflow_id, version) is not None

    def begin_attempt(self, run_id: str, workflow_id: str, version: str) -> Claim | None:
        """`claim`, saying whether the attempt begins for the first time (the run was queued)
        or `again` (it was running: DBOS is recovering the attempt after its worker stopped),
        and which record the run concerns; None when the attempt must stop without running
        anything."""
        values = {"status": "running", "version": version}
        for again, statuses in ((False, ("queued",)), (True, ("running",))):
            row = self._claimed(run_id, workflow_id, values, from_statuses=statuses)
            if row is not None:
                return Claim(again=again, concerns=Concerns(ref_of(row)), parent=row.parent_run_id)
        return None

    def conclude(
        self,
        run_id: str,
        workflow_id: str,
        status: RunStatus,
        *,
        output: Any = None,
        error: str | None = None,
        concerns: Concerns | None = None,
    ) -> bool:
        """Write the outcome of the attempt `workflow_id`. False when the fence refused it.

        A run that concerns a record and finishes has its end written to the record's activity
        in the same transaction. `concerns`: that record as the attempt's claim read it (None:
        read it here).
        """
        values: dict[str, Any] = {"status": status, "output": output, "error": error}
        ref = None
        if status in FINISHED:
            values["finished_at"] = self.clock.now()
            ref = self._record_of(run_id) if concerns is None else concerns.record
        if ref is not None:
            written = self._ended(run_id, workflow_id, status, values, ref, error=error)
        else:
            written = self._fenced(run_id, workflow_id, values, from_statuses=("queued", "running"))
        if not written:
            log.info(
                "status write refused: run %s has moved on from attempt %s (wanted %s)",
                run_id,
                workflow_id,
                status,
            )
        return written

    def suspend(self, run_id: str, workflow_id: str, status: RunStatus) -> bool:
        """The attempt `workflow_id` ends with the run `waiting` (or `sleeping`, or `paused`).

        False when the fence refused it: a decision already moved the run to its next attempt.
        """
        return self._fenced(run_id, workflow_id, {"status": status}, from_statuses=("running",))

    def _fenced(
        self,
        run_id: str,
        workflow_id: str,
        values: dict[str, Any],
        *,
        from_statuses: tuple[str, ...],
    ) -> bool:
        values = {**values, "updated_at": self.clock.now()}
        statement, params = status_write(run_id, workflow_id, values, from_statuses=from_statuses)

        def write() -> bool:
            return self.db.execute_one(statement, params) == 1

        # Repeating the write is harmless: the fence and the status guard make it idempotent.
        return self.db.retrying(f"run {run_id}: status write", write)

    def _claimed(
        self,
        run_id: str,
        workflow_id: str,
        values: dict[str, Any],
        *,
        from_statuses: tuple[str, ...],
    ) -> sa.Row[Any] | None:
        """`_fenced`, returning the record the run concerns (`record_of_run_columns`) in the
        same statement: its row, or None when the fence refused the write."""
        values = {**values, "updated_at": self.clock.now()}
        _, params = status_write(run_id, workflow_id, values, from_statuses=from_statuses)
        statement = _claim_statement(from_statuses)
        return self.db.retrying(
            f"run {run_id}: status write", lambda: self.db.execute_first(statement, params)
        )

    def _record_of(self, run_id: str) -> RecordRef | None:
        """The record the run concerns: written with its start, so read before the end's own
        transaction, which then needs no more than its one write for a run that has none."""
        return self.db.read(f"run {run_id}: its record", lambda conn: record_of_run(conn, run_id))

    def _ended(
        self,
        run_id: str,
        workflow_id: str,
        status: str,
        values: dict[str, Any],
        ref: RecordRef,
        *,
        error: str | None,
    ) -> bool:
        """The fenced status write that ends a run concerning `ref`, with its activity row."""
        now = self.clock.now()
        statement, params = status_write(
            run_id, workflow_id, {**values, "updated_at": now}, from_statuses=("queued", "running")
        )

        def write() -> bool:
            with self.db.begin() as conn:
                if conn.execute(statement, params).rowcount != 1:
                    return False
                run_ended(conn, run_id, status, at=now, error=error, ref=ref)
                return True

        return self.db.retrying(f"run {run_id}: status write", write)

    def bump(self, conn: sa.Connection, run_id: str, *, reopen: bool = False) -> tuple[int, str]:
        """Lock the run and move it to its next attempt inside the caller's transaction; see
        `fence.next_attempt`. Returns the new attempt number and its DBOS workflow id."""
        run = lock(conn, run_id)
        if run is None:
            raise _not_found(run_id)
        return next_attempt(conn, run, now=self.clock.now(), reopen=reopen)


# A start's insert of its run's row, built once (its columns are the parameters').
_INSERT = runs.insert()
# On Postgres: the same, with `outbox.announce`'s notification of the run's queue, sent in the
# statement (as its RETURNING) rather than in one of its own.
_INSERT_ANNOUNCED = runs.insert().returning(
    sa.func.pg_notify(CHANNEL, sa.bindparam("announce_queue", type_=sa.String))
)


@functools.cache
def _claim_statement(from_statuses: tuple[str, ...]) -> sa.Update:
    """A claim's status write (`fence.status_write`'s statement), returning the record its run
    concerns and its parent."""
    run_id: sa.BindParameter[str] = sa.bindparam("fence_run")
    parent = (
        sa.select(children.c.parent_run_id)
        .where(children.c.run_id == run_id)
        .scalar_subquery()
        .label("parent_run_id")
    )
    return fenced_update(from_statuses).returning(*record_of_run_columns(run_id), parent)


def output_refused(run_id: str, output: Any) -> str | None:
    """Why a run's output (as JSON) cannot be kept, or None when it can: past
    `REMIT_MAX_OUTPUT_BYTES`, or holding a NUL character. The run then fails with it."""
    try:
        check_json(
            output,
            what="the run's output",
            cap="output_bytes",
            target=run_id,
            after="return a reference to the data instead, or raise the limit",
        )
    except (TooLarge, InputInvalid) as refused:
        return str(refused)
    return None


def enqueue_first(
    conn: sa.Connection, client: DBOSClient, run: Run, *, announced: bool = False
) -> None:
    """Enqueue the run's first attempt inside the caller's transaction, which wrote the run's
    row or holds its lock, and announce it to the workers listening (`outbox.announce`; the
    caller rings this process's doorbell once it commits), unless the transaction `announced`
    it already. Raises if DBOS already holds an attempt of that id."""
    client.enqueue_in_transaction(
        conn,
        {
            "workflow_name": run.workflow,
            "queue_name": run.queue,
            "workflow_id": attempt_workflow_id(run.run_id, 1),
            # The default silently returns an existing workflow of the same id.
            "workflow_id_reuse_policy": "reject",
        },
        run.run_id,
        1,
        run.input,
        run.started_by,
    )
    if not announced:
        announce(conn, run.queue)


def derived_record(workflow: Startable, payload: Mapping[str, Any]) -> Record | None:
    """The record the workflow derives from a run's parsed input (`@workflow(record=...)`), or
    None when it declares none or derives none for this input. Raises `InputInvalid` naming
    the workflow when its function raises or gives something that is not a record."""
    derive = getattr(workflow, "record", None)
    if derive is None:
        return None
    where = f"the record workflow `{workflow.name}` derives from its input (record=...)"
    try:
        given = derive(workflow.input.model_validate(payload))
    except Exception as error:
        raise InputInvalid(
            f"{where} raised {type(error).__name__}: {error}. Fix the function given as "
            "@workflow(record=...); nothing was written",
            target=workflow.name,
            errors=[],
        ) from error
    return None if given is None else check_record(given, where=where)


def _not_found(run_id: str) -> RunNotFound:
    return RunNotFound(f"no run `{run_id}`: `remit runs` lists the runs")


def parse_input(workflow: Startable, input: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    """The run's input as JSON, parsed against the workflow's model. Raises `InputInvalid`
    (for a NUL character in it too, or a field its model does not have, unless the model's
    `model_config` says what to do with extra fields) and `TooLarge` past
    `REMIT_MAX_INPUT_BYTES`."""
    try:
        if isinstance(input, BaseModel):
            input = input.model_dump(mode="json")
        check_json(input, what="the run's input", cap="input_bytes", target=workflow.name)
        refuse_unknown_fields(
            workflow.input, input, what=f"input to workflow `{workflow.name}`", target=workflow.name
        )
        model = workflow.input.model_validate(input)
    except ValidationError as error:
        raise InputInvalid.of(
            error,
            what=f"input to workflow `{workflow.name}`",
            target=workflow.name,
            after="Fix the input and start the run again; nothing was written",
        ) from None
    return json_input(model, what=f"input to workflow `{workflow.name}`", target=workflow.name)


def refuse_unknown_fields(model: type[BaseModel], given: Any, *, what: str, target: str) -> None:
    """Refuse fields `given` names that `model` does not have, unless its `model_config` sets
    `extra` (to allow or ignore them): an unknown field is a mistake, not something to drop."""
    if not isinstance(given, Mapping) or "extra" in model.model_config:
        return
    known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    unknown = [str(name) for name in given if name not in known]
    if not unknown:
        return
    names = ", ".join(f"`{excerpt(name, 40)}`" for name in unknown[:PROBLEMS])
    more = f" and {len(unknown) - PROBLEMS:,} more" if len(unknown) > PROBLEMS else ""
    fields = ", ".join(model.model_fields) or "none"
    raise InputInvalid(
        f"{what} does not parse: {model.__name__} has no field {names}{more} (its fields: "
        f"{fields}): remove {'it' if len(unknown) == 1 else 'them'}, or declare "
        f"{'it' if len(unknown) == 1 else 'them'} in the model (`model_config = "
        'ConfigDict(extra="allow")` keeps fields it does not declare). Nothing was written',
        target=target,
        errors=[
            {
                "loc": [excerpt(name, 40)],
                "msg": "not a field of the model",
                "type": "extra_forbidden",
            }
            for name in unknown[:PROBLEMS]
        ],
    )


def json_input(model: BaseModel, *, what: str, target: str) -> dict[str, Any]:
    """A parsed input as JSON, refusing a number JSON cannot hold (infinity, NaN), which the
    dump would otherwise store as null: a policy, or the run, would read another value."""
    for path, value in _leaves(model.model_dump(), ()):
        if isinstance(value, float) and not math.isfinite(value):
            where = ".".join(str(part) for part in path)
            raise InputInvalid(
                f"{what} does not parse: {where}: {value} is not a number JSON can hold. "
                "Nothing was written",
                target=target,
                errors=[{"loc": list(path), "msg": "not a finite number", "type": "finite"}],
            )
    dumped: dict[str, Any] = model.model_dump(mode="json")
    return dumped


def _leaves(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _run(row: sa.Row[Any]) -> Run:
    return Run(
        run_id=row.run_id,
        workflow=row.workflow,
        queue=row.queue,
        input=row.input,
        status=row.status,
        attempt=row.attempt,
        workflow_id=row.workflow_id,
        version=row.version,
        started_by=row.started_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        output=row.output,
        error=row.error,
    )

"""Tasks: a person says whether a write whose outcome is unknown happened.

A write's ledger row is `started` before its driver is called. When the process making the call
dies mid-call, or the driver fails in a way that may have reached the vendor, and the op is not
idempotent, nothing in remit can tell whether it happened. The row becomes `uncertain` and one
task is opened for it (`TaskOpener.hold`: one per idempotency key, however many processes or
passes find it, since the row, the task and the run are written under the run's lock and the
task's unique key). The run's attempt then ends with the run `waiting`, holding nothing, as at
an approval gate; the op's step records that, so a replay of the step waits again.

`Tasks.resolve` is the one way a task is answered, an answer given as `answers.py` gives every
answer, approvals' decisions too. In one transaction it locks the run, then the task and its
ledger row, and either refuses with every reason (the app's policies, asked as `resolve` on the
task's op, among them) or writes the answer, the ledger row (done: `ok` with the output given;
not done: `not_done`, which the op's next call makes again with the same key, or `failed`, as
the op's `on_not_done` says) and an audit row; if the run waits on the task on its current
attempt, it moves the run to its next attempt, forked from the op's step (`outbox.py`: nothing
before the call runs again). The step, run again, finds the row answered: it returns the
output, calls again, or fails the run. A task of a run that has finished, or of a direct call,
records the answer only.

A task concerns its run's record, if the run names one: its opening and its answer are written
to that record's activity in the transactions that make them (`core/activity.py`).
"""

from __future__ import annotations

import builtins
import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from pydantic import ValidationError

from remit.core.activity import TASK_OPENED, activity_row, record_of_run
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError, TaskNotFound, TaskRefused
from remit.core.fence import attempt_workflow_id, lock
from remit.core.keys import key_problem
from remit.core.ledger import LedgerRow, read_row
from remit.core.limits import check_json
from remit.core.principals import SYSTEM_PREFIX, check_principal
from remit.core.schema import call_inputs, ledger, tasks
from remit.declare.ops import Op
from remit.people.answers import Answer, Answers, KeyedRequest, Replayed, Turn, as_json

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.policy.guard import Guard

log = logging.getLogger("remit.tasks")

TaskStatus = Literal["open", "done", "not_done"]
Then = Literal["continue", "retry", "fail"]
TASK_STATUSES: tuple[str, ...] = ("open", "done", "not_done")
# Who reopens a task when a call made again after "not done" is cut off again.
LEDGER_ACTOR = "remit:ledger"


def task_id_for(idempotency_key: str) -> str:
    """The id of the task of the call keyed `idempotency_key`: one per key, the same in every
    process that opens it."""
    return "tsk_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Task:
    """One task as its row holds it."""

    id: str
    app: str
    run_id: str
    workflow_id: str
    step_id: int
    op_id: str
    idempotency_key: str
    title: str
    status: str
    output: Any
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolve_key: str | None
    resumed_workflow_id: str | None
    # What the call was sent, its secrets redacted (None: not kept, for a call made before
    # remit kept it).
    input: Any = None

    def as_json(self) -> dict[str, Any]:
        return as_json(self.__dict__)


@dataclass(frozen=True)
class Held:
    """The open task a call whose outcome is unknown waits on. `opened` is True when this
    `hold` made the row uncertain (and opened the task, or reopened it)."""

    task_id: str
    message: str
    opened: bool


@dataclass(frozen=True)
class Resolved:
    """What `Tasks.resolve` did (or, replayed, did the first time).

    `then` is what follows for the call: the run `continue`s with the output given, the op is
    called again (`retry`), or the run `fail`s. `resumed_workflow_id` is the attempt the run
    resumes on; None when no attempt waited on the task (the answer is only recorded).
    """

    task_id: str
    run_id: str
    status: str
    then: Then
    resumed_workflow_id: str | None
    replayed: bool = False


class TaskOpener:
    """The call side: makes a write's ledger row `uncertain` and opens its one task."""

    def __init__(self, db: Database, app: str, *, clock: Clock | None = None) -> None:
        self.db = db
        self.app = app
        self.clock = clock or SystemClock()

    def hold(
        self,
        *,
        run_id: str,
        attempt: int,
        step_id: int,
        op_id: str,
        idempotency_key: str,
        reason: str,
        tries: int | None = None,
    ) -> Held | LedgerRow:
        """Make the call's row `uncertain` and open its task, or find both already so; in one
        transaction that locks the run, then the task, then the row. Idempotent.

        A row still `started` becomes `uncertain` and its task is opened (or reopened, when the
        call was made again after a person said it had not happened). An open task moves to
        the attempt `attempt` when that is the run's current one: a resolution resumes the
        attempt that waits. Returns the row instead when a person has answered the task
        meanwhile (it is `ok`, `failed` or `not_done`): the caller acts on the answer.

        When the row becomes `uncertain` and the run concerns a record, the task's opening is
        written to the record's activity in the same transaction.
        """
        key = idempotency_key
        workflow_id = attempt_workflow_id(run_id, attempt)
        task_id = task_id_for(key)
        now = self.clock.now()

        def write() -> Held | LedgerRow:
            with self.db.begin() as conn:
                run = lock(conn, run_id)
                current = run is not None and run.on(workflow_id)
                task = _locked(conn, tasks.c.idempotency_key == key)
                row = read_row(conn, key, for_update=True)
                if row is None:
                    raise RemitError(f"ledger key {key}: no row to mark uncertain")
                if row.status not in ("started", "uncertain"):
                    return row
                opened = row.status == "started"
                info = row.error_info or {}
                message = str(info.get("message") or row.error or reason)
                if opened or info.get("task_id") != task_id:
                    # The row names its task: one just found `started`, or one made uncertain
                    # before tasks existed.
                    message = _asks(reason if opened else message, task_id)
                    values: dict[str, Any] = {
                        "status": "uncertain",
                        "error": message,
                        "error_info": {
                            "kind": "uncertain",
                            "message": message,
                            "idempotency_key": key,
                            "task_id": task_id,
                        },
                    }
                    if opened:
                        values["finished_at"] = now
                    if tries is not None:
                        values["tries"] = tries
                    conn.execute(
                        ledger.update().where(ledger.c.idempotency_key == key).values(**values)
                    )
                place = {"workflow_id": workflow_id, "step_id": step_id}
                if task is None:
                    inserted = conn.execute(
                        self._insert_new().values(
                            id=task_id,
                            app=self.app,
                            run_id=run_id,
                            op_id=op_id,
                            idempotency_key=key,
                            title=_title(op_id),
                            status="open",
                            created_at=now,
                            **place,
                        )
                    ).rowcount
                    if not inserted and _locked(conn, tasks.c.idempotency_key == key) is None:
                        raise RemitError(f"task id {task_id} of key {key} is taken by another key")
                elif task.status != "open":
                    self._reopen(conn, task, place, now)
                elif current and task.workflow_id != workflow_id:
                    conn.execute(tasks.update().where(tasks.c.id == task.id).values(**place))
                ref = record_of_run(conn, run_id) if opened else None
                if ref is not None:
                    activity_row(
                        conn,
                        ref,
                        at=now,
                        kind=TASK_OPENED,
                        actor=LEDGER_ACTOR,
                        summary=(
                            f"{op_id} may or may not have happened: task {task_id} asks a "
                            "person whether it did"
                        ),
                        run_id=run_id,
                        target=task_id,
                        meta={
                            "op": op_id,
                            "idempotency_key": key,
                            "reason": reason,
                            "reopened": task is not None,
                        },
                    )
                return Held(task_id, message, opened)

        return self.db.retrying(f"ledger {key}: uncertain", write)

    def _reopen(
        self, conn: sa.Connection, task: Task, place: dict[str, Any], now: datetime
    ) -> None:
        """The call was made again after a person said it had not happened, and its outcome is
        unknown again: the same task asks again. Its earlier answer stays in the audit."""
        conn.execute(
            tasks.update()
            .where(tasks.c.id == task.id)
            .values(
                status="open",
                output=None,
                created_at=now,
                resolved_at=None,
                resolved_by=None,
                resolve_key=None,
                resumed_workflow_id=None,
                **place,
            )
        )
        audit_row(
            conn,
            at=now,
            actor=LEDGER_ACTOR,
            action="task.reopened",
            target=task.id,
            meta={
                "run_id": task.run_id,
                "op": task.op_id,
                "idempotency_key": task.idempotency_key,
                "was": task.status,
                "workflow_id": place["workflow_id"],
            },
        )
        log.warning("task %s reopened: %s was cut off again", task.id, task.op_id)

    def _insert_new(self) -> Any:
        insert = self.db.insert
        # Another process opening the same task meanwhile: keep theirs.
        return insert(tasks).on_conflict_do_nothing()


class Tasks(Answers):
    """The person's side: list, show and resolve the app's tasks. Usable from any process:
    `resolve` needs no worker here, only the database."""

    def __init__(
        self,
        db: Database,
        client: DBOSClient,
        app: str,
        ops: Mapping[str, Op[Any, Any]],
        *,
        clock: Clock | None = None,
        guard: Guard | None = None,
    ) -> None:
        super().__init__(db, client, guard=guard, clock=clock)
        self.app = app
        self.ops = dict(ops)
        self.opener = TaskOpener(db, app, clock=self.clock)

    def get(self, task_id: str) -> Task:
        row = self._one(tasks, task_id)
        if row is None:
            raise TaskNotFound(f"no task `{task_id}`: `remit tasks` lists the tasks")
        return self._sent([_task(row)])[0]

    def list(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        oldest_first: bool = False,
        only: sa.ColumnElement[bool] | None = None,
    ) -> builtins.list[Task]:
        """The app's tasks, newest first (or oldest first)."""
        query = sa.select(tasks).where(tasks.c.app == self.app)
        rows = self._newest(
            query,
            tasks,
            status=status,
            run_id=run_id,
            limit=limit,
            oldest_first=oldest_first,
            only=only,
        )
        return self._sent([_task(row) for row in rows])

    def _sent(self, found: builtins.list[Task]) -> builtins.list[Task]:
        """`found`, each with what its call was sent."""
        if not found:
            return found
        with self.db.engine.connect() as conn:
            sent = dict(
                conn.execute(
                    sa.select(call_inputs.c.idempotency_key, call_inputs.c.input).where(
                        call_inputs.c.idempotency_key.in_({t.idempotency_key for t in found})
                    )
                ).all()
            )
        return [replace(t, input=sent.get(t.idempotency_key)) for t in found]

    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        by: str,
        key: str | None = None,
    ) -> Resolved:
        """Answer the task: the call happened (`done`, with its `output`) or it did not.

        Done: the ledger row becomes `ok` with `output`, parsed against the op's output model,
        and the run continues as if the call had returned it. Not done: as the op's
        `on_not_done` says, the op is called again with the same key (`retry`) or the run
        fails (`fail`). If the run waits on the task, it resumes on its next attempt.

        `key` makes the call idempotent: the same key again returns the first answer and
        writes and resumes nothing again. Raises `TaskRefused` listing every reason (an
        unknown task, one already resolved, an output that does not parse, an output given
        with not done, the app's policies), having written nothing.
        """
        reasons = []
        try:
            check_principal(by, where="by")
        except RemitError as bad:
            raise TaskRefused(task_id, [str(bad)]) from None
        if by.startswith(SYSTEM_PREFIX):
            reasons.append(
                f"`{by}`: `{SYSTEM_PREFIX}` principals are remit's own; resolve as "
                "user:<name> or agent:<name>"
            )
        problem = None if key is None else key_problem(key, what="key", longest=200, example="t-1")
        if problem is not None:
            reasons.append(problem)
        if reasons:
            raise TaskRefused(task_id, reasons)
        check_json(task_id, what="the task id", cap="op_bytes", target="resolve")
        if output is not None:
            check_json(output, what=f"the answer to task {task_id}", cap="op_bytes", target=task_id)
        answer = _TaskAnswer(
            task_id, done, None if output is None else dict(output), by, key, self.ops
        )
        result = self._give(f"task {task_id}: resolve", answer)
        if not result.replayed:
            log.info("task %s resolved %s by %s: %s", task_id, result.status, by, result.then)
        return result


# What a task's answer locks: the task and its ledger row (None: there is no such task).
_TaskRows = tuple[Task, LedgerRow | None] | None


@dataclass(frozen=True)
class _TaskAnswer(Answer[_TaskRows, Resolved]):
    """A `resolve` call as an answer: it locks the task and its ledger row, and resumes the
    run if its current attempt waits on the task."""

    task_id: str
    done: bool
    output: dict[str, Any] | None
    by: str
    key: str | None
    ops: Mapping[str, Op[Any, Any]]

    @property
    def status(self) -> str:
        return "done" if self.done else "not_done"

    def run_ids(self, conn: sa.Connection) -> Iterable[str]:
        return conn.execute(sa.select(tasks.c.run_id).where(tasks.c.id == self.task_id)).scalars()

    def lock(self, conn: sa.Connection) -> _TaskRows:
        task = _locked(conn, tasks.c.id == self.task_id)
        if task is None:
            return None
        return task, read_row(conn, task.idempotency_key, for_update=True)

    def keyed(self) -> KeyedRequest | None:
        if self.key is None:
            return None
        body = {"task": self.task_id, "done": self.done, "output": self.output, "by": self.by}
        summary = f"answer task {self.task_id} {self.status.replace('_', ' ')} as {self.by}"
        return KeyedRequest("task", self.key, "key", body, summary)

    def replay(self, conn: sa.Connection) -> Replayed[Resolved] | None:
        """The same key again: the first answer, and its resume if it is still to fork."""
        if self.key is None:
            return None
        row = conn.execute(sa.select(tasks).where(tasks.c.id == self.task_id)).one_or_none()
        task = None if row is None else _task(row)
        if task is None or task.resolve_key != self.key:
            return None
        if task.status != self.status:
            raise TaskRefused(
                task.id,
                [
                    f"key {self.key!r} already resolved it {task.status}: use a new key "
                    "for another answer"
                ],
            )
        if task.resolved_by != self.by:
            # A key replays its own answer only: someone else's would skip the policies.
            raise TaskRefused(
                task.id,
                [f"key {self.key!r} is {task.resolved_by}'s answer: use a key of your own"],
            )
        then: Then = "continue"
        if not self.done:
            op = self.ops.get(task.op_id)
            then = "fail" if op is None else op.on_not_done
        resumed = task.resumed_workflow_id
        result = Resolved(task.id, task.run_id, task.status, then, resumed, replayed=True)
        return Replayed(result, [] if resumed is None else [resumed])

    def give(self, turn: Turn, locked: _TaskRows) -> Resolved:
        if locked is None:
            raise TaskRefused(
                self.task_id, [f"there is no task {self.task_id}: `remit tasks` lists them"]
            )
        task, row = locked
        run = turn.runs.get(task.run_id)
        op = self.ops.get(task.op_id)
        context = {
            "done": self.done,
            "workflow": "" if run is None else run.workflow,
            "input": {} if run is None else run.input,
        }
        refused = turn.policy.refusal(
            self.by, "resolve", task.op_id, context, about=("task", task.id)
        )
        output = _refusals(task, self, op, row, refused)
        assert op is not None  # refused otherwise
        then: Then = "continue" if self.done else op.on_not_done
        _write_ledger(turn.conn, task, self, op, output)
        resume = None
        if run is not None and run.on(task.workflow_id):
            # The run's current attempt stopped at this call: carry it on from there.
            resume = turn.resume(run, task.step_id)
        resumed = None if resume is None else resume.workflow_id
        turn.conn.execute(
            tasks.update()
            .where(tasks.c.id == task.id)
            .values(
                status=self.status,
                output=output,
                resolved_at=turn.now,
                resolved_by=self.by,
                resolve_key=self.key,
                resumed_workflow_id=resumed,
            )
        )
        audit_row(
            turn.conn,
            at=turn.now,
            actor=self.by,
            action=f"task.{self.status}",
            target=task.id,
            meta={
                "run_id": task.run_id,
                "op": task.op_id,
                "idempotency_key": task.idempotency_key,
                "output": output,
                "then": then,
                "key": self.key,
                "resumed_workflow_id": resumed,
            },
        )
        ref = record_of_run(turn.conn, task.run_id)
        if ref is not None:
            happened = "happened" if self.done else "did not happen"
            activity_row(
                turn.conn,
                ref,
                at=turn.now,
                kind=f"task.{self.status}",
                actor=self.by,
                summary=f"{task.op_id} {happened}, as {self.by} confirmed (task {task.id})",
                run_id=task.run_id,
                target=task.id,
                meta={
                    "op": task.op_id,
                    "idempotency_key": task.idempotency_key,
                    "output": output,
                    "then": then,
                    "resumed_workflow_id": resumed,
                },
            )
        return Resolved(task.id, task.run_id, self.status, then, resumed)


def _write_ledger(
    conn: sa.Connection, task: Task, answer: _TaskAnswer, op: Op[Any, Any], output: Any
) -> None:
    """The call's ledger row as the answer makes it."""
    values: dict[str, Any]
    if answer.done:
        values = {"status": "ok", "output": output, "error": None, "error_info": None}
    else:
        if op.on_not_done == "retry":
            status, message = (
                "not_done",
                (
                    f"`{task.op_id}` (key {task.idempotency_key}) did not happen, as "
                    f"{answer.by} confirmed (task {task.id}): it is called again with the same "
                    "key"
                ),
            )
        else:
            status, message = (
                "failed",
                (
                    f"`{task.op_id}` (key {task.idempotency_key}) did not happen, as "
                    f"{answer.by} confirmed (task {task.id}), and the op declares "
                    'on_not_done="fail", so the run fails. Declare on_not_done="retry" on the '
                    "op to have it called again instead"
                ),
            )
        info = {"kind": "not_done", "message": message, "task_id": task.id}
        values = {"status": status, "error": message, "error_info": info}
    conn.execute(
        ledger.update().where(ledger.c.idempotency_key == task.idempotency_key).values(**values)
    )


def _refusals(
    task: Task,
    answer: _TaskAnswer,
    op: Op[Any, Any] | None,
    row: LedgerRow | None,
    refused: str | None,
) -> Any:
    """The output to record (None for not done), or `TaskRefused` with every reason, the
    policies' `refused` among them."""
    reasons: list[str] = []
    output = None
    if task.status != "open":
        when = "" if task.resolved_at is None else f" at {task.resolved_at:%Y-%m-%d %H:%M:%S}"
        reasons.append(
            f"it is already resolved {task.status} by {task.resolved_by}{when}: an answer "
            "stands once given"
        )
    elif row is None or row.status != "uncertain":
        shown = "missing" if row is None else row.status
        reasons.append(f"its ledger row ({task.idempotency_key}) is {shown}, not uncertain")
    if op is None:
        reasons.append(
            f"its op `{task.op_id}` is no longer declared by the app, so remit cannot check an "
            "output or tell whether to call it again: declare the op again"
        )
    if answer.done and op is not None:
        try:
            output = op.output.model_validate(answer.output or {}).model_dump(mode="json")
        except ValidationError as error:
            for problem in error.errors(include_url=False):
                field = ".".join(str(part) for part in problem["loc"]) or "output"
                reasons.append(
                    f"the output does not parse as {op.output.__name__} (the output of "
                    f"`{op.id}`): `{field}`: {problem['msg']}"
                )
    if not answer.done and answer.output is not None:
        reasons.append(
            "an output goes with done only: a call that did not happen has none; leave it out"
        )
    if refused is not None:
        reasons.append(refused)
    if reasons:
        raise TaskRefused(task.id, reasons, by_policy=reasons == [refused])
    return output


def _asks(reason: str, task_id: str) -> str:
    return (
        f"{reason}; task {task_id} asks a person whether it happened: "
        f"`remit task resolve {task_id} --done` or `--not-done`"
    )


def _title(op_id: str) -> str:
    return f"Did {op_id} happen? Its outcome was never recorded: check with the vendor"


def _locked(conn: sa.Connection, where: sa.ColumnElement[bool]) -> Task | None:
    row = conn.execute(sa.select(tasks).where(where).with_for_update()).one_or_none()
    return None if row is None else _task(row)


def _task(row: sa.Row[Any]) -> Task:
    return Task(
        **{name: row._mapping[name] for name in Task.__dataclass_fields__ if name != "input"}
    )

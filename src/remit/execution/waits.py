"""Runs that wait for the world: a message on a topic (`ctx.wait_for`), child runs (`ctx.start`,
`ctx.wait`), and what a run shows the world meanwhile (`ctx.publish`).

A wait is a step, as a gate is. Its body, in one transaction holding the run, takes the oldest
message kept for the run on its topic (or reads the children's ends); with nothing there yet it
writes a wait row and the attempt ends with the run `waiting`, holding nothing. What it waits
for moves the run on, forked from the step (`core/fence.py`, `core/outbox.py`): a message's send
(`ops/messages.py`), the last child's end (`core/waiting.py`), or its timeout passing (the
sweep, below). The step, run again, then finds what it waited for. Each message is taken once,
at one step, in the order it was sent; a step run again answers with the message it took.

Starting a child is a step too: the child's id is derived from its parent's and the start's
key, and the child's row, its first attempt and its link to the parent are written in one
transaction, so the step run again finds the child it started and starts no other.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import AppError, ChildFailed, InputInvalid, RemitError, Suspended
from remit.core.fence import FINISHED, advance, hold, is_current, lock
from remit.core.limits import check_json
from remit.core.outbox import Resume, Resumer
from remit.core.runs import RunInfo
from remit.core.schema import children, messages, run_state, runs, waits
from remit.core.waiting import children_ready, first_waiting, wake_parent

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.declare.workflows import Workflow

log = logging.getLogger("remit.waits")


class ChildHandle(BaseModel):
    """A child run a workflow started (`ctx.start`): give it to `ctx.wait`."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    workflow: str
    key: str


@dataclass(frozen=True)
class ChildStart:
    """A child run to start: the parent's run, the step that starts it, and what it runs."""

    parent: RunInfo
    step_id: int
    run_id: str
    workflow: str
    input: dict[str, Any]
    key: str
    detached: bool


def child_run_id(parent_run_id: str, key: str) -> str:
    """The id of the child its parent starts under `key`: the same on every try of the step."""
    digest = hashlib.sha256(f"{parent_run_id}\nchild\n{key}".encode()).hexdigest()[:16]
    return f"run_{digest}"


def seconds_of(duration: timedelta | float | None, *, what: str) -> float | None:
    """A timeout given as a timedelta or seconds, checked: positive, or None."""
    if duration is None:
        return None
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise InputInvalid(
            f"{what}: give the timeout as a timedelta or seconds, more than 0 (got {duration!r})",
            target=what,
            errors=[],
        )
    return float(seconds)


class Waits:
    """The run side: the bodies of the steps of `ctx.wait_for`, `ctx.start`, `ctx.wait` and
    `ctx.publish`, and what turns their checkpoints into values."""

    def __init__(
        self,
        db: Database,
        *,
        workflows: Mapping[str, Workflow],
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.workflows = workflows
        self.clock = clock or SystemClock()
        # Starts a child run, with the app's policies: the worker gives it (`ChildStart`).
        self.starter: Callable[[ChildStart], None] | None = None
        # Forks the attempts a run's end moved its parent to (the worker gives its resumer).
        self.fork: Callable[[list[Resume]], None] = lambda resumes: None

    # -- messages --------------------------------------------------------------------------

    def take(
        self,
        run: RunInfo,
        step_id: int,
        topic: str,
        timeout: float | None,
        problem: Callable[[Any], str | None],
    ) -> dict[str, Any]:
        """The body of a `ctx.wait_for` step: the message it took (or refused, when `problem`
        finds one in its payload), its timeout passing, or still pending. Idempotent: the
        message a step took is its answer on every try. Locks the run (shared) first."""
        now = self.clock.now()

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold(conn, run.run_id, run.workflow_id)
                key = (waits.c.run_id == run.run_id, waits.c.step_id == step_id)
                # The message this step took, on an earlier try; one it refused failed the run,
                # and a retry of the run waits here for the next.
                taken = conn.execute(
                    sa.select(messages).where(
                        messages.c.run_id == run.run_id,
                        messages.c.step_id == step_id,
                        messages.c.status == "taken",
                    )
                ).one_or_none()
                if taken is not None:
                    return _message_json(taken)
                wait = conn.execute(sa.select(waits).where(*key)).one_or_none()
                if wait is None:
                    deadline = None if timeout is None else now + timedelta(seconds=timeout)
                    conn.execute(
                        self.db.insert(waits)
                        .values(
                            run_id=run.run_id,
                            step_id=step_id,
                            kind="message",
                            topic=topic,
                            workflow_id=run.workflow_id,
                            created_at=now,
                            deadline=deadline,
                            status="waiting",
                        )
                        .on_conflict_do_nothing(index_elements=["run_id", "step_id"])
                    )
                    wait = conn.execute(sa.select(waits).where(*key)).one()
                while True:
                    first = conn.execute(
                        sa.select(messages)
                        .where(
                            messages.c.run_id == run.run_id,
                            messages.c.topic == topic,
                            messages.c.status == "queued",
                        )
                        .order_by(messages.c.seq)
                        .limit(1)
                    ).one_or_none()
                    if first is None:
                        break
                    said = problem(first.payload)
                    status = "taken" if said is None else "refused"
                    # Another step of the run (an async workflow's) may take it first.
                    if (
                        conn.execute(
                            messages.update()
                            .where(messages.c.seq == first.seq, messages.c.status == "queued")
                            .values(status=status, step_id=step_id, taken_at=now, error=said)
                        ).rowcount
                        == 1
                    ):
                        conn.execute(waits.update().where(*key).values(status="done"))
                        return {**_message_json(first), "status": status, "error": said}
                if wait.status == "timed_out" or (
                    wait.deadline is not None and now >= wait.deadline
                ):
                    conn.execute(waits.update().where(*key).values(status="timed_out"))
                    return {"status": "timed_out", "topic": topic}
                conn.execute(
                    waits.update().where(*key).values(status="waiting", workflow_id=run.workflow_id)
                )
                return {
                    "status": "pending",
                    "topic": topic,
                    "deadline": None if wait.deadline is None else wait.deadline.isoformat(),
                }

        return self.db.retrying(f"run {run.run_id}: wait for {topic} at step {step_id}", write)

    @staticmethod
    def message(run_id: str, row: Mapping[str, Any], adapter: TypeAdapter[Any] | None) -> Any:
        """The value of a `ctx.wait_for` step from its checkpoint: the message parsed, None when
        its timeout passed; `InputInvalid` for a message refused; `Suspended` while pending."""
        status = row["status"]
        topic = row["topic"]
        if status == "pending":
            until = f" until {row['deadline']}" if row.get("deadline") else ""
            raise Suspended("waiting", f"waits for a message on `{topic}`{until}")
        if status == "timed_out":
            return None
        if status == "refused":
            raise InputInvalid(
                f"run {run_id}: message {row['seq']} on `{topic}` does not parse: "
                f"{row['error']}. It is kept, refused (`remit show {run_id}`): send a "
                "corrected one",
                target=topic,
                errors=[],
            )
        payload = row["payload"]
        return payload if adapter is None else adapter.validate_python(payload)

    # -- child runs -------------------------------------------------------------------------

    def start(self, start: ChildStart) -> dict[str, Any]:
        """The body of a `ctx.start` step: start the child, or find the one this step started.
        Raises what the start was refused with (its input, the policies)."""
        if self.starter is None:
            raise RemitError("this process starts no child runs: a worker's runs do")
        first = self._child(start.run_id)
        if first is None:
            try:
                self.starter(start)
            except sa.exc.IntegrityError:
                # Another try of this step started it first.
                first = self._child(start.run_id)
                if first is None:
                    raise
        if first is not None and (
            first.parent_run_id != start.parent.run_id or first.step_id != start.step_id
        ):
            raise AppError(
                f"child key `{start.key}` is taken by an earlier start of run "
                f"{start.parent.run_id} (step {first.step_id}): give each ctx.start its own "
                f"key, e.g. f'{start.key}-{{n}}' in a loop"
            )
        return {"run_id": start.run_id, "workflow": start.workflow, "key": start.key}

    def _child(self, run_id: str) -> sa.Row[Any] | None:
        with self.db.engine.connect() as conn:
            return conn.execute(sa.select(children).where(children.c.run_id == run_id)).first()

    def wait_children(
        self, run: RunInfo, step_id: int, handles: list[ChildHandle]
    ) -> dict[str, Any]:
        """The body of a `ctx.wait` step: every child's end once all have ended, else a wait
        row and pending. Idempotent. Locks the run (shared) first."""
        now = self.clock.now()
        ids = [handle.run_id for handle in handles]

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold(conn, run.run_id, run.workflow_id)
                mine = set(
                    conn.execute(
                        sa.select(children.c.run_id).where(
                            children.c.parent_run_id == run.run_id, children.c.run_id.in_(ids)
                        )
                    ).scalars()
                )
                strangers = [run_id for run_id in ids if run_id not in mine]
                if strangers:
                    raise AppError(
                        f"run {run.run_id} waits for {', '.join(strangers)}, which it did not "
                        "start: ctx.wait takes the handles its own ctx.start returned"
                    )
                # The children's rows are held (shared) till the wait row commits: a child's
                # end, which writes its row, then commits after it, and its look for a parent
                # waiting on it (`core/waiting.py`, a read without the parent's lock) sees it.
                rows = {
                    row.run_id: row
                    for row in conn.execute(
                        sa.select(
                            runs.c.run_id,
                            runs.c.workflow,
                            runs.c.status,
                            runs.c.output,
                            runs.c.error,
                        )
                        .where(runs.c.run_id.in_(ids))
                        .order_by(runs.c.run_id)
                        .with_for_update(read=True)
                    )
                }
                key = (waits.c.run_id == run.run_id, waits.c.step_id == step_id)
                if all(rows[run_id].status in FINISHED for run_id in ids):
                    conn.execute(waits.update().where(*key).values(status="done"))
                    return {
                        "status": "done",
                        "children": [
                            {
                                "run_id": run_id,
                                "workflow": rows[run_id].workflow,
                                "status": rows[run_id].status,
                                "output": rows[run_id].output,
                                "error": rows[run_id].error,
                            }
                            for run_id in ids
                        ],
                    }
                conn.execute(
                    self.db.insert(waits)
                    .values(
                        run_id=run.run_id,
                        step_id=step_id,
                        kind="children",
                        children=ids,
                        workflow_id=run.workflow_id,
                        created_at=now,
                        status="waiting",
                    )
                    .on_conflict_do_update(
                        index_elements=["run_id", "step_id"],
                        set_={"workflow_id": run.workflow_id, "status": "waiting"},
                    )
                )
                left = [run_id for run_id in ids if rows[run_id].status not in FINISHED]
                return {"status": "pending", "waiting_for": left}

        return self.db.retrying(f"run {run.run_id}: wait for children at step {step_id}", write)

    def ends(self, row: Mapping[str, Any]) -> list[Any]:
        """The outputs of a `ctx.wait` step's children, in order, each parsed as its workflow
        returns; `ChildFailed` for the first that did not end done; `Suspended` while one
        runs."""
        if row["status"] == "pending":
            left = ", ".join(row["waiting_for"])
            raise Suspended("waiting", f"waits for its child runs {left}")
        outputs: list[Any] = []
        for child in row["children"]:
            if child["status"] != "done":
                raise ChildFailed(
                    run_id=child["run_id"],
                    workflow=child["workflow"],
                    status=child["status"],
                    error=child["error"],
                )
            workflow = self.workflows.get(child["workflow"])
            output = child["output"]
            outputs.append(output if workflow is None else workflow.parse_output(output))
        return outputs

    def ended(self, run_id: str) -> None:
        """After `run_id` ended: move its parent on if it waited for it (and fork it now). A
        failure is logged; the sweep moves the parent on."""
        try:
            resume = wake_parent(self.db, run_id, now=self.clock.now())
        except Exception:
            log.exception("run %s ended: its parent could not be moved on; the sweep will", run_id)
            return
        if resume is not None:
            self.fork([resume])

    # -- published state ---------------------------------------------------------------------

    def publish(self, run: RunInfo, step_id: int, key: str, value: Any) -> dict[str, Any]:
        """The body of a `ctx.publish` step: the key's value, now the run's latest."""
        now = self.clock.now()

        def write() -> dict[str, Any]:
            with self.db.begin() as conn:
                hold(conn, run.run_id, run.workflow_id)
                conn.execute(
                    self.db.insert(run_state)
                    .values(
                        run_id=run.run_id, key=key, value=value, step_id=step_id, updated_at=now
                    )
                    .on_conflict_do_update(
                        index_elements=["run_id", "key"],
                        set_={"value": value, "step_id": step_id, "updated_at": now},
                    )
                )
            return {"key": key}

        return self.db.retrying(f"run {run.run_id}: publish {key}", write)


def check_published(key: str, value: Any) -> Any:
    """`value` as JSON, within the output limit; refused naming the key."""
    from pydantic_core import to_jsonable_python

    try:
        jsonable = to_jsonable_python(value)
    except Exception as error:
        raise InputInvalid(
            f"ctx.publish({key!r}, ...): the value is not JSON ({type(error).__name__}: {error}): "
            "publish plain data or a pydantic model",
            target=key,
            errors=[],
        ) from None
    check_json(jsonable, what=f"the value published as `{key}`", cap="output_bytes", target=key)
    return jsonable


def payload_problem(adapter: TypeAdapter[Any] | None, what: str) -> Callable[[Any], str | None]:
    """What is wrong with a message's payload for a wait whose model `adapter` parses (None:
    nothing), one problem per field."""

    def problem(payload: Any) -> str | None:
        if adapter is None:
            return None
        try:
            adapter.validate_python(payload)
        except ValidationError as error:
            found = error.errors(include_url=False, include_input=False)
            said = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in found
            )
            return f"as {what}: {said}"
        return None

    return problem


def _message_json(row: Any) -> dict[str, Any]:
    return {
        "status": row.status,
        "topic": row.topic,
        "seq": row.seq,
        "payload": row.payload,
        "sent_by": row.sent_by,
        "error": row.error,
    }


@dataclass(frozen=True)
class Moved:
    """A run a sweep moved on past a wait: its timeout passed, or its children ended."""

    run_id: str
    step_id: int
    why: str
    resumed_workflow_id: str


class WaitSweep:
    """The sweep side: moves on the runs whose wait for a message timed out, and the parents
    whose children have all ended (a parent their ends did not move on: its worker was down,
    the child's end was written by the reconciler or a cancel)."""

    def __init__(self, db: Database, client: DBOSClient, *, clock: Clock | None = None) -> None:
        self.db = db
        self.clock = clock or SystemClock()
        self.resumer = Resumer(db, client, clock=self.clock)
        # Where the last sweep's page of waiting parents ended: each sweep reads the next page,
        # so a parent behind more than a page of others still waiting is found all the same.
        self._after: tuple[datetime, str, int] | None = None

    def due(self, *, limit: int = 100) -> list[Moved]:
        now = self.clock.now()
        with self.db.engine.connect() as conn:
            timed_out = list(
                conn.execute(
                    sa.select(waits.c.run_id, waits.c.step_id)
                    .join(runs, runs.c.run_id == waits.c.run_id)
                    .where(
                        waits.c.status == "waiting",
                        waits.c.deadline <= now,
                        is_current(waits.c.workflow_id),
                        runs.c.status.in_(("waiting", "running")),
                    )
                    .order_by(waits.c.deadline)
                    .limit(limit)
                )
            )
            # Only a parent whose children have all ended is locked and moved on: a read
            # finds them, so parents still waiting cost no write.
            waiting = list(
                conn.execute(
                    sa.select(waits.c.created_at, waits.c.run_id, waits.c.step_id, waits.c.children)
                    .join(runs, runs.c.run_id == waits.c.run_id)
                    .where(
                        waits.c.status == "waiting",
                        waits.c.kind == "children",
                        is_current(waits.c.workflow_id),
                        runs.c.status.in_(("waiting", "running")),
                        _past(self._after),
                    )
                    .order_by(waits.c.created_at, waits.c.run_id, waits.c.step_id)
                    .limit(limit)
                )
            )
            last = waiting[-1] if len(waiting) == limit else None
            self._after = None if last is None else (last.created_at, last.run_id, last.step_id)
            wanted = sorted({child for row in waiting for child in row.children or []})
            ended: set[str] = set()
            for at in range(0, len(wanted), 500):
                ended.update(
                    conn.execute(
                        sa.select(runs.c.run_id).where(
                            runs.c.run_id.in_(wanted[at : at + 500]),
                            runs.c.status.in_(tuple(FINISHED)),
                        )
                    ).scalars()
                )
            parents = sorted({row.run_id for row in waiting if set(row.children or []) <= ended})
        moved: list[Moved] = []
        for run_id, step_id in timed_out:
            done = self._try(run_id, functools.partial(self._time_out, run_id, step_id, now))
            if done is not None:
                moved.append(Moved(run_id, step_id, "timed out", done.workflow_id))
        for run_id in parents:
            done = self._try(run_id, functools.partial(self._children, run_id, now))
            if done is not None:
                moved.append(Moved(run_id, done.from_step, "children ended", done.workflow_id))
        return moved

    def _try(self, run_id: str, once: Callable[[], Resume | None]) -> Resume | None:
        try:
            resume = self.db.retrying(f"run {run_id}: its wait", once)
        except Exception:
            log.exception("wait: run %s could not be moved on; next sweep", run_id)
            return None
        if resume is not None:
            self.resumer.fork_all([resume])
            log.info("run %s moved on past its wait (step %d)", run_id, resume.from_step)
        return resume

    def _time_out(self, run_id: str, step_id: int, now: datetime) -> Resume | None:
        with self.db.begin() as conn:
            run = lock(conn, run_id)
            key = (waits.c.run_id == run_id, waits.c.step_id == step_id)
            wait = conn.execute(sa.select(waits).where(*key).with_for_update()).one_or_none()
            if (
                run is None
                or wait is None
                or wait.status != "waiting"
                or not run.on(wait.workflow_id, ("waiting", "running"))
            ):
                return None  # taken, moved on or cancelled meanwhile
            conn.execute(waits.update().where(*key).values(status="timed_out"))
            first = first_waiting(conn, run_id, run.workflow_id)
            resume = advance(conn, run, step_id if first is None else min(first, step_id), now=now)
            conn.execute(waits.update().where(*key).values(resumed_workflow_id=resume.workflow_id))
            return resume

    def _children(self, run_id: str, now: datetime) -> Resume | None:
        with self.db.begin() as conn:
            return children_ready(conn, run_id, now=now)


def _past(after: tuple[datetime, str, int] | None) -> sa.ColumnElement[bool]:
    """SQL: the wait comes after `after` (created at, run id, step id) in a sweep's order."""
    if after is None:
        return sa.true()
    at, run_id, step_id = after
    return sa.or_(
        waits.c.created_at > at,
        sa.and_(
            waits.c.created_at == at,
            sa.or_(
                waits.c.run_id > run_id,
                sa.and_(waits.c.run_id == run_id, waits.c.step_id > step_id),
            ),
        ),
    )


def ids_of(handles: Iterable[ChildHandle | str]) -> list[ChildHandle]:
    """Handles given to `ctx.wait_all`, checked."""
    found: list[ChildHandle] = []
    for handle in handles:
        if not isinstance(handle, ChildHandle):
            raise InputInvalid(
                f"ctx.wait takes the handles ctx.start returned, not {type(handle).__name__}",
                target="ctx.wait",
                errors=[],
            )
        found.append(handle)
    return found

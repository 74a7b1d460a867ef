"""`remit deploy check`: before shipping new code, replay it against every run still going.

For each run that has not finished (queued, running, waiting, sleeping, paused, or waiting at a
task), the new code's workflow function runs with a `ctx` that answers every step, op call,
gate and sleep from the run's record and stops at the run's resume point: the point its next
attempt would carry on from. Each position is checked against the record with the same check
a live resume makes (`journal.py`), so a run the check passes carries on, and a run it fails
would fail with the same message. Nothing is executed: no op is called, no row is written and
no DBOS workflow is started; only reads are made.

The resume point of a run:
- waiting at a gate: the gate's step (it reads its decision there);
- waiting at a task: the call's step (it reads the person's answer there);
- sleeping: the sleep's step (it finds its timer there, with its first wake time);
- waiting for a message or for children: the wait's step (it takes the message there, or
  reads the children's ends);
- queued, running or paused: after the last step its current attempt recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic import ValidationError

from remit.app import App
from remit.budgets.store import Budgets
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import CodeChanged, RemitError, RunMovedOn, Suspended
from remit.core.ledger import LedgerStore
from remit.core.runs import FINISHED, RunInfo, app_runs, attempt_workflow_id
from remit.core.schema import approvals, resumes, runs, tasks, timers, waits
from remit.declare.workflows import Workflow
from remit.execution.async_context import AsyncContext
from remit.execution.calls import OpCaller
from remit.execution.context import Context
from remit.execution.journal import (
    CUT_OFF,
    Journal,
    Mark,
    load_marks_of,
    passed_steps,
    sleep_mark,
)
from remit.execution.positions import Slot
from remit.execution.timers import DEFAULT_SUSPEND_AFTER, Timers
from remit.execution.waits import Waits
from remit.people.gates import Gates
from remit.people.tasks import TaskOpener

if TYPE_CHECKING:
    from dbos import DBOSClient, StepOptions

log = logging.getLogger("remit.deploy")


@dataclass(frozen=True)
class RunCheck:
    """One run's replay: where it would resume, and why it would fail (None: it carries on)."""

    run_id: str
    workflow: str
    status: str
    resume_at: int
    failure: str | None

    @property
    def carries_on(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class DeployReport:
    """Every unfinished run, replayed against the code loaded now."""

    version: str
    checked: list[RunCheck]

    @property
    def failing(self) -> list[RunCheck]:
        return [check for check in self.checked if not check.carries_on]

    @property
    def carrying_on(self) -> int:
        return sum(check.carries_on for check in self.checked)

    @property
    def ok(self) -> bool:
        return not self.failing


class _Reached(BaseException):
    """The replay got to the run's resume point: what follows is the run's future."""


class _ReplaySlot:
    def __init__(self, steps: ReplaySteps, position: int) -> None:
        self._steps = steps
        self.position = position

    def run(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        return self._steps.answer(self.position, mark)

    async def run_async(self, mark: Mark, options: StepOptions, body: Callable[[], Any]) -> Any:
        return self._steps.answer(self.position, mark)


class ReplaySteps:
    """A replay's positions: each operation is checked against the run's journal and
    answered from its record, never run; the replay stops at the resume point."""

    def __init__(self, journal: Journal, outputs: Mapping[int, tuple[Any, Any]]) -> None:
        self.journal = journal
        self.outputs = outputs
        self.position = 0
        # Set once the replay got to the resume point (even if the code caught the stop).
        self.reached = False

    def reserve(self) -> Slot:
        self.position += 1
        return _ReplaySlot(self, self.position)

    def answer(self, position: int, mark: Mark) -> Any:
        self.journal.check(position, mark)
        if position >= self.journal.resume_at or position not in self.outputs:
            self.reached = True
            raise _Reached
        output, error = self.outputs[position]
        if error is not None:
            raise RemitError(f"step {position} recorded an error: {error}")
        return output

    def patch(self, name: str) -> bool:
        position = self.position + 1
        if self.journal.patch_taken(position, name) is False:
            return False  # the run had passed this point before the change
        self.position = position
        self.journal.passed(position)
        return True

    async def patch_async(self, name: str) -> bool:
        return self.patch(name)

    def short_sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.reserve().run(sleep_mark(short=True), {}, lambda: None)

    async def short_sleep_async(self, seconds: float) -> None:
        self.short_sleep(seconds)


@dataclass
class _Known:
    """What the replays of one check read in bulk: the attempts DBOS holds, the outbox, where
    waiting and sleeping attempts stand, and remit's marks of each run."""

    held: set[str]
    # Each attempt DBOS holds, by its status.
    statuses: dict[str, str] = field(default_factory=dict)
    outbox: dict[str, tuple[str, int]] = field(default_factory=dict)
    stands_at: dict[str, int] = field(default_factory=dict)
    marks: dict[str, dict[int, Mark]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Unfinished:
    run_id: str
    workflow: str
    status: str
    workflow_id: str
    attempt: int
    input: Any
    actor: str


class DeployCheck:
    """Replays the app's unfinished runs against its code as loaded now."""

    def __init__(
        self,
        app: App,
        db: Database,
        client: DBOSClient,
        *,
        suspend_after: float = DEFAULT_SUSPEND_AFTER,
        clock: Clock | None = None,
        version: str | None = None,
    ) -> None:
        self.app = app
        self.version = version or app.version
        self.db = db
        self.client = client
        clock = clock or SystemClock()
        # What a `ctx` is built with; the replay calls none of it (nothing runs).
        self.caller = OpCaller(
            implementations={},
            ledger=LedgerStore(db, clock=clock),
            clock=clock,
            environ={},
            tasks=TaskOpener(db, app.name, clock=clock),
            budgets=Budgets(db, app.name, app.budgets, clock=clock),
            prices=app.llm_prices,
        )
        self.gates = Gates(db, app.approval_types, clock=clock)
        self.timers = Timers(db, suspend_after=suspend_after, clock=clock)
        self.waits = Waits(db, workflows=app.workflows, clock=clock)

    def run(self, run_ids: Iterable[str] | None = None) -> DeployReport:
        """Replay every unfinished run of the app (or those of `run_ids`)."""
        unfinished = self._unfinished(None if run_ids is None else list(run_ids))
        known = self._known(unfinished)
        checked = [self._check(run, known) for run in unfinished]
        return DeployReport(self.version, checked)

    def _known(self, unfinished: list[_Unfinished]) -> _Known:
        """What the replays read of remit's rows and DBOS's workflows, a few queries in all."""
        ids = [run.run_id for run in unfinished]
        attempts = [run.workflow_id for run in unfinished]
        statuses: dict[str, str] = {}
        for at in range(0, len(attempts), 500):
            statuses.update(
                (found.workflow_id, found.status)
                for found in self.client.list_workflows(
                    workflow_ids=attempts[at : at + 500], load_input=False, load_output=False
                )
            )
        known = _Known(held=set(statuses), statuses=statuses)
        with self.db.engine.connect() as conn:
            known.marks = load_marks_of(conn, ids)
            for at in range(0, len(ids), 500):
                chunk = ids[at : at + 500]
                for row in conn.execute(sa.select(resumes).where(resumes.c.run_id.in_(chunk))):
                    known.outbox[row.workflow_id] = (row.from_workflow_id, row.from_step)
                for table, status in (
                    (approvals, "pending"),
                    (tasks, "open"),
                    (timers, "sleeping"),
                    (waits, "waiting"),
                ):
                    for row in conn.execute(
                        sa.select(table.c.workflow_id, sa.func.min(table.c.step_id))
                        .where(table.c.run_id.in_(chunk), table.c.status == status)
                        .group_by(table.c.workflow_id)
                    ):
                        # The first it stands at (a gate, a task, a sleep, a wait for a message
                        # or children) is where it resumes.
                        at = int(row[1])
                        known.stands_at[row[0]] = min(known.stands_at.get(row[0], at), at)
        return known

    def _check(self, run: _Unfinished, known: _Known) -> RunCheck:
        wf = self.app.workflows.get(run.workflow)
        if wf is None:
            return RunCheck(
                run.run_id,
                run.workflow,
                run.status,
                0,
                f"run {run.run_id} is a run of `{run.workflow}`, which the app no longer has: "
                "keep the workflow until its runs have finished",
            )
        journal, outputs = self._record(run, known)
        failure = self._replay(wf, run, journal, outputs)
        return RunCheck(run.run_id, run.workflow, run.status, journal.resume_at, failure)

    def _replay(
        self,
        wf: Workflow,
        run: _Unfinished,
        journal: Journal,
        outputs: Mapping[int, tuple[Any, Any]],
    ) -> str | None:
        try:
            given = wf.input.model_validate(run.input)
        except ValidationError as error:
            return f"run {run.run_id}: its input no longer parses as {wf.input.__name__}: {error}"
        info = RunInfo(
            run_id=run.run_id,
            attempt=run.attempt + 1,
            workflow_id=run.workflow_id,
            actor=run.actor,
            workflow=wf.name,
        )
        steps = ReplaySteps(journal, outputs)
        try:
            if wf.is_async:
                ctx_async = AsyncContext(
                    info,
                    wf,
                    self.app.ops,
                    self.caller,
                    self.gates,
                    self.timers,
                    steps=steps,
                    waits=self.waits,
                )
                asyncio.run(wf.fn(ctx_async, given))
            else:
                ctx = Context(
                    info,
                    wf,
                    self.app.ops,
                    self.caller,
                    self.gates,
                    self.timers,
                    steps=steps,
                    waits=self.waits,
                )
                wf.fn(ctx, given)
            if not steps.reached:
                journal.finish()
            elif journal.changed is not None:
                raise journal.changed
        except (_Reached, Suspended, RunMovedOn):
            return None
        except CodeChanged as error:
            return str(error)
        except Exception as error:
            return (
                f"run {run.run_id}: replaying its record on the new code raises "
                f"{type(error).__name__}: {error}"
            )
        return None

    def _record(
        self, run: _Unfinished, known: _Known
    ) -> tuple[Journal, dict[int, tuple[Any, Any]]]:
        """The run's journal up to its resume point, and its recorded step outputs.

        The record is its current attempt's steps. An attempt still in the outbox will be
        forked from an earlier one at a step: the steps before it are its record. The resume
        point is the step a waiting or sleeping run stands at, or the one after the last step
        recorded.
        """
        source, before = run.workflow_id, None
        if run.workflow_id not in known.held and run.workflow_id in known.outbox:
            source, before = known.outbox[run.workflow_id]
        elif run.workflow_id not in known.held and run.attempt > 1:
            # Neither DBOS nor the outbox holds it: the reconciler will fork it from the
            # attempt before, at that attempt's last step (see `Reconciler._enqueue`).
            source = attempt_workflow_id(run.run_id, run.attempt - 1)
            last = max(
                (s["function_id"] for s in self.client.list_workflow_steps(source)), default=1
            )
            before = last
        steps = (
            []
            if source not in known.held and before is None
            else [
                s
                for s in self.client.list_workflow_steps(source)
                if before is None or s["function_id"] < before
            ]
        )
        names = {s["function_id"]: s["function_name"] for s in steps}
        outputs = {s["function_id"]: (s["output"], s["error"]) for s in steps}
        stands_at = known.stands_at.get(run.workflow_id)
        if run.status not in ("waiting", "sleeping"):
            stands_at = None
        resume_at = before or stands_at or 1 + max(names, default=0)
        passed: dict[int, str] = {}
        if run.attempt > 1:
            earlier = attempt_workflow_id(run.run_id, run.attempt - 1)
            passed = passed_steps(self.client.list_workflow_steps(earlier))
        marks = known.marks.get(run.run_id, {})
        journal = Journal.of(
            run.run_id, names, marks, resume_at, passed=passed, cut=self._cut(run, known)
        )
        return journal, outputs

    def _cut(self, run: _Unfinished, known: _Known) -> bool:
        """Whether the attempt that will carry the run on resumes where it was cut off, as the
        live attempt decides it (`Runtime._load`): a running attempt is cut off by the move (or
        the recovery) that resumes it; a later attempt not yet begun carries on from where the
        attempt before it was cut off, if it was."""
        now = known.statuses.get(run.workflow_id)
        if now == "PENDING":
            return True
        if run.attempt > 1 and now in (None, "ENQUEUED"):
            earlier = attempt_workflow_id(run.run_id, run.attempt - 1)
            found = self.client.list_workflows(
                workflow_ids=[earlier], load_input=False, load_output=False
            )
            return bool(found) and found[0].status in CUT_OFF
        return False

    def _unfinished(self, run_ids: list[str] | None) -> list[_Unfinished]:
        query = (
            sa.select(
                runs.c.run_id,
                runs.c.workflow,
                runs.c.status,
                runs.c.workflow_id,
                runs.c.attempt,
                runs.c.input,
                runs.c.started_by,
            )
            .where(runs.c.status.not_in(tuple(FINISHED)), app_runs(self.app.name))
            .order_by(runs.c.created_at, runs.c.run_id)
        )
        if run_ids is not None:
            query = query.where(runs.c.run_id.in_(run_ids))
        else:
            query = query.where(runs.c.workflow.in_(self._workflow_names()))
        with self.db.engine.connect() as conn:
            return [
                _Unfinished(
                    row.run_id,
                    row.workflow,
                    row.status,
                    row.workflow_id,
                    row.attempt,
                    row.input,
                    row.started_by,
                )
                for row in conn.execute(query)
            ]

    def _workflow_names(self) -> list[str]:
        """The app's workflows, and those its runs name that it no longer has."""
        with self.db.engine.connect() as conn:
            named = set(
                conn.execute(
                    sa.select(runs.c.workflow)
                    .where(runs.c.status.not_in(tuple(FINISHED)), app_runs(self.app.name))
                    .distinct()
                ).scalars()
            )
        return sorted(named | set(self.app.workflows))

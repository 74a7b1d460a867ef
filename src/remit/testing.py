"""Running an app in a test: a real worker in this process, on a real database, with fakes.

    with Harness(app, database_url=f"sqlite:///{tmp_path}/remit.sqlite") as harness:
        run = harness.run("ar.chase-invoice", {"invoice_id": "inv_1001"})
        assert run.status == "done"
        assert len(harness.fake("mail").effects) == 1

DBOS keeps one instance per process, so one harness runs at a time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from dbos import StepInfo
from pydantic import BaseModel

from remit.app import App
from remit.budgets.rooms import BudgetsRoom
from remit.client import Client
from remit.connectors.base import AppliedEffect, Fake, Implementation
from remit.core.clock import Clock, ManualClock
from remit.core.ledger import LedgerRow
from remit.core.runs import Run, attempt_workflow_id
from remit.core.settings import Settings
from remit.declare.schedules import scheduled_run_id
from remit.execution.direct import CallResult
from remit.ops.deadlines import Deadline
from remit.ops.deploy import DeployCheck, DeployReport
from remit.ops.messages import Child, Sent
from remit.ops.retries import Retried
from remit.ops.runs import RunsRoom
from remit.ops.scheduler import Fired, Scheduler
from remit.people.approvals import Approval, DecideResult
from remit.people.rooms import ApprovalsRoom, TasksRoom
from remit.people.tasks import Resolved, Task
from remit.serve.worker import Worker

F = TypeVar("F", bound=Fake)

__all__ = ["AppliedEffect", "Harness", "ManualClock"]


class Harness:
    """An app served by a worker in this process, every connector on its fake by default.

    Every verb acts as `by=` when given, else as the harness's `actor` (default `user:test`),
    under the app's policies: an app with a `policies/` folder needs an actor they permit.
    `policies` (a folder of `*.cedar` files) governs the harness's copy of the app instead.

    `implementations` replaces some connectors' implementations (e.g. a fake seeded by the
    test); `environ` is what drivers see as the environment. `clock` (e.g. a `ManualClock`)
    is the time expiries and backoffs are measured on; `sweep_interval` is how often the
    worker sweeps for expiries, unsent notifications and resumes left in the outbox.
    """

    def __init__(
        self,
        app: App,
        *,
        database_url: str,
        implementations: Mapping[str, Implementation] | None = None,
        fakes: bool = True,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
        actor: str = "user:test",
        poll_interval: float = 0.05,
        threads: int = 16,
        sweep_interval: float = 1.0,
        policies: Path | str | None = None,
    ) -> None:
        if policies is not None:
            app = app.with_policies(policies)
        settings = replace(
            Settings.from_env(".", environ={"REMIT_DATABASE_URL": database_url}),
            fakes=fakes,
            actor=actor,
            poll_interval=poll_interval,
            threads=threads,
            sweep_interval=sweep_interval,
        )
        self.app = app
        self.worker = Worker(
            app, settings, implementations=implementations, clock=clock, environ=environ or {}
        )
        self.run_store = self.worker.runtime.runs
        self.ledger_store = self.worker.runtime.ledger
        self.actor = actor
        self._settings = settings
        self._environ = environ or {}
        self._client: Client | None = None
        self._scheduler: Scheduler | None = None

    def __enter__(self) -> Harness:
        self.worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop(timeout=0)
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> Client:
        """The test's side: every verb, as a program using the app makes it, acting as the
        harness's actor, on the worker's fakes and clock. Its own client (not the worker's,
        which the worker's threads use): made on first use, closed when the harness exits."""
        if self._client is None:
            self._client = Client(
                self.app,
                self._settings,
                clock=self.worker.runtime.clock,
                environ=self._environ,
            )
            self._client.use_implementations(self.worker.implementations)
        return self._client

    def start(
        self,
        workflow: str,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
    ) -> Run:
        """Start a run (as `remit start` does) as `by` (default: the harness's actor), under
        the app's policies, and return its row. `record` names the business record it concerns
        (see `client.runs.start`)."""
        return self.client.runs.start_row(workflow, input, by=by, record=record)

    def wait(self, run_id: str, *, timeout: float = 30.0, until: tuple[str, ...] = ()) -> Run:
        """Wait for the run to finish (or reach a status in `until`) and return its row."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run_store.get(run_id)
            if run.finished or run.status in until:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout}s")
            time.sleep(0.02)

    def attempt_status(self, run_id: str, attempt: int) -> str | None:
        """DBOS's status of one attempt (`PENDING`, `SUCCESS`, ...), None if it has none."""
        found = self.worker.client.list_workflows(
            workflow_ids=[attempt_workflow_id(run_id, attempt)], load_input=False
        )
        return found[0].status if found else None

    def wait_attempt_ended(self, run_id: str, attempt: int, *, timeout: float = 10.0) -> str:
        """Wait for the attempt to end in DBOS and return how (a suspended run writes its
        status just before its attempt ends)."""
        status = self._attempt_past(run_id, attempt, (None, "PENDING", "ENQUEUED"), timeout)
        assert status is not None  # waited past None
        return status

    def _attempt_past(
        self, run_id: str, attempt: int, running: tuple[str | None, ...], timeout: float
    ) -> str | None:
        """Wait while DBOS's status of the attempt is one of `running`; return the next one."""
        deadline = time.monotonic() + timeout
        while (status := self.attempt_status(run_id, attempt)) in running:
            if time.monotonic() > deadline:
                raise TimeoutError(f"attempt {attempt} of run {run_id} is still {status}")
            time.sleep(0.02)
        return status

    def wait_moved(self, run_id: str, attempt: int, *, timeout: float = 30.0) -> Run:
        """Wait for the run to move past `attempt` (a decision or a wake resumed it)."""
        deadline = time.monotonic() + timeout
        while (run := self.run_store.get(run_id)).attempt <= attempt:
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still on attempt {attempt} after {timeout}s")
            time.sleep(0.02)
        return run

    def run(
        self,
        workflow: str,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        timeout: float = 30.0,
    ) -> Run:
        """Start a run as `by` (default: the harness's actor) and wait for it to finish, and
        for its attempt to end in DBOS: what a test then does (a reconciler pass, say) finds
        nothing still running."""
        run = self.wait(self.start(workflow, input, by=by).run_id, timeout=timeout)
        self._settle(run)
        return run

    def _settle(self, run: Run, *, timeout: float = 10.0) -> None:
        """Wait until DBOS no longer runs the run's attempt: its row reaches `done`,
        `failed` or `waiting` a moment before its attempt's workflow ends."""
        self._attempt_past(run.run_id, run.attempt, ("PENDING", "ENQUEUED"), timeout)

    def fire_schedules(self) -> list[Fired]:
        """Start the runs the app's schedules have made due at the clock's now, as the
        worker's sweep does, without waiting for the sweep, and return the run of each
        schedule's latest instant that is still on time (at most 5 minutes ago), whoever
        started it: an instant starts one run, here or in the sweep (`started` says which).
        With a `ManualClock`, move the clock to an instant, then call this."""
        if self._scheduler is None:
            self._scheduler = Scheduler(
                self.app,
                self.run_store,
                self.worker.client,
                clock=self.worker.runtime.clock,
                interval=self._settings.sweep_interval,
            )
        scheduler = self._scheduler
        mine = {(f.workflow, f.at): f for f in scheduler.fire_due()}
        now = scheduler.clock.now()
        found: list[Fired] = []
        for name, wf in sorted(scheduler.scheduled.items()):
            assert wf.trigger is not None
            for at in wf.trigger.between(now - scheduler.on_time, now, limit=1):
                run_id = scheduled_run_id(self.app.name, name, at)
                if (name, at) in mine:
                    found.append(mine[name, at])
                elif self.run_store.find(run_id) is not None:
                    found.append(Fired(name, at, run_id, started=False))
        return found

    def send(
        self,
        run_id: str,
        topic: str,
        payload: Any,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> Sent:
        """Send a message to the run on `topic` (what its `ctx.wait_for` takes) as `by`
        (default: the harness's actor), under the app's policies: `client.send`."""
        return self.client.send(run_id, topic, payload, key=key, by=by)

    def state(self, run_id: str) -> dict[str, Any]:
        """What the run published (`ctx.publish`), the latest value by key: `client.state`."""
        return self.client.state(run_id)

    def children(self, run_id: str) -> list[Child]:
        """The runs the run started as its children (`ctx.start`), oldest first:
        `client.runs.children`."""
        return self.client.runs.children(run_id)

    def fake(self, vendor: str, kind: type[F] = Fake) -> F:  # type: ignore[assignment]
        """The implementation serving `vendor`, checked to be a `kind`."""
        implementation = self.worker.implementations[vendor]
        if not isinstance(implementation, kind):
            raise TypeError(
                f"`{vendor}` runs on {type(implementation).__name__}, not a {kind.__name__}"
            )
        return implementation

    @property
    def runs(self) -> RunsRoom:
        """The client's runs: `get`, `list`, `steps`, `cancel`, `retry`, ..."""
        return self.client.runs

    @property
    def approvals(self) -> ApprovalsRoom:
        """The client's approvals: `list`, `get`, `decide` and `audit`."""
        return self.client.approvals

    def decide(
        self,
        ids: Iterable[str] | str,
        decision: str = "approved",
        *,
        by: str | None = None,
        via: str = "test",
        decision_key: str | None = None,
        edits: Mapping[str, Mapping[str, Any]] | None = None,
        reason: str | None = None,
    ) -> DecideResult:
        """`decide()` as the test's actor, with a fresh decision key unless one is given.

        `edits` maps each approval id to the fields to change in its draft; deciding one
        approval, it may be those fields alone (`edits={"amount": 400}`).
        """
        if (
            isinstance(ids, str)
            and edits
            and not all(isinstance(v, Mapping) for v in edits.values())
        ):
            edits = {ids: edits}  # one approval's fields, not a map of approval ids to fields
        return self.client.approvals.decide(
            ids,
            decision,
            key=decision_key or f"test:{uuid.uuid4().hex}",
            edits=edits,
            reason=reason,
            by=by,
            via=via,
        )

    def call(
        self, op_id: str, input: Mapping[str, Any], *, by: str | None = None, key: str | None = None
    ) -> CallResult:
        """A direct call (as `remit call` makes it) on this worker's fakes, as the policies allow."""
        return self.client.calls.call(op_id, input, by=by, key=key)

    def gate(self, run_id: str, *, timeout: float = 30.0) -> Approval:
        """Wait for the run to wait at a gate, and return that gate's pending approval."""
        self.wait(run_id, timeout=timeout, until=("waiting",))
        pending = self.approvals.list(run_id=run_id, status="pending")
        if not pending:
            run = self.run_store.get(run_id)
            raise AssertionError(f"run {run_id} is {run.status} with no pending approval")
        return pending[0]

    @property
    def tasks(self) -> TasksRoom:
        """The client's tasks (writes whose outcome a person confirms): `list`, `get`,
        `resolve` and `audit`."""
        return self.client.tasks

    def task(self, run_id: str, *, timeout: float = 30.0) -> Task:
        """Wait for the run to wait at a task (its attempt ended in DBOS), and return that
        open task."""
        self.wait(run_id, timeout=timeout, until=("waiting",))
        run = self.run_store.get(run_id)
        if run.status == "waiting":
            self._settle(run)
        open_tasks = self.tasks.list(run_id=run_id, status="open")
        waiting = [task for task in open_tasks if task.workflow_id == run.workflow_id]
        if not waiting:
            raise AssertionError(
                f"run {run_id} is {run.status} with no open task on its attempt {run.workflow_id}"
            )
        return waiting[0]

    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        by: str | None = None,
        key: str | None = None,
    ) -> Resolved:
        """`Tasks.resolve` as the test's actor."""
        return self.client.tasks.resolve(task_id, done=done, output=output, by=by, key=key)

    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        by: str | None = None,
        key: str | None = None,
    ) -> Retried:
        """Retry a failed or cancelled run (as `remit retry` does), as the test's actor."""
        return self.client.runs.retry(run_id, from_step=from_step, key=key, by=by)

    def deploy_check(
        self, app: App | None = None, *, run_ids: Iterable[str] | None = None
    ) -> DeployReport:
        """Replay this database's unfinished runs against `app` (default: the harness's own),
        as `remit deploy check` does: executing nothing, it says which would fail on resuming."""
        check = DeployCheck(
            app or self.app,
            self.worker.db,
            self.worker.client,
            suspend_after=self.worker.settings.suspend_after,
            clock=self.worker.runtime.clock,
        )
        return check.run(run_ids)

    @property
    def budgets(self) -> BudgetsRoom:
        """The client's budgets: `periods` (each with its drift) and `set`."""
        return self.client.budgets

    def deadlines(self, limit: int = 20) -> list[Deadline]:
        """What is due without anyone asking, earliest first (see `remit deadlines`)."""
        return self.client.ops.deadlines(limit)

    def ledger(self, run_id: str) -> list[LedgerRow]:
        return self.client.calls.ledger(run_id)

    def steps(self, run_id: str, attempt: int = 1) -> list[StepInfo]:
        """The DBOS steps of one attempt, in order."""
        return self.worker.client.list_workflow_steps(attempt_workflow_id(run_id, attempt))

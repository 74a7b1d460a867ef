"""`remit.Client`: acting on an app from code, in any process, with no worker running there.

    from remit import Client

    with Client.connect("examples/acme", by="user:ann") as client:
        run = client.start("ar.chase-invoice", {"invoice_id": "inv_1001"})
        print(run.wait(timeout=60).status)

The client owns the database, a DBOS client and every store and service an app's surfaces use,
built once. Its verbs are the ones the command line has, with the same rules: the policies,
the audit, the keys that make them idempotent. Who acts is `by=` on each verb, else the
client's own `by` (default `REMIT_ACTOR`, or `user:<login>`). A run is served by whichever
worker serves its queue; `RunHandle.wait` watches its row.

Inside a workflow a client verb is refused: a run acts through its `ctx`, whose steps are
checkpointed, and a client call from there would run again on every replay.
"""

from __future__ import annotations

import json
import logging
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from remit.core import limits
from remit.core.audit import audit_row
from remit.core.clock import Clock, SystemClock
from remit.core.database import Database
from remit.core.errors import RemitError
from remit.core.principals import check_actor
from remit.core.settings import Settings, app_folder

if TYPE_CHECKING:
    from decimal import Decimal

    import sqlalchemy as sa
    from dbos import DBOSClient
    from pydantic import BaseModel

    from remit.app import App
    from remit.budgets.model import PeriodState
    from remit.budgets.store import Budgets
    from remit.connectors.base import Implementation
    from remit.connectors.credentials import SecretInfo, Secrets
    from remit.core.ledger import LedgerRow
    from remit.core.runs import Run, RunStore
    from remit.declare.workflows import Workflow
    from remit.execution.direct import CallResult, DirectCalls
    from remit.ops.concluding import Report
    from remit.ops.deadlines import Deadline
    from remit.ops.deploy import DeployReport
    from remit.ops.pause import AppState
    from remit.ops.registry import WorkerRow
    from remit.ops.retries import Retried, Retries
    from remit.people.activity import Activity
    from remit.people.approvals import Approval, Approvals, Archived, DecideResult
    from remit.people.inbox import Decidable
    from remit.people.tasks import Resolved, Task, Tasks
    from remit.policy.guard import Denial, Guard
    from remit.policy.signin import LinkInfo, SignIns
    from remit.policy.tokens import TokenInfo, Tokens
    from remit.resources.lockfile import Binding


IdKind = Literal["run", "approval", "task"]

_log = logging.getLogger("remit.client")


def _not_woken(message: str) -> None:
    _log.warning("%s", message)


@dataclass(frozen=True)
class Step:
    """One checkpointed step of a run's attempt: its name, when it ran (epoch milliseconds),
    its output or error, and whether the attempt's fork copied it from the attempt before (it
    did not run again)."""

    attempt: int
    function_id: int
    name: str
    started_ms: int | None
    finished_ms: int | None
    output: Any
    error: str | None
    copied: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self, width: int) -> tuple[str | None, str | None]:
        """What the step came to as a person reads it, cut to `width` characters: its output
        (an approval step's gate as `apr_… approved by user:ann via http`), or its error's
        message."""
        output, error = self.output, self.error
        if error is not None:
            return None, _cut(error, width)
        if isinstance(output, dict) and isinstance(output.get("error"), dict):
            return None, _cut(output["error"].get("message", output["error"]), width)
        if isinstance(output, dict) and "error" in output:
            return None, _cut(output["error"], width)
        if self.name.startswith("approval:") and isinstance(output, dict):
            text = f"{output.get('id')} {output.get('status')}"
            if output.get("decided_by"):
                text += f" by {output['decided_by']} via {output.get('decided_via')}"
            if output.get("edited_draft") is not None:
                text += " (edited)"
            return text, None
        if isinstance(output, dict) and "ok" in output:
            return _cut(output["ok"], width), None
        return (None if output is None else _cut(output, width)), None


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run as DBOS holds it: its workflow id, its status there (None: never
    given to DBOS), the version of the code that ran it and when it was made."""

    attempt: int
    workflow_id: str
    status: str | None
    version: str | None
    created_at: datetime | None


def _cut(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


class RunHandle:
    """A run started (or looked up) through a client: its id, and the verbs for that one run
    (wait for it, read its output, cancel it, retry it)."""

    def __init__(self, client: Client, run_id: str, workflow: Workflow) -> None:
        self._client = client
        self.run_id = run_id
        self.workflow = workflow

    def get(self) -> Run:
        """The run's row as it stands now."""
        return self._client.get_run(self.run_id)

    def wait(self, timeout: float = 60.0, *, until: Iterable[str] = ()) -> Run:
        """Wait until the run finishes (or reaches a status in `until`, e.g. `waiting`) and
        return its row. Raises `TimeoutError` naming its status after `timeout` seconds."""
        stops = set(until)
        deadline = time.monotonic() + timeout
        while True:
            run = self.get()
            if run.finished or run.status in stops:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"run {self.run_id} is still {run.status} after {timeout:g}s: is a worker "
                    f"serving queue `{self.workflow.queue}`? (`remit worker`)"
                )
            time.sleep(0.05)

    def output(self, timeout: float = 60.0) -> Any:
        """Wait for the run to finish and return its output, parsed as the workflow's return
        annotation says (a pydantic model, say) when it has one. A run that did not finish
        `done` raises `RemitError` with its status and error."""
        run = self.wait(timeout)
        if run.status != "done":
            raise RemitError(f"run {self.run_id} is {run.status}: {run.error or 'no output'}")
        returns = _return_type(self.workflow)
        if returns is None:
            return run.output
        from pydantic import TypeAdapter

        return TypeAdapter(returns).validate_python(run.output)

    def cancel(self, *, by: str | None = None) -> Run:
        """Cancel the run, as `Client.cancel` does: as the policies allow, and a finished run is
        left as it is."""
        return self._client.cancel(self.run_id, by=by)

    def retry(
        self, *, from_step: int | None = None, key: str | None = None, by: str | None = None
    ) -> Retried:
        """Retry the run, failed or cancelled, on the current code, as `Client.retry` does;
        `wait` then waits for the retried run."""
        return self._client.retry(self.run_id, from_step=from_step, key=key, by=by)


class Client:
    """An app's runs, approvals, tasks, ledger, budgets, secrets and controls, from code.

    Made by `Client.connect`; close it (or use it as a context manager) when done.
    """

    def __init__(
        self,
        app: App | Path,
        settings: Settings,
        *,
        by: str | None = None,
        clock: Clock | None = None,
        implementations: Mapping[str, Implementation] | None = None,
        environ: Mapping[str, str] | None = None,
        pool_size: int = 4,
        prepare: bool = True,
    ) -> None:
        # An app's folder is loaded (its workflows and connectors imported) when a verb first
        # needs the app: reading runs, the ledger or deadlines does not.
        if isinstance(app, Path):
            self._folder = app_folder(app)
        else:
            self.app = app
        self.settings = settings
        limits.use(limits.Limits.of(settings))
        self.by = check_actor(settings.actor if by is None else by, where="by")
        self.clock = clock or SystemClock()
        # What direct calls are made on (default: each connector's driver, or its fake with
        # REMIT_FAKES), and the environment drivers see.
        self._implementations = implementations
        self._environ = environ
        self.db = Database(settings.database_url, pool_size=pool_size)
        if prepare:
            self.db.prepare()
        # Called after each write that gives a worker something to do: a start, a retry, a
        # decision, a task's answer, a held direct call, a resume of the app, an archive, a
        # reconciler pass that acted. By default, with a wakeup service configured, it wakes
        # the app's worker if it stopped itself when idle (`remit serve --worker
        # --stop-when-idle` points it at its own worker instead; a command always looks, to
        # say when it cannot wake it).
        self.on_write: Callable[[], object] | None = (
            self.wake_if_stopped if settings.wakeup_url is not None else None
        )
        # Told, when a write finds the worker stopped and cannot wake it: by default a warning
        # in the log (the write is done); the command line makes it an error.
        self.on_not_woken: Callable[[str], object] = _not_woken

    def use_implementations(self, implementations: Mapping[str, Implementation]) -> None:
        """Make direct calls on `implementations` (by vendor) from now on."""
        self._implementations = dict(implementations)
        self.__dict__.pop("direct", None)

    @classmethod
    def connect(
        cls,
        app: App | str | Path,
        database_url: str | None = None,
        *,
        by: str | None = None,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Client:
        """Connect to an app's database: `app` is an `App` or its folder (loaded as `remit`
        loads it, with its policies). The database is `database_url`, else `REMIT_DATABASE_URL`,
        else the app folder's SQLite file; other settings come from the environment."""
        _not_in_a_workflow("connect")
        given = Path(app) if isinstance(app, str | Path) else app
        folder = given if isinstance(given, Path) else Path(".")
        env = dict(environ) if environ is not None else None
        settings = Settings.from_env(folder, environ=env)
        if database_url is not None:
            settings = replace(settings, database_url=database_url)
        return cls(given, settings, by=by, clock=clock)

    def close(self) -> None:
        """Release every connection the client holds: its DBOS client's and its database's.

        A client closed and then used again opens them again, with its services built anew.
        """
        dbos = self.__dict__.pop("dbos", None)
        if dbos is not None:
            dbos.destroy()
        for name in [name for name, value in vars(type(self)).items() if _built_once(value)]:
            self.__dict__.pop(name, None)
        self.db.dispose()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @cached_property
    def app(self) -> App:
        """The app, loaded from its folder on first use (as `remit` loads it, with its
        policies) when the client was given the folder."""
        from remit.app import load_app

        return load_app(self._folder)

    # The services, each built once (and again after `close`).

    @cached_property
    def dbos(self) -> DBOSClient:
        """DBOS's client on the app's system database, made on first use. It connects only when
        a verb calls DBOS: a service that only reads (listing approvals, say) opens no connection
        through it."""
        return self.db.client(self.app.name, lazy=True)

    @cached_property
    def runs_store(self) -> RunStore:
        from remit.core.runs import RunStore

        return RunStore(self.db, clock=self.clock)

    @cached_property
    def guard(self) -> Guard:
        """The app's policies, enforced, with the record of what they refused."""
        from remit.policy.guard import Guard

        return Guard.of(self.app, self.db, clock=self.clock)

    @cached_property
    def approvals(self) -> Approvals:
        """List, read, audit and decide the app's approvals."""
        from remit.people.approvals import Approvals

        return Approvals(
            self.db,
            self.dbos,
            self.app.approval_types,
            admins=self.settings.admins,
            clock=self.clock,
            guard=self.guard,
        )

    @cached_property
    def tasks(self) -> Tasks:
        """List, read, audit and resolve the app's tasks."""
        from remit.people.tasks import Tasks

        return Tasks(
            self.db, self.dbos, self.app.name, self.app.ops, clock=self.clock, guard=self.guard
        )

    @cached_property
    def retries(self) -> Retries:
        from remit.ops.retries import Retries

        return Retries(self.db, self.dbos, guard=self.guard, clock=self.clock)

    @cached_property
    def budgets(self) -> Budgets:
        """The app's budget periods: `periods`, `drift`, `raise_limit`."""
        from remit.budgets.store import Budgets

        return Budgets(self.db, self.app.name, self.app.budgets, clock=self.clock)

    @cached_property
    def secrets(self) -> Secrets:
        """The app's stored credentials: `set`, `list`, `delete` (values are never shown)."""
        from remit.connectors.credentials import SecretKey, Secrets

        return Secrets(self.db, self.app.name, SecretKey.from_settings(self.settings))

    @cached_property
    def tokens(self) -> Tokens:
        """The app's API tokens (see `policy/tokens.py`); make and revoke them with
        `create_token` and `revoke_token`, which the policies check."""
        from remit.policy.tokens import Tokens

        return Tokens(self.db, self.app.name, clock=self.clock)

    @cached_property
    def signins(self) -> SignIns:
        """The console's sign-ins: links, sessions and passwords (see `policy/signin.py`)."""
        from remit.policy.signin import SignIns

        return SignIns(self.db, self.app.name, clock=self.clock)

    @cached_property
    def app_state(self) -> AppState:
        from remit.ops.pause import AppState

        return AppState(
            self.db,
            self.dbos,
            self.app,
            poll_interval=self.settings.poll_interval,
            clock=self.clock,
        )

    @cached_property
    def direct(self) -> DirectCalls:
        from remit.execution.direct import DirectCalls
        from remit.ops.runtime import implementations_for

        implementations, credentials = implementations_for(
            self.app,
            self.db,
            self.settings,
            implementations=self._implementations,
            environ=self._environ,
            clock=self.clock,
        )
        return DirectCalls(
            self.app,
            self.db,
            self.dbos,
            implementations=implementations,
            environ=credentials,
            guard=self.guard,
            clock=self.clock,
            op_timeout=self.settings.op_timeout,
        )

    # The verbs.

    def start(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
    ) -> RunHandle:
        """Start a run of `workflow` (a name or the workflow itself) with `input` (its model or
        a dict), under the policies; a worker serving its queue runs it. `record` names the
        business record the run concerns, e.g. `("invoice", "inv_1003")` (default: the one its
        workflow derives from the input, if it does): see `activity`."""
        run = self.start_row(workflow, input, by=by, record=record)
        return RunHandle(self, run.run_id, self.app.workflow(run.workflow))

    def start_row(
        self,
        workflow: str | Workflow,
        input: Mapping[str, Any] | BaseModel,
        *,
        by: str | None = None,
        record: tuple[str, str] | None = None,
    ) -> Run:
        """`start`, returning the run's row as it was written."""
        _not_in_a_workflow("start")
        from remit.core.activity import check_record

        named = None if record is None else check_record(record, where="start(record=...)")
        wf = self.app.workflow(workflow if isinstance(workflow, str) else workflow.name)
        runs = self.runs_store.naming(named, app=self.app.name)
        started = self.guard.start(runs, self.dbos, wf, input, by=self._who(by))
        self._written()
        return started

    def get_run(self, run_id: str) -> Run:
        """A run's row; `RunNotFound` if there is none."""
        return self.runs_store.get(run_id)

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run, to wait for it."""
        run = self.get_run(run_id)
        return RunHandle(self, run_id, self.app.workflow(run.workflow))

    def runs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        app: str | None = None,
        started_by: str | None = None,
        record: tuple[str, str] | None = None,
        before: tuple[datetime, str] | None = None,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[Run]:
        """Runs, newest first: of a status, a workflow, an app of the repo (`""`: the root's),
        a starter, a record; `before` the (created at, run id) of the previous page's last;
        `only` a further condition (what a principal may read, `remit.reads`)."""
        limits.check_limit(limit, where="runs")
        _no_nul("runs", status=status, workflow=workflow, app=app, started_by=started_by)
        return self.runs_store.list(
            status=status,
            workflow=workflow,
            limit=limit,
            app=app,
            started_by=started_by,
            record=record,
            before=before,
            only=only,
        )

    # What the command line reads; a `RemoteClient` answers the same through the HTTP API.

    @property
    def app_name(self) -> str:
        return self.app.name

    def find_id(
        self, kind: IdKind, given: str, *, only: sa.ColumnElement[bool] | None = None
    ) -> str:
        """The whole id of the run, approval or task `given` names, in full or by an
        unambiguous prefix (an unknown one is returned as given, for the lookup to refuse);
        `only`: a prefix matches only rows meeting it (see `remit.reads`)."""
        from remit.core.ids import full_id
        from remit.core.schema import approvals, runs, tasks

        column = {"run": runs.c.run_id, "approval": approvals.c.id, "task": tasks.c.id}[kind]
        return full_id(self.db, column, given, what=kind, only=only)

    def steps(self, run_id: str) -> list[Step]:
        """Each attempt's steps as DBOS checkpointed them, attempt by attempt."""
        from remit.core.runs import attempt_workflow_id

        run = self.get_run(run_id)
        found: list[Step] = []
        earlier: dict[int, Step] = {}
        for attempt in range(1, run.attempt + 1):
            for step in self.dbos.list_workflow_steps(attempt_workflow_id(run_id, attempt)):
                error, started = step["error"], step["started_at_epoch_ms"]
                before = earlier.get(step["function_id"])
                read = Step(
                    attempt=attempt,
                    function_id=step["function_id"],
                    name=step["function_name"],
                    started_ms=started,
                    finished_ms=step["completed_at_epoch_ms"],
                    output=step["output"],
                    error=None if error is None else str(error),
                    # A fork copies a step as it was: the same start and the same output.
                    copied=before is not None
                    and (before.started_ms, before.output) == (started, step["output"]),
                )
                earlier[read.function_id] = read
                found.append(read)
        return found

    # Read by the web console's run and operations pages.

    def attempts(self, run_id: str) -> list[Attempt]:
        """Each attempt of a run, first to last, as DBOS holds it: its workflow id, its status
        there and the version of the code that ran it."""
        from remit.core.runs import attempt_workflow_id

        run = self.get_run(run_id)
        ids = [attempt_workflow_id(run_id, n) for n in range(1, run.attempt + 1)]
        held = {
            w.workflow_id: w for w in self.dbos.list_workflows(workflow_ids=ids, load_input=False)
        }
        found: list[Attempt] = []
        for number, workflow_id in enumerate(ids, start=1):
            status = held.get(workflow_id)
            created = None if status is None or status.created_at is None else status.created_at
            found.append(
                Attempt(
                    attempt=number,
                    workflow_id=workflow_id,
                    status=None if status is None else status.status,
                    version=None if status is None else status.app_version,
                    created_at=None
                    if created is None
                    else datetime.fromtimestamp(created / 1000, UTC),
                )
            )
        return found

    def run_record(self, run_id: str) -> tuple[str, str] | None:
        """The business record a run concerns (type, id), named when it started, or None."""
        from remit.core.activity import record_of_run

        with self.db.engine.connect() as conn:
            ref = record_of_run(conn, run_id)
        return None if ref is None else (ref.record_type, ref.record_id)

    def audit(self, target: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """The latest `limit` audit rows about `target` (a run's, approval's, task's or token's
        id, `app:<name>`, `secret:<NAME>`), oldest first: who did what to it, when."""
        from remit.core.audit import audit_of

        limits.check_limit(limit, where="audit")
        _no_nul("audit", target=target)
        return audit_of(self.db, target)[-limit:]

    def resource_bindings(self) -> dict[str, Binding]:
        """The vendor ids the app's declared resources are bound to, by name, as the database
        holds them (none when the app declares no resources)."""
        if self.app.resources is None:
            return {}
        return self.app.resources.store(self.db).read()

    def list_approvals(
        self, *, status: str | None = None, run_id: str | None = None, limit: int = 100
    ) -> list[Approval[Any]]:
        """Approvals, newest first."""
        limits.check_limit(limit, where="list_approvals")
        _no_nul("list_approvals", status=status, run_id=run_id)
        return self.approvals.list(status=status, run_id=run_id, limit=limit)

    def decidable(
        self, *, by: str | None = None, limit: int = 500, approval_id: str | None = None
    ) -> list[Decidable]:
        """The pending gates `by` may decide, oldest first, each with its run and the decisions
        the policies let them give (see `people/inbox.py`); asking records no denial.
        `approval_id`: that gate alone, if `by` may decide it."""
        from remit.people.inbox import decidable

        limits.check_limit(limit, where="decidable")
        who = self._person(by)
        if approval_id is not None:
            pending = [self.approvals.get(approval_id)]
        else:
            # The oldest first, so that with more pending than `limit` the oldest are not the
            # ones left out.
            pending = self.approvals.list(status="pending", limit=limit, oldest_first=True)
        return decidable(
            self.db, pending, self.runs_store, self.guard, by=who, admin=who in self.settings.admins
        )

    def get_approval(self, approval_id: str) -> Approval[Any]:
        return self.approvals.get(approval_id)

    def list_tasks(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        oldest_first: bool = False,
    ) -> list[Task]:
        """Tasks, newest first (or oldest first)."""
        limits.check_limit(limit, where="list_tasks")
        _no_nul("list_tasks", status=status, run_id=run_id)
        return self.tasks.list(status=status, run_id=run_id, limit=limit, oldest_first=oldest_first)

    def get_task(self, task_id: str) -> Task:
        return self.tasks.get(task_id)

    def list_secrets(self) -> list[SecretInfo]:
        """The stored credentials' names, when and by whom each was set; never values."""
        return self.secrets.list()

    def budget_periods(self, *, limit: int = 50) -> list[tuple[PeriodState, Decimal]]:
        """Each budget period, newest first, with its drift (the counter less its ledger)."""
        from decimal import Decimal

        limits.check_limit(limit, where="budget_periods")
        states = self.budgets.periods(limit=limit)
        drift = {(d.scope, d.period): d.drift_usd for d in self.budgets.drift(states)}
        return [(state, drift.get((state.scope, state.period), Decimal(0))) for state in states]

    def denials(self, *, limit: int = 100) -> list[Denial]:
        """The acts the policies refused, newest first."""
        limits.check_limit(limit, where="denials")
        return self.guard.denials(limit=limit)

    def cancel(self, run_id: str, *, by: str | None = None) -> Run:
        """Cancel a run that has not finished, as the policies allow (`cancel` on its
        workflow); a finished one is left as it is."""
        _not_in_a_workflow("cancel")
        from remit.people.ending import cancel_run

        who = self._person(by)
        run = self.get_run(run_id)
        self.guard.require(who, "cancel", run.workflow, {"input": run.input, "status": run.status})
        return cancel_run(self.runs_store, self.dbos, run_id, by=who)

    def retry(
        self,
        run_id: str,
        *,
        from_step: int | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Retried:
        """Retry a failed or cancelled run on the current code (see `Retries.retry`)."""
        _not_in_a_workflow("retry")
        retried = self.retries.retry(run_id, by=self._who(by), from_step=from_step, key=key)
        self._written()
        return retried

    def decide(
        self,
        ids: Iterable[str] | str,
        decision: str,
        *,
        key: str,
        edits: Mapping[str, Mapping[str, Any]] | None = None,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> DecideResult:
        """Decide approvals, all or none, and resume their runs (see `Approvals.decide`). `key`
        is the decision key: the same key again replays the first result."""
        _not_in_a_workflow("decide")
        decided = self.approvals.decide(
            ids, decision, by=self._who(by), via=via, decision_key=key, edits=edits, reason=reason
        )
        self._written()
        return decided

    def resolve(
        self,
        task_id: str,
        *,
        done: bool,
        output: Mapping[str, Any] | None = None,
        key: str | None = None,
        by: str | None = None,
    ) -> Resolved:
        """Say whether a task's call happened, and carry its run on (see `Tasks.resolve`)."""
        _not_in_a_workflow("resolve")
        resolved = self.tasks.resolve(task_id, done=done, output=output, by=self._who(by), key=key)
        self._written()
        return resolved

    def call(
        self,
        op_id: str,
        input: Mapping[str, Any],
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> CallResult:
        """Call an op directly, under the policies (a policy may hold it for an approval)."""
        _not_in_a_workflow("call")
        called = self.direct.call(op_id, input, by=self._who(by), key=key)
        if called.status == "held":
            self._written()
        return called

    def wake_if_stopped(self) -> None:
        """Register a wake for now with the wakeup service if the app's worker is stopping or
        stopped (see `ops/idle.py`), so work just written does not wait for the deadline it
        registered. The wake needs `REMIT_WAKEUP_URL` and the instance's token, which `remit
        wakeup connect` stored. If it cannot be sent, `on_not_woken` is told why; nothing is
        raised, as the write it follows is done."""
        from remit.connectors.wakeup import SERVICE_URL
        from remit.ops.idle import WakeupState

        if not WakeupState(self.db, self.app.name, clock=self.clock).wants_wake():
            return
        if self.settings.wakeup_url is None:
            why = f"{SERVICE_URL} is not set: set it to the wakeup service's address, as the worker has it"
        else:
            try:
                result = self.register_wake(self.clock.now())
            except Exception as error:
                why = f"{type(error).__name__}: {error}"
            else:
                if result.status == "ok":
                    return
                why = result.error or f"{result.op} ended {result.status}"
        self.on_not_woken(
            "the write is stored, but the app's worker is stopped and was not woken, so it "
            f"waits for the worker's next registered deadline: {why}"
        )

    def _written(self) -> None:
        if self.on_write is not None:
            self.on_write()

    def register_wake(self, at: datetime) -> CallResult:
        """Ask the wakeup service to wake this instance at `at` (timezone-aware), replacing
        the wake registered before: the op `wakeup.instances.register`, called as
        `remit:wakeup` with no policy asked, and recorded in the ledger and the audit. Each call
        is made afresh (its own key), so a time registered again after another re-arms it."""
        _not_in_a_workflow("register_wake")
        from remit.connectors.wakeup import register_wake

        return self.direct.call_as_remit(register_wake.id, {"at": at.isoformat()})

    def data(
        self, collection: str, verb: str, input: Mapping[str, Any], *, by: str | None = None
    ) -> CallResult:
        """A collection's `get`, `put`, `list` or `delete`: the op `data.<collection>.<verb>`."""
        return self.call(f"data.{collection}.{verb}", input, by=by)

    def pause(self, *, by: str | None = None) -> list[str]:
        """Pause the app, as the policies allow; returns the queues this stopped."""
        _not_in_a_workflow("pause")
        who = self._person(by)
        self.guard.require(who, "pause", self.app.name, {})
        return self.app_state.pause(by=who)

    def resume(self, *, by: str | None = None) -> tuple[list[str], list[str]]:
        """Resume the app, as the policies allow; returns the queues restored and the parked
        runs carried on."""
        _not_in_a_workflow("resume")
        who = self._person(by)
        self.guard.require(who, "resume", self.app.name, {})
        resumed = self.app_state.resume(by=who)
        self._written()
        return resumed

    def set_secret(self, name: str, value: str, *, by: str | None = None) -> SecretInfo:
        """Store secret `name` (replacing its value), as the policies allow."""
        who = self._person(by)
        self.guard.require(who, "set_secret", name, {})
        return self.secrets.set(name, value, by=who)

    def delete_secret(self, name: str, *, by: str | None = None) -> bool:
        """Delete secret `name`, as the policies allow; False if there was none."""
        who = self._person(by)
        self.guard.require(who, "delete_secret", name, {})
        return self.secrets.delete(name, by=who)

    def set_budget(
        self,
        scope: str,
        limit: Decimal | int | str,
        *,
        period: str | None = None,
        by: str | None = None,
    ) -> PeriodState:
        """Set the limit of a budget's period (None: the current one), as the policies allow
        (`set_budget` on the budget's scope, with the period and the new limit)."""
        who = self._person(by)
        context = {"period": period or "current", "limit": str(limit)}
        self.guard.require(who, "set_budget", scope, context)
        return self.budgets.raise_limit(scope, period, limit, by=who)

    def create_token(
        self,
        principal: str,
        *,
        name: str = "",
        expires_in: timedelta | None = None,
        by: str | None = None,
    ) -> tuple[TokenInfo, str]:
        """Make an API token that acts as `principal`, as the policies allow (`manage_tokens`
        with verb `create`). Returns it with the token itself, shown this once."""
        who = self._person(by)
        _no_nul("create_token", name=name)
        context = {"verb": "create", "subject": principal}
        self.guard.require(who, "manage_tokens", self.app.name, context)
        return self.tokens.create(principal, by=who, name=name, expires_in=expires_in)

    def list_tokens(self, *, by: str | None = None) -> list[TokenInfo]:
        """The app's API tokens (never their secrets), as the policies allow."""
        who = self._person(by)
        self.guard.require(who, "manage_tokens", self.app.name, {"verb": "list", "subject": ""})
        return self.tokens.list()

    def revoke_token(self, token_id: str, *, by: str | None = None) -> TokenInfo:
        """Revoke an API token, as the policies allow (`manage_tokens` with verb `revoke`)."""
        who = self._person(by)
        token = self.tokens.get(token_id)
        context = {"verb": "revoke", "subject": token.principal}
        self.guard.require(who, "manage_tokens", self.app.name, context)
        return self.tokens.revoke(token_id, by=who)

    def authenticate(self, token: str) -> str:
        """The principal an API token acts as; `Unauthenticated` saying why it does not."""
        return self.tokens.authenticate(token)

    # The web console's sign-ins (`policy/signin.py`). Making a link or a password lets someone
    # act as its principal, as a token does: the policies check it as `manage_tokens`.

    def login_link(
        self, principal: str, *, expires_in: timedelta | None = None, by: str | None = None
    ) -> tuple[LinkInfo, str]:
        """A one-time sign-in link's code for `principal`, as the policies allow
        (`manage_tokens` with verb `login_link`)."""
        who = self._person(by)
        context = {"verb": "login_link", "subject": principal}
        self.guard.require(who, "manage_tokens", self.app.name, context)
        if expires_in is None:
            return self.signins.link(principal, by=who)
        return self.signins.link(principal, by=who, expires_in=expires_in)

    def set_password(self, principal: str, password: str, *, by: str | None = None) -> None:
        """Set `principal`'s console password, as the policies allow (`manage_tokens` with
        verb `password`)."""
        who = self._person(by)
        context = {"verb": "password", "subject": principal}
        self.guard.require(who, "manage_tokens", self.app.name, context)
        self.signins.set_password(principal, password, by=who)

    def sign_in_with_link(self, code: str) -> tuple[str, str]:
        """(principal, session token) of a sign-in by the link's `code`, which it uses up."""
        principal = self.signins.redeem(code)
        return principal, self.signins.open_session(principal, via="link")[1]

    def sign_in_with_password(
        self, principal: str, password: str, *, address: str = ""
    ) -> tuple[str, str]:
        """(principal, session token) of a sign-in by password from `address` (the client's,
        by which wrong passwords are counted); `Unauthenticated` if wrong, or if that address
        is locked after too many."""
        from remit.core.errors import Unauthenticated

        if not self.signins.check_password(principal, password, address=address):
            raise Unauthenticated(
                "that principal and password do not match: check both, or ask for a sign-in "
                "link (`remit login-link --for user:<you>`)"
            )
        return principal, self.signins.open_session(principal, via="password")[1]

    def session_principal(self, token: str) -> str:
        """The principal of a console session; `Unauthenticated` if it has ended."""
        return self.signins.session(token)

    def sign_out(self, token: str) -> None:
        """End a console session."""
        self.signins.end_session(token)

    def reconcile(self, *, dry_run: bool = False, by: str | None = None) -> Report:
        """Run one reconciler pass now (`dry_run`: say what it would do), as the policies
        allow. The pass (not a dry run) is in the audit log as `app.reconciled`, with how many
        actions it took."""
        _not_in_a_workflow("reconcile")
        who = self._person(by)
        self.guard.require(who, "reconcile", self.app.name, {})
        from remit.ops.reconciler import Reconciler, Timeouts
        from remit.ops.registry import WorkerRegistry, live_versions
        from remit.people.tasks import TaskOpener

        registry = WorkerRegistry(self.db, clock=self.clock)
        report = Reconciler(
            self.runs_store,
            self.dbos,
            version=self.settings.version or self.app.version,
            live_versions=lambda: live_versions(
                registry.list(app=self.app.name),
                now=datetime.now(UTC),
                dead_after=timedelta(seconds=self.settings.dead_after),
            ),
            app_state=self.app_state,
            tasks=TaskOpener(self.db, self.app.name, clock=self.clock),
            budgets=self.budgets,
            timeouts=Timeouts.of(self.app, self.settings.op_timeout),
        ).run_pass(dry_run=dry_run)
        if not dry_run:
            meta = {"actions": len(report.actions), "errors": len(report.errors)}
            with self.db.begin() as conn:
                audit_row(
                    conn,
                    at=self.clock.now(),
                    actor=who,
                    action="app.reconciled",
                    target=f"app:{self.app.name}",
                    meta=meta,
                )
            if report.actions:
                self._written()
        return report

    def deploy_check(self, run_ids: Iterable[str] | None = None) -> DeployReport:
        """Replay the unfinished runs against this client's app (see `remit deploy check`)."""
        from remit.ops.deploy import DeployCheck

        return DeployCheck(
            self.app,
            self.db,
            self.dbos,
            suspend_after=self.settings.suspend_after,
            clock=self.clock,
            version=self.settings.version,
        ).run(run_ids)

    def deadlines(self, limit: int = 20) -> list[Deadline]:
        """What is due without anyone asking, earliest first."""
        from remit.ops.deadlines import upcoming_deadlines

        limits.check_limit(limit, where="deadlines")
        return upcoming_deadlines(self.db, limit=limit, app=self.app.name)

    def ledger(
        self,
        run_id: str | None = None,
        *,
        op: str | None = None,
        status: str | None = None,
        limit: int = 200,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[LedgerRow]:
        """Op calls: one run's in order, or the latest; of one op (`op`, its id) and of one
        status (`ok`, `failed`, `uncertain`, ...) when given. Each with its earlier tries
        (`LedgerRow.earlier`): the refusals before it was tried again, and what an earlier
        attempt left before it was made again."""
        from remit.core.ledger import LedgerStore

        limits.check_limit(limit, where="ledger")
        _no_nul("ledger", run_id=run_id, op=op, status=status)
        return LedgerStore(self.db, clock=self.clock).list(
            run_id=run_id, op_id=op, status=status, limit=limit, with_tries=True, only=only
        )

    def workers(self) -> list[WorkerRow]:
        """The app's workers, as `remit workers` lists them."""
        from remit.ops.registry import WorkerRegistry

        return WorkerRegistry(self.db, clock=self.clock).list(app=self.app.name)

    def activity(
        self,
        record_type: str,
        record_id: str,
        *,
        limit: int = 100,
        after: int | None = None,
        only: sa.ColumnElement[bool] | None = None,
    ) -> list[Activity]:
        """What happened about one of the business's records (e.g. `"invoice", "inv_1003"`),
        oldest first: the runs about it started and ended, its gates opened and decided, its
        writes whose outcome became unknown and their tasks answered, its archiving. At most
        `limit` rows, those after the row `after` (an id) when given. See `people/activity.py`.
        """
        from remit.people.activity import timeline

        limits.check_limit(limit, where="activity")
        _no_nul("activity", record_type=record_type, record_id=record_id)
        return timeline(
            self.db, self.app.name, (record_type, record_id), limit=limit, after=after, only=only
        )

    def archive_record(
        self,
        record_type: str,
        record_id: str,
        *,
        by: str | None = None,
        reason: str | None = None,
    ) -> Archived:
        """Cancel every pending gate about a record, as one decision `cancelled` via `archive`,
        and return what it cancelled (nothing, when none was pending: a second archive does
        nothing). The policies check it as they check any decision: `decide` on each gate's
        approval type with the decision `cancelled`; a refusal cancels none. Each run waiting
        at one of the gates resumes and sees it cancelled. See `Approvals.archive`."""
        _not_in_a_workflow("archive_record")
        archived = self.approvals.archive(
            self.app.name, (record_type, record_id), by=self._person(by), reason=reason
        )
        self._written()
        return archived

    def _who(self, by: str | None) -> str:
        """Who acts: `by`, else (when None) the client's own; an empty `by` is no one, refused
        by the services' checks. Each service checks it as it always does."""
        return self.by if by is None else by

    def _person(self, by: str | None) -> str:
        """Who acts, for an act only people and agents take: remit's own principals are
        refused (the policies do not check them)."""
        return check_actor(self._who(by), where="by")


def _no_nul(verb: str, **given: str | None) -> None:
    """Refuse a NUL character in the text arguments of `verb`, which no text remit keeps holds
    (and Postgres could not look up): `InputInvalid` naming the argument."""
    limits.check_json(
        {name: value for name, value in given.items() if value is not None},
        what=f"the arguments of {verb}",
        cap="input_bytes",
        target=verb,
    )


def _not_in_a_workflow(verb: str) -> None:
    from dbos import DBOS

    if DBOS.workflow_id is not None:
        raise RemitError(
            f"Client.{verb} was called inside a workflow (run attempt {DBOS.workflow_id}): a run "
            "acts through its `ctx` (ctx.call, ctx.approval, ...), whose steps are checkpointed; "
            "a client call there would be made again on every replay"
        )


def _return_type(workflow: Workflow) -> Any:
    """The workflow function's return annotation, if it names a type to parse output as."""
    try:
        hints = typing.get_type_hints(workflow.fn)
    except Exception:
        return None
    returns = hints.get("return")
    return None if returns in (None, type(None), Any) else returns


def _built_once(attribute: object) -> bool:
    """A service `close` drops, to build anew on next use (the app itself is kept)."""
    return isinstance(attribute, cached_property) and attribute.attrname != "app"

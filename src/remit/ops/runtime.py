"""The attempt: how one DBOS workflow runs one attempt of a run, fenced on the run's row.

Each app workflow is registered with DBOS under its own name. The DBOS workflow receives
`(run_id, attempt, input, actor)` and owns every status write of its attempt: it claims the run
(or stops at once if the run has moved on), runs the user's function with a `ctx`, and concludes
the run, each write fenced on its own workflow id. An attempt that stops at a pending gate ends
with the run `waiting`; the run's next attempt is a DBOS fork of this one (see `approvals.py`),
which receives the same arguments, so the attempt's number is read from its workflow id.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from pydantic_core import to_jsonable_python

from remit.app import App
from remit.budgets.store import Budgets
from remit.connectors.base import Connector, Implementation
from remit.connectors.credentials import Credentials, SecretKey, Secrets
from remit.connectors.data import VENDOR as DATA_VENDOR
from remit.connectors.data import CollectionStore
from remit.connectors.redaction import app_secrets
from remit.connectors.wakeup import DRIVER_SETTINGS as WAKEUP_SETTINGS
from remit.connectors.wakeup import VENDOR as WAKEUP_VENDOR
from remit.core import telemetry
from remit.core.clock import Clock
from remit.core.database import Database
from remit.core.errors import AppError, CodeChanged, RemitError, RunMovedOn, RunTimedOut, Suspended
from remit.core.ledger import LedgerStore
from remit.core.redact import Redactor
from remit.core.runs import RunInfo, RunStatus, RunStore, attempt_workflow_id, output_refused
from remit.core.settings import Settings
from remit.declare.ops import Op
from remit.declare.workflows import Workflow
from remit.execution.async_context import AsyncContext
from remit.execution.calls import OpCaller
from remit.execution.context import Context
from remit.execution.journal import CUT_OFF, Journal, load_marks, passed_steps
from remit.execution.positions import LiveSteps
from remit.execution.timers import DEFAULT_SUSPEND_AFTER, Timers
from remit.execution.tries import DEFAULT_OP_TIMEOUT
from remit.execution.waits import Waits
from remit.ops.recoveries import (
    RecoveredTooOften,
    Recoveries,
    too_often,
    where_it_stopped,
    without_progress,
)
from remit.people.gates import Gates
from remit.people.notify import Notifications, Notifier
from remit.people.tasks import TaskOpener

if TYPE_CHECKING:
    from dbos import StepInfo

log = logging.getLogger("remit.runtime")

# How many times an attempt may be recovered after its worker died (REMIT_MAX_RECOVERIES).
DEFAULT_MAX_RECOVERIES = 5

# What an attempt that stopped at a gate returns to DBOS: it ended, and the run waits.
SUSPENDED = "remit:suspended"


def suspended_output(status: str) -> dict[str, str]:
    return {SUSPENDED: status}


def attempt_outcome(result: Any) -> str:
    """How an attempt that returned `result` ended, as its trace says: `done`, or the status
    its run waits in (`waiting`, `sleeping`, `paused`), or `moved-on`."""
    if isinstance(result, dict) and SUSPENDED in result:
        return "moved-on" if result[SUSPENDED] == "moved on" else str(result[SUSPENDED])
    return "done"


class Runtime:
    """What a worker runs attempts with: the app, its stores, and its op implementations."""

    def __init__(
        self,
        app: App,
        db: Database,
        *,
        implementations: Mapping[str, Implementation],
        clock: Clock,
        environ: Mapping[str, str],
        notifiers: list[Notifier],
        suspend_after: float = DEFAULT_SUSPEND_AFTER,
        version: str | None = None,
        max_recoveries: int = DEFAULT_MAX_RECOVERIES,
        op_timeout: float = DEFAULT_OP_TIMEOUT,
    ) -> None:
        self.app = app
        # The app's code hash, unless REMIT_VERSION names the version (a build's SHA).
        self.version = version or app.version
        self.stopping = False
        # How many recoveries in a row of an attempt whose worker died under it may get no
        # further before the run fails (`REMIT_MAX_RECOVERIES`).
        self.max_recoveries = max_recoveries
        self.recoveries = Recoveries(db, clock=clock)
        # This worker's copy of the app's pause flag (kept fresh by `pause.PauseWatch`): while
        # it is set, an attempt parks before its next step, or before its first if it begins.
        self.paused = threading.Event()
        self.clock = clock
        self.runs = RunStore(db, clock=clock, app=app.name)
        self.ledger = LedgerStore(db, clock=clock)
        self.caller = OpCaller(
            implementations=implementations,
            ledger=self.ledger,
            clock=clock,
            environ=environ,
            tasks=TaskOpener(db, app.name, clock=clock),
            budgets=Budgets(db, app.name, app.budgets, clock=clock),
            prices=app.llm_prices,
            op_timeout=op_timeout,
        )
        self.notifications = Notifications(db, notifiers, clock=clock)
        self.gates = Gates(
            db,
            app.approval_types,
            channels=self.notifications.channels,
            clock=clock,
            policy=lambda: app.policy,
        )
        self.timers = Timers(db, suspend_after=suspend_after, clock=clock)
        # Messages, child runs and published state; the worker gives it a way to start
        # children and to fork what a child's end resumes.
        self.waits = Waits(db, workflows=app.workflows, clock=clock)
        # An attempt's DBOS steps, read from outside it: the worker gives its client's.
        self.list_steps: Callable[[str], list[StepInfo]] = _no_steps
        # An attempt's DBOS status, read from outside it (None: DBOS holds no such attempt).
        self.attempt_status: Callable[[str], str | None] = lambda workflow_id: None

    def register(self) -> None:
        """Register every workflow of the app with DBOS, under its own name."""
        from dbos import DBOS

        # The app's secrets are known to the log filter before the first attempt logs a line.
        self._secrets()
        for wf in self.app.workflows.values():
            body = self._async_attempt(wf) if wf.is_async else self._sync_attempt(wf)
            traced = telemetry.traced_attempt(wf.name, self.version, body, attempt_outcome)
            # DBOS reads a workflow's type hints at every start, to turn JSON strings back into
            # dates; an attempt takes JSON's own types (str, int, dict), so it declares none.
            traced.__annotations__ = {}
            # remit counts recoveries itself, those that got no further (`_recovered`).
            DBOS.workflow(name=wf.name, max_recovery_attempts=None)(traced)

    def _journal(self, run: RunInfo) -> Journal:
        """What the run recorded up to where this attempt resumes, to check the code against.

        A first attempt beginning for the first time has no record before it. One that DBOS
        recovers after its worker stopped is checked against what it recorded: DBOS recovers an
        attempt only on its own version, but `REMIT_VERSION` can give other code that version.
        A later attempt resumes after the steps it copied, or after those it ran itself.
        """
        if run.attempt == 1 and not run.again:
            return Journal.empty(run.run_id)
        journal = self.runs.db.retrying(f"run {run.run_id}: its record", lambda: self._load(run))
        if run.again:
            self._recovered(run, journal.resume_at)
        return journal

    def _recovered(self, run: RunInfo, position: int) -> None:
        """Count a recovery of the attempt, which resumes at `position`: raise
        `RecoveredTooOften` when it would be the `REMIT_MAX_RECOVERIES`+1th in a row to
        resume where the run before it stopped (see `recoveries.py`)."""
        stops = self.recoveries.record(
            run.run_id, run.workflow_id, position, keep=self.max_recoveries + 2
        )
        stalled = without_progress(stops)
        log.warning(
            "attempt %s of run %s recovered after its worker stopped: it resumes at step %d "
            "(%d recoveries in a row got no further)",
            run.workflow_id,
            run.run_id,
            position,
            stalled,
        )
        if stalled < self.max_recoveries:
            return
        where = where_it_stopped(
            run.workflow_id, self.ledger.list(run_id=run.run_id), self.list_steps(run.workflow_id)
        )
        raise too_often(run.workflow_id, stops, where, self.max_recoveries)

    def _load(self, run: RunInfo) -> Journal:
        # Through a client: DBOS.list_workflow_steps inside a workflow is a step of its own.
        steps = {
            step["function_id"]: step["function_name"] for step in self.list_steps(run.workflow_id)
        }
        passed: dict[int, str] = {}
        cut = run.again
        if run.attempt > 1:
            earlier = attempt_workflow_id(run.run_id, run.attempt - 1)
            passed = passed_steps(self.list_steps(earlier))
            cut = cut or self.attempt_status(earlier) in CUT_OFF
        with self.runs.db.engine.connect() as conn:
            marks = load_marks(conn, run.run_id)
        return Journal.of(run.run_id, steps, marks, passed=passed, cut=cut)

    def _begin(self, wf: Workflow, run_id: str, actor: str) -> RunInfo | None:
        from dbos import DBOS

        workflow_id = DBOS.workflow_id
        assert workflow_id is not None
        # A resumed attempt is a fork: it gets its first attempt's inputs, so its number is
        # read from its own workflow id.
        attempt = int(workflow_id.rsplit(":", 1)[1])
        claim = self.runs.begin_attempt(run_id, workflow_id, self.version)
        if claim is None:
            log.info(
                "attempt %s of run %s is superseded or cancelled: nothing ran", workflow_id, run_id
            )
            telemetry.moved_on()
            return None
        deadline = None
        if wf.timeout is not None:
            deadline = self.runs.timed_since(run_id) + timedelta(seconds=wf.timeout)
        return RunInfo(
            run_id=run_id,
            attempt=attempt,
            workflow_id=workflow_id,
            actor=actor,
            workflow=wf.name,
            again=claim.again,
            deadline=deadline,
            concerns=claim.concerns,
            parent=claim.parent,
        )

    def _secrets(self) -> Redactor:
        """The app's secrets, which a run's output and error must not hold (a workflow may
        have read one some other way): see `connectors/redaction.py`."""
        return app_secrets(self.caller.environ, self.caller.implementations.values())

    def _done(self, run: RunInfo, result: Any) -> Any:
        try:
            output = to_jsonable_python(result)
        except Exception as error:
            message = self._secrets().text(
                f"the workflow returned a value that is not JSON ({type(error).__name__}: {error}): "
                "return plain data or a pydantic model"
            )
            self._conclude(run, "failed", error=message)
            raise TypeError(message) from error
        output = self._secrets().json(output)
        refused = output_refused(run.run_id, output)
        if refused is not None:
            self._conclude(run, "failed", error=refused)
            raise RemitError(refused)
        self._conclude(run, "done", output=output)
        return output

    def _conclude(
        self, run: RunInfo, status: RunStatus, *, output: Any = None, error: str | None = None
    ) -> None:
        """Write the run's end, fenced on its attempt; then, once it is written, move on its
        parent if it has one that waited for it (`ctx.wait`)."""
        self.runs.conclude(
            run.run_id,
            run.workflow_id,
            status,
            output=output,
            error=error,
            concerns=run.concerns,
        )
        if run.parent is not None:
            self.waits.ended(run.run_id)

    def _failed(self, run: RunInfo, error: Exception) -> BaseException:
        """Conclude the run as failed, unless the worker is shutting down under it; return the
        error to raise to DBOS, with the app's secrets redacted.

        During shutdown a database or DBOS error says nothing about the run: its row stays as
        it is and the attempt stays with DBOS, for the next worker with this executor id. If
        the write itself fails, the reconciler concludes the run from DBOS's record later.
        """
        from dbos import error as dbos_error

        redacted = self._secrets().exception(error)
        if self.stopping and isinstance(error, sa.exc.SQLAlchemyError | dbos_error.DBOSException):
            log.error(
                "attempt %s of run %s stopped by %s: %s; left for recovery",
                run.workflow_id,
                run.run_id,
                type(error).__name__,
                redacted,
            )
            return redacted
        self._conclude(run, "failed", error=_failure(run, redacted))
        return redacted

    def _changed(self, run: RunInfo, error: CodeChanged) -> None:
        """The code no longer matches the run's record: fail the run, nothing having run at
        the position that differs."""
        log.warning("run %s fails: %s", run.run_id, error)
        self._conclude(run, "failed", error=str(error))

    def _timed_out(self, run: RunInfo, error: RunTimedOut) -> None:
        log.warning("run %s fails: %s", run.run_id, error)
        self._conclude(run, "failed", error=str(error))

    def _raised(self, run: RunInfo, error: BaseException) -> RemitError:
        """The workflow (or a driver under it) raised a `BaseException` that is not remit's own
        (`SystemExit`, `KeyboardInterrupt`, `GeneratorExit`): the run fails naming it, and the
        attempt ends as an error in DBOS rather than taking its worker's thread down with it."""
        raised = f"the workflow raised {type(error).__name__}: {error}".rstrip(": ")
        message = self._secrets().text(raised)
        log.error("run %s fails: %s", run.run_id, message)
        self._conclude(run, "failed", error=message)
        return RemitError(message)

    def _moved_on(self, run: RunInfo, error: RunMovedOn) -> None:
        log.info("attempt %s stops: %s", run.workflow_id, error)
        telemetry.moved_on()

    def _suspend(self, run: RunInfo, pause: Suspended) -> dict[str, str]:
        """Tell people about a gate, then end the attempt with the run waiting (or sleeping, or
        paused), holding nothing. Notified first, so a run seen `waiting` has had its notices sent (or their
        failure recorded for the sweep to retry)."""
        if pause.approval_id is not None:
            try:
                self.notifications.send_due(approval_id=pause.approval_id)
            except Exception:
                log.exception("approval %s: notifying failed; the sweep tries again", run.run_id)
        if not self.runs.suspend(run.run_id, run.workflow_id, pause.status):
            log.info("attempt %s: the run moved on before it could wait", run.workflow_id)
            return suspended_output("moved on")
        log.info("run %s waits: %s", run.run_id, pause)
        return suspended_output(pause.status)

    def _ctx_parts(
        self, run: RunInfo, wf: Workflow
    ) -> tuple[
        RunInfo, Workflow, Mapping[str, Op[Any, Any]], OpCaller, Gates, Timers, Callable[[], bool]
    ]:
        """What a `ctx` of this worker is made of, but for where its steps take positions."""
        return run, wf, self.app.ops, self.caller, self.gates, self.timers, self.paused.is_set

    def _sync_attempt(self, wf: Workflow) -> Any:
        def attempt(run_id: str, attempt: int, input: dict[str, Any], actor: str) -> Any:
            run = self._begin(wf, run_id, actor)
            if run is None:
                return None
            try:
                journal = self._journal(run)
                ctx = Context(*self._ctx_parts(run, wf), LiveSteps(journal), waits=self.waits)
                if self.paused.is_set():
                    raise Suspended("paused", "the app is paused")
                result = wf.fn(ctx, wf.input.model_validate(input))
                journal.finish()
            except RunMovedOn as error:
                self._moved_on(run, error)
                return None
            except CodeChanged as error:
                self._changed(run, error)
                raise RemitError(str(error)) from None
            except RunTimedOut as error:
                self._timed_out(run, error)
                raise RemitError(str(error)) from None
            except Suspended as pause:
                return self._suspend(run, pause)
            except Exception as error:
                raise self._failed(run, error)  # the same error, its secrets redacted
            except BaseException as error:
                if _dbos_own(error):
                    raise  # DBOS's own signal (another worker owns the attempt now): not ours
                raise self._raised(run, error) from None
            return self._done(run, result)

        attempt.__qualname__ = f"remit:{wf.name}"
        return attempt

    def _async_attempt(self, wf: Workflow) -> Any:
        async def attempt(run_id: str, attempt: int, input: dict[str, Any], actor: str) -> Any:
            # The run's row writes are blocking database calls: keep them off the event loop.
            run = await asyncio.to_thread(self._begin, wf, run_id, actor)
            if run is None:
                return None
            try:
                journal = await asyncio.to_thread(self._journal, run)
                ctx = AsyncContext(*self._ctx_parts(run, wf), LiveSteps(journal), waits=self.waits)
                if self.paused.is_set():
                    raise Suspended("paused", "the app is paused")
                result = await wf.fn(ctx, wf.input.model_validate(input))
                journal.finish()
            except RunMovedOn as error:
                self._moved_on(run, error)
                return None
            except CodeChanged as error:
                await asyncio.to_thread(self._changed, run, error)
                raise RemitError(str(error)) from None
            except RunTimedOut as error:
                await asyncio.to_thread(self._timed_out, run, error)
                raise RemitError(str(error)) from None
            except Suspended as pause:
                return await asyncio.to_thread(self._suspend, run, pause)
            except Exception as error:
                raise await asyncio.to_thread(self._failed, run, error)
            except asyncio.CancelledError:
                raise  # the task was cancelled under it: not the workflow's doing
            except BaseException as error:
                if _dbos_own(error):
                    raise  # DBOS's own signal (another worker owns the attempt now): not ours
                raise await asyncio.to_thread(self._raised, run, error) from None
            return await asyncio.to_thread(self._done, run, result)

        attempt.__qualname__ = f"remit:{wf.name}"
        return attempt


def _dbos_own(error: BaseException) -> bool:
    """Whether `error` is one DBOS raises through a workflow to its own handler (the attempt
    was taken over by another worker, or cancelled), which must reach it untouched."""
    from dbos import error as dbos_error

    return isinstance(error, dbos_error.DBOSBaseException)


def _no_steps(workflow_id: str) -> list[StepInfo]:
    raise RemitError(
        f"attempt {workflow_id}: this runtime was given no way to read its steps "
        "(a Worker gives it its DBOS client's)"
    )


def _failure(run: RunInfo, error: Exception) -> str:
    """What a failed run's row says. A workflow whose code no longer matches the steps its run
    recorded is named with the step, and nothing at that step ran. A statement the database
    refused is named by the database's first line only: never the SQL or its parameters, which
    may hold the data of a run or a call."""
    from dbos import error as dbos_error

    if isinstance(error, RecoveredTooOften):
        return str(error)
    if isinstance(error, sa.exc.StatementError):
        cause = error.orig if error.orig is not None else error
        lines = str(cause).strip().splitlines()
        return f"{type(error).__name__}: the database refused a statement: " + (
            lines[0] if lines else type(cause).__name__
        )

    if isinstance(error, dbos_error.DBOSUnexpectedStepError):
        _, step_id, expected, recorded = error.inputs
        return (
            f"the workflow's code changed under run {run.run_id}: its step {step_id} ran "
            f"`{recorded}`, and the code now runs `{expected}` there. Nothing ran at that step. "
            "Keep the steps a running run has taken in order, and guard new ones with "
            "`if ctx.patch('name'):`"
        )
    return f"{type(error).__name__}: {error}"


def implementations_for(
    app: App,
    db: Database,
    settings: Settings,
    *,
    implementations: Mapping[str, Implementation] | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Clock | None = None,
) -> tuple[dict[str, Implementation], Credentials]:
    """What ops are called on, by vendor (each connector's fake or driver, as `settings.fakes`
    says, unless `implementations` gives one; the `wakeup` connector's driver whenever
    `REMIT_WAKEUP_URL` is set), and the credentials drivers see: the
    environment (the process's, or `environ`) over the app's stored secrets."""
    chosen = dict(implementations or {})
    app.forge_on_fakes = settings.fakes
    for vendor, connector in app.connectors.items():
        # The wakeup service is remit's own, not a vendor's: with one configured, an instance
        # on fakes still registers its wakes there, or nothing would start it again.
        fake = settings.fakes and not (vendor == WAKEUP_VENDOR and settings.wakeup_url)
        if vendor not in chosen:
            chosen[vendor] = _fake_of(connector) if fake else connector.driver()
    # Collections live in the app's database with drivers and fakes alike.
    if app.collections and DATA_VENDOR not in chosen:
        chosen[DATA_VENDOR] = CollectionStore(db, app.name, app.collections, clock=clock)
    # remit's own settings (the database URL, the secret key) are not the drivers' business,
    # but for the wakeup service's, which are its connector's credentials.
    given = os.environ if environ is None else environ
    credentials = Credentials(
        Secrets(db, app.name, SecretKey.from_settings(settings)),
        {
            name: value
            for name, value in given.items()
            if not name.startswith("REMIT_") or name in WAKEUP_SETTINGS
        },
    )
    return chosen, credentials


def _fake_of(connector: Connector) -> Implementation:
    """The connector's fake, made; refused, naming the vendor, for a connector that has none."""
    if connector.fake is None:
        raise AppError(
            f"connector `{connector.vendor}` has no fake, and this instance runs every connector "
            f"on its fake (REMIT_FAKES, a test harness or `remit demo`): give it one with "
            f'`Connector("{connector.vendor}", fake=...)`, or run with drivers (REMIT_FAKES '
            "unset)"
        )
    return connector.fake()

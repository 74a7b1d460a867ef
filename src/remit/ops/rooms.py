"""`client.ops`: running the app: pause and resume it, a reconciler pass, the deploy check,
what is due, its workers, what the policies refused, the audit, and waking a stopped worker."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from remit.core import limits
from remit.core.acting import no_nul, not_in_a_workflow
from remit.core.audit import audit_row
from remit.ops.runs import RunsClient, RunServices

if TYPE_CHECKING:
    from remit.budgets.store import Budgets
    from remit.execution.direct import CallResult, DirectCalls
    from remit.ops.concluding import Report
    from remit.ops.deadlines import Deadline
    from remit.ops.deploy import DeployReport
    from remit.ops.pause import AppState
    from remit.ops.registry import WorkerRow
    from remit.policy.guard import Denial


class OpsServices(RunServices, Protocol):
    """The client's services this room uses: the runs room's, and these."""

    @property
    def app_state(self) -> AppState: ...
    @property
    def budgets(self) -> Budgets: ...
    @property
    def direct(self) -> DirectCalls: ...


class OpsClient(RunsClient, Protocol):
    """The client as the ops room sees it."""

    @property
    def services(self) -> OpsServices: ...
    @property
    def on_not_woken(self) -> Callable[[str], object]: ...


class OpsRoom:
    """`client.ops`: the app as a whole."""

    def __init__(self, client: OpsClient) -> None:
        self._client = client

    def pause(self, *, by: str | None = None) -> list[str]:
        """Pause the app, as the policies allow; returns the queues this stopped."""
        not_in_a_workflow("ops.pause")
        who = self._client.person(by)
        self._client.services.guard.require(who, "pause", self._client.app_name, {})
        return self._client.services.app_state.pause(by=who)

    def resume(self, *, by: str | None = None) -> tuple[list[str], list[str]]:
        """Resume the app, as the policies allow; returns the queues restored and the parked
        runs carried on."""
        not_in_a_workflow("ops.resume")
        who = self._client.person(by)
        self._client.services.guard.require(who, "resume", self._client.app_name, {})
        resumed = self._client.services.app_state.resume(by=who)
        self._client.written()
        return resumed

    def reconcile(self, *, dry_run: bool = False, by: str | None = None) -> Report:
        """Run one reconciler pass now (`dry_run`: say what it would do), as the policies
        allow. The pass (not a dry run) is in the audit log as `app.reconciled`, with how many
        actions it took."""
        not_in_a_workflow("ops.reconcile")
        who = self._client.person(by)
        self._client.services.guard.require(who, "reconcile", self._client.app_name, {})
        from remit.ops.reconciler import Reconciler, Timeouts
        from remit.ops.registry import WorkerRegistry, live_versions
        from remit.people.tasks import TaskOpener

        registry = WorkerRegistry(self._client.db, clock=self._client.clock)
        report = Reconciler(
            self._client.services.runs,
            self._client.services.dbos,
            version=self._client.settings.version or self._client.app.version,
            live_versions=lambda: live_versions(
                registry.list(app=self._client.app_name),
                now=datetime.now(UTC),
                dead_after=timedelta(seconds=self._client.settings.dead_after),
            ),
            app_state=self._client.services.app_state,
            tasks=TaskOpener(self._client.db, self._client.app_name, clock=self._client.clock),
            budgets=self._client.services.budgets,
            timeouts=Timeouts.of(self._client.app, self._client.settings.op_timeout),
        ).run_pass(dry_run=dry_run)
        if not dry_run:
            meta = {"actions": len(report.actions), "errors": len(report.errors)}
            with self._client.db.begin() as conn:
                audit_row(
                    conn,
                    at=self._client.clock.now(),
                    actor=who,
                    action="app.reconciled",
                    target=f"app:{self._client.app_name}",
                    meta=meta,
                )
            if report.actions:
                self._client.written()
        return report

    def deploy_check(self, run_ids: Iterable[str] | None = None) -> DeployReport:
        """Replay the unfinished runs against this client's app (see `remit deploy check`)."""
        from remit.ops.deploy import DeployCheck

        return DeployCheck(
            self._client.app,
            self._client.db,
            self._client.services.dbos,
            suspend_after=self._client.settings.suspend_after,
            clock=self._client.clock,
            version=self._client.settings.version,
        ).run(run_ids)

    def deadlines(self, limit: int = 20) -> builtins.list[Deadline]:
        """What is due without anyone asking, earliest first."""
        from remit.ops.deadlines import upcoming_deadlines

        limits.check_limit(limit, where="ops.deadlines")
        return upcoming_deadlines(self._client.db, limit=limit, app=self._client.app_name)

    def workers(self) -> builtins.list[WorkerRow]:
        """The app's workers, as `remit workers` lists them."""
        from remit.ops.registry import WorkerRegistry

        return WorkerRegistry(self._client.db, clock=self._client.clock).list(
            app=self._client.app_name
        )

    def denials(self, *, limit: int = 100) -> builtins.list[Denial]:
        """The acts the policies refused, newest first."""
        limits.check_limit(limit, where="ops.denials")
        return self._client.services.guard.denials(limit=limit)

    def audit(self, target: str, *, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """The latest `limit` audit rows about `target` (a run's, approval's, task's or token's
        id, `app:<name>`, `secret:<NAME>`, `schedule:<workflow>`), oldest first: who did what
        to it, when."""
        from remit.core.audit import audit_of

        limits.check_limit(limit, where="ops.audit")
        no_nul("ops.audit", target=target)
        return audit_of(self._client.db, target)[-limit:]

    def wake_if_stopped(self) -> None:
        """Register a wake for now with the wakeup service if the app's worker is stopping or
        stopped (see `ops/idle.py`), so work just written does not wait for the deadline it
        registered. The wake needs `REMIT_WAKEUP_URL` and the instance's token, which `remit
        wakeup connect` stored. If it cannot be sent, `on_not_woken` is told why; nothing is
        raised, as the write it follows is done."""
        from remit.connectors.wakeup import SERVICE_URL
        from remit.ops.idle import WakeupState

        if not WakeupState(
            self._client.db, self._client.app_name, clock=self._client.clock
        ).wants_wake():
            return
        from remit.resources.wakeups import declarations_of, needs_wakeup_service

        declared = declarations_of(self._client.app)
        if needs_wakeup_service(declared) and self._client.settings.wakeup_url is None:
            why = f"{SERVICE_URL} is not set: set it to the wakeup service's address, as the worker has it"
        else:
            try:
                result = self.register_wake(self._client.clock.now())
            except Exception as error:
                why = f"{type(error).__name__}: {error}"
            else:
                if result.status == "ok":
                    return
                why = result.error or f"{result.op} ended {result.status}"
        self._client.on_not_woken(
            "the write is stored, but the app's worker is stopped and was not woken, so it "
            f"waits for the worker's next registered deadline: {why}"
        )

    def register_wake(self, at: datetime) -> CallResult:
        """Ask the instance's wakeup to wake it at `at` (timezone-aware), replacing the wake
        registered before: the `register` op of the wakeup the data files declare, else
        remit's own `wakeup.instances.register`, called as `remit:wakeup` with no policy asked,
        and recorded in the ledger and the audit. Each call is made afresh (its own key), so a
        time registered again after another re-arms it."""
        not_in_a_workflow("ops.register_wake")
        from remit.resources.wakeups import declarations_of, register_op

        op_id = register_op(declarations_of(self._client.app))
        return self._client.services.direct.call_as_remit(op_id, {"at": at.isoformat()})

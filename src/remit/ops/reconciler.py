"""The reconciler: passes that close the windows a crash or a deploy leaves between remit's rows
and DBOS. Every worker runs one at start and then every `REMIT_RECONCILE_INTERVAL` seconds;
`remit reconcile [--dry-run]` runs one by hand and prints what it did (or would do).

A pass, in order:
1. `conclude`: a run whose current attempt has ended in DBOS while the run's row still says
   `queued` or `running` (the worker died between the two) is concluded from DBOS's record
   (`concluding.py`, which also holds a pass's `Report`).
2. `reattempt`: a run whose current attempt belongs to a version no live worker runs (a
   redeploy stopped it mid-run) moves to its next attempt, forked after the attempt's last
   finished step onto the current code. The move forks the new attempt (through the outbox)
   before it cancels the old one, so a crash between leaves a resume to complete, never a
   cancelled current attempt; an attempt cancelled in DBOS alone cancels its run (pass 1).
3. `enqueue`: a run whose current attempt DBOS has never heard of, and no resume is pending for,
   gets it, forked from the attempt before; a first attempt (enqueued in the transaction that
   writes its run, so missing only if DBOS lost it) is enqueued again under the run's lock.
4. `uncertain`: a non-idempotent write whose `started` ledger row outlived its attempt, in a
   run that has finished or moved on from that attempt (or waits, sleeps or parks), may or may
   not have happened at the vendor: it is marked `uncertain` and its task is opened for a
   person, in one transaction, never called again blindly. A row already `uncertain` is left
   as it is, so a row opens one task however many passes find it.
5. `abandoned`: a read whose `started` row outlived its attempt never answered, and an
   idempotent write cut off in a run that has finished may or may not have happened: either
   row is marked `abandoned`, and whatever reaches it again (a later attempt, a retry, the
   next apply of a resource) calls it anew under its key. Neither needs a person.
6. `queues`: every queue of the app gets the bounds the pause flag says (0 while paused, its
   declared ones otherwise), healing a pause or resume that died half way or raced a worker
   registering its queues as it booted.
7. `resume`: while the app is not paused, a run still parked `paused` moves to its next attempt,
   forked after its last finished step (a resume that died before it, or a run that parked on
   a worker's stale copy of the flag after the resume).
8. `reservations`: a budget reservation still `reserved` whose call can no longer settle it (its
   attempt has ended, its run moved on, or a direct call's process is long gone) is released,
   never settled: what the call cost, if it was made, is unknown (see `budgets.orphaned`).
9. `drift`: each live budget period's `spent` counter is compared with the sum of its settled
   calls' ledger costs; a difference is reported (`Report.drift`, and the log), never corrected.
10. `overdue`: a run still going past its workflow's `timeout=` (stuck in a step, or waiting
   or sleeping past it) fails saying so, its pending gates cancelled and its attempt cancelled
   in DBOS. A run that is working reaches the bound itself, before its next step.
11. `stuck`: a call in flight for longer than its tries may take (each at its op's timeout,
   with the waits between), in an attempt still
   running, is reported, never acted on: the worker making it has stopped answering (a thread
   blocked where no timeout reaches, or a process hung), and only a person can tell which.

An attempt whose worker kept dying at one point fails its run as its next recovery begins
(`recoveries.py`). One that DBOS itself gave up recovering (`MAX_RECOVERY_ATTEMPTS_EXCEEDED`,
left by a version of remit that let DBOS count) is concluded `failed` by pass 1, naming the
step it kept dying in.

Approvals past their expiry are not a window: the worker's sweep expires them, on time, with the
wakes and schedules (`Sweeper`).

Each pass reads only what may need moving (runs in flight, ledger rows still `started`,
reservations still open, the periods still counting), so its cost grows with what
moves, not with what exists. One run's failure is logged
and the pass goes on with the others; every action is logged with its run id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from remit.budgets.model import DIRECT_LEASE, orphaned, usd
from remit.budgets.store import Budgets
from remit.core.backoff import DEFAULT_RETRY, RetryPolicy
from remit.core.fence import ACTIVE, advance, lock
from remit.core.ledger import LedgerStore
from remit.core.outbox import Resume, Resumer, doorbell
from remit.core.periodic import Periodic
from remit.core.runs import FINISHED, Run, RunStore, app_runs, attempt_workflow_id, enqueue_first
from remit.core.schema import ledger, resumes, runs
from remit.core.text import describe_seconds
from remit.execution.calls import DIRECT_CALL_PREFIX
from remit.ops.pause import AppState
from remit.people.ending import cancel_run
from remit.people.tasks import Held, TaskOpener

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.app import App

from remit.ops.concluding import Action, DyingIn, Report, attempts_of, conclude

log = logging.getLogger("remit.reconciler")

DEFAULT_INTERVAL = 60.0

# Who the reconciler acts as when it ends a run (audit and activity rows).
RECONCILER = "remit:reconciler"

# How long past its op's timeout a call may stay in flight before it is reported stuck: the
# worker gives up on a try at its timeout, and records that within moments.
STUCK_GRACE = timedelta(seconds=60)

_GOING = ("PENDING", "ENQUEUED")


@dataclass(frozen=True)
class Timeouts:
    """The bounds the `overdue` and `stuck` passes hold runs and calls to: each timed
    workflow's `timeout=`, and the longest each op's call may take in flight (every try at
    its timeout, and the waits between them), by name, with that of an op the app does not
    declare (`REMIT_OP_TIMEOUT` for each of the default policy's tries)."""

    workflows: Mapping[str, float] = field(default_factory=dict)
    calls: Mapping[str, float] = field(default_factory=dict)
    default_call: float = DEFAULT_RETRY.max_tries * 120.0

    def call(self, op_id: str) -> float:
        return self.calls.get(op_id, self.default_call)

    @classmethod
    def of(cls, app: App, default_op: float) -> Timeouts:
        return cls(
            workflows={n: wf.timeout for n, wf in app.workflows.items() if wf.timeout is not None},
            calls={
                op_id: _longest_call(op.timeout or default_op, op.retry)
                for op_id, op in app.ops.items()
            },
            default_call=_longest_call(default_op, DEFAULT_RETRY),
        )


def _longest_call(timeout: float, retry: RetryPolicy) -> float:
    """The longest a call may be in flight: each try at its timeout, and each wait between."""
    waits = sum(retry.delay(tries) for tries in range(1, retry.max_tries))
    return retry.max_tries * timeout + waits


class Reconciler:
    """Runs the passes. `version` is the code this process runs; `live_versions` says which
    versions live workers run (an attempt of any other version is orphaned)."""

    def __init__(
        self,
        runs_store: RunStore,
        client: DBOSClient,
        *,
        version: str,
        live_versions: Callable[[], Collection[str]],
        app_state: AppState | None = None,
        tasks: TaskOpener | None = None,
        budgets: Budgets | None = None,
        interval: float = DEFAULT_INTERVAL,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.runs = runs_store
        self.db = runs_store.db
        self.client = client
        self.version = version
        self.live_versions = live_versions
        self.app_state = app_state
        # Where an uncertain write's task is opened (None: the `uncertain` step does not run).
        self.tasks = tasks
        # The app's budgets (None: the `reservations` and `drift` steps do not run).
        self.budgets = budgets
        self.resumer = Resumer(self.db, client, clock=runs_store.clock)
        self.ledger = LedgerStore(self.db, clock=runs_store.clock)
        self.interval = interval
        self.timeouts = timeouts or Timeouts()
        self._dying_in = DyingIn(self.ledger, client)
        self._periodic: Periodic | None = None
        # When the last pass that acted (or failed a step) ended: its next pass is due.
        self._acted_at: datetime | None = None

    def next_needed(self) -> datetime | None:
        """When the next pass is needed: one interval after a pass that acted, or failed a
        step, since what it did (or could not do) may leave more to do; None when the last
        pass found nothing. A worker that stops when idle counts it as a deadline."""
        if self._acted_at is None:
            return None
        return self._acted_at + timedelta(seconds=self.interval)

    def run_pass(self, *, dry_run: bool = False) -> Report:
        """One pass, every step in order. A step that fails is reported; the next one runs."""
        report = Report(dry_run=dry_run)
        apply = not dry_run
        steps: list[tuple[str, Callable[[], None]]] = [
            ("runs in flight", lambda: self._in_flight(report, apply)),
        ]
        if self.tasks is not None:
            steps.append(("uncertain", lambda: self._uncertain(report, apply)))
        steps.append(("abandoned", lambda: self._abandon(report, apply)))
        if self.app_state is not None:
            steps.append(("queues", lambda: self._queues(report, apply)))
            steps.append(("resume", lambda: self._resume_parked(report, apply)))
        if self.budgets is not None:
            steps.append(("reservations", lambda: self._release_orphans(report, apply)))
            steps.append(("drift", lambda: self._drift(report)))
        steps.append(("overdue", lambda: self._overdue(report, apply)))
        steps.append(("stuck", lambda: self._stuck(report)))
        for name, step in steps:
            try:
                step()
            except Exception as error:
                log.exception("reconciler: the %s step failed; the pass goes on", name)
                report.errors.append(f"{name}: {type(error).__name__}: {error}")
        if apply:
            acted = bool(report.actions or report.errors)
            self._acted_at = self.runs.clock.now() if acted else None
        return report

    def _in_flight(self, report: Report, apply: bool) -> None:
        """Passes 1 to 3, over the runs in flight and their current attempts in DBOS."""
        in_flight = self.runs.in_flight()
        if not in_flight:
            return
        found = attempts_of(self.client, [workflow_id for _, workflow_id in in_flight])
        conclude(self.runs, in_flight, found, report, apply=apply, dying_in=self._dying_in)
        live = set(self.live_versions()) | {self.version}
        with self.db.engine.connect() as conn:
            outboxed = set(
                conn.execute(
                    sa.select(resumes.c.workflow_id).where(
                        resumes.c.workflow_id.in_([wf for _, wf in in_flight])
                    )
                ).scalars()
            )
        for run_id, workflow_id in in_flight:
            attempt = found.get(workflow_id)
            if attempt is None:
                if workflow_id not in outboxed:
                    self._act(report, apply, run_id, workflow_id, "enqueue", self._enqueue)
                continue
            # An attempt with no version is one any version may take (a start, a resume).
            if attempt.status in _GOING and attempt.app_version not in (None, *live):
                why = f"its version {attempt.app_version} has no live worker"
                self._act(report, apply, run_id, workflow_id, "reattempt", self._reattempt, why)

    def _act(
        self,
        report: Report,
        apply: bool,
        run_id: str,
        workflow_id: str,
        kind: str,
        do: Callable[[str, str], str | None],
        why: str = "",
    ) -> None:
        reason = why or "DBOS holds no attempt for it"
        if not apply:
            report.actions.append(Action(run_id, workflow_id, "-", reason, kind))
            return
        try:
            moved_to = do(run_id, workflow_id)
        except Exception as error:
            log.exception("reconciler: run %s: %s failed; the pass goes on", run_id, kind)
            report.errors.append(f"run {run_id}: {kind}: {type(error).__name__}: {error}")
            return
        if moved_to is not None:
            log.warning("reconciler: run %s: %s to %s (%s)", run_id, kind, moved_to, reason)
            report.actions.append(Action(run_id, moved_to, "queued", reason, kind))

    def carry_over(self, workflow: str) -> list[str]:
        """Move each run of `workflow` whose current attempt runs on another version onto the
        code this worker runs, now, as `reattempt` moves an orphaned one: forked after the
        attempt's last finished step, the old attempt cancelled (the fence refuses what it
        still tries to write). A worker of a new version does this first for the change runs,
        which must outlive the deploys they make. Returns the attempts they moved to."""
        in_flight = self.runs.in_flight(workflow)
        if not in_flight:
            return []
        found = attempts_of(self.client, [workflow_id for _, workflow_id in in_flight])
        moved: list[str] = []
        for run_id, workflow_id in in_flight:
            attempt = found.get(workflow_id)
            if attempt is None or attempt.status not in _GOING:
                continue
            if attempt.app_version in (None, self.version):
                continue
            try:
                moved_to = self._reattempt(run_id, workflow_id)
            except Exception:
                log.exception("run %s: carrying it over to version %s failed", run_id, self.version)
                continue
            if moved_to is not None:
                log.info(
                    "run %s (%s) carried over from version %s to %s: attempt %s",
                    run_id,
                    workflow,
                    attempt.app_version,
                    self.version,
                    moved_to,
                )
                moved.append(moved_to)
        return moved

    def _reattempt(self, run_id: str, workflow_id: str) -> str | None:
        """Move the run past its orphaned attempt: the next attempt is forked after the
        attempt's last finished step, so none runs again, onto the code workers run now."""
        start = 1 + max(
            (step["function_id"] for step in self.client.list_workflow_steps(workflow_id)),
            default=0,
        )
        resume = self._moved(run_id, workflow_id, start)
        if resume is None:
            return None
        self.resumer.fork_all([resume])
        # The old attempt must not run on if a worker of its version comes back (its writes
        # would be refused by the fence anyway).
        self.client.cancel_workflow(workflow_id)
        return resume.workflow_id

    def _enqueue(self, run_id: str, workflow_id: str) -> str | None:
        """Give the run the attempt DBOS never got: forked from the attempt before, re-running
        its last step (a gate reads its decision again; a finished op replays its outcome)."""
        run = self.runs.get(run_id)
        if run.attempt == 1:
            return self._enqueue_first(run)
        before = attempt_workflow_id(run_id, run.attempt - 1)
        last = max(
            (step["function_id"] for step in self.client.list_workflow_steps(before)), default=1
        )
        resume = Resume(workflow_id, run_id, before, last, run.queue)
        self.resumer.fork(resume)
        return workflow_id

    def _enqueue_first(self, run: Run) -> str | None:
        """Enqueue a first attempt DBOS never received, under the run's lock, so a start
        finishing meanwhile or another pass cannot enqueue it twice (DBOS refuses the id)."""
        with self.db.begin_bounded(f"reconciler: enqueue {run.run_id}") as conn:
            current = lock(conn, run.run_id)
            if current is None or not current.on(run.workflow_id, ("queued",)):
                return None  # moved on meanwhile
            enqueue_first(conn, self.client, run)
        doorbell.ring(run.queue)
        return run.workflow_id

    def _moved(self, run_id: str, workflow_id: str, start: int) -> Resume | None:
        with self.db.begin_bounded(f"reconciler: move {run_id} on") as conn:
            current = lock(conn, run_id)
            if current is None or not current.on(workflow_id, ("queued", "running")):
                return None  # moved on meanwhile
            return advance(conn, current, start, now=self.runs.clock.now())

    def _uncertain(self, report: Report, apply: bool) -> None:
        """Pass 4: a write `started` in an attempt that has ended never recorded its outcome.

        Its run has finished, or is no longer on that attempt, or waits, sleeps or parks: no
        attempt is making the call. The row becomes `uncertain` and its task opens. A run that
        is still going may reach the call again on a later attempt: an idempotent write is then
        called again with its key, so only a non-idempotent one is marked here; the attempt
        that reaches it waits at its task. An attempt still running in DBOS is left alone: it
        may be making the call right now, or DBOS recovery re-enters it.
        """
        assert self.tasks is not None
        for row, workflow_id, reason in self._ended_calls("write"):
            if apply:
                try:
                    held = self.tasks.hold(
                        run_id=row.run_id,
                        attempt=row.attempt,
                        step_id=row.step_id,
                        op_id=row.op_id,
                        idempotency_key=row.idempotency_key,
                        reason=f"the outcome of {row.idempotency_key} was never recorded: {reason}",
                    )
                except Exception as error:
                    log.exception(
                        "reconciler: run %s: uncertain failed; the pass goes on", row.run_id
                    )
                    report.errors.append(
                        f"run {row.run_id}: uncertain: {type(error).__name__}: {error}"
                    )
                    continue
                if not (isinstance(held, Held) and held.opened):
                    continue  # marked by another pass, or re-entered by its run, meanwhile
                reason += f"; task {held.task_id} asks a person whether it happened"
            log.warning("reconciler: run %s: %s is uncertain (%s)", row.run_id, row.op_id, reason)
            report.actions.append(Action(row.run_id, workflow_id, "uncertain", reason, "uncertain"))

    def _abandon(self, report: Report, apply: bool) -> None:
        """Pass 5: a read `started` in an attempt that has ended never answered, and an
        idempotent write cut off in a run that has finished. Nothing is making either: its row
        becomes `abandoned`, which whatever reaches the call again calls anew (a read cannot
        double anything, and the write's key makes it once). Its reservation, if any, is
        released by the `reservations` pass."""
        for row, workflow_id, reason in self._ended_calls("read"):
            if apply and not self.ledger.abandon(row.idempotency_key, row.attempt):
                continue  # answered, or re-entered by its run, meanwhile
            log.info("reconciler: run %s: %s is abandoned (%s)", row.run_id, row.op_id, reason)
            report.actions.append(Action(row.run_id, workflow_id, "abandoned", reason, "abandoned"))

    def _ended_calls(self, effect: str) -> list[tuple[Any, str, str]]:
        """The calls whose row is still `started` though nothing is making them, each with the
        attempt (or direct call) it belongs to and why it has ended: with `effect` "write",
        the non-idempotent writes (uncertain: only a person can say whether they happened);
        with "read", the reads and the idempotent writes (abandoned: calling one again under
        its key is safe, so none needs a person)."""
        idempotent = ledger.c.idempotent.is_(True)
        if effect == "write":
            which: sa.ColumnElement[bool] = sa.and_(ledger.c.effect == "write", sa.not_(idempotent))
            # In a run still going, the attempt that reaches the write again waits at its task.
            moved_on_too: sa.ColumnElement[bool] = sa.true()
        else:
            which = sa.or_(ledger.c.effect == "read", idempotent)
            # An idempotent write is left to the attempt that reaches it again, and called
            # again with its key; in a finished run (or a later apply, `resources/`) nothing
            # will, until someone retries it.
            moved_on_too = ledger.c.effect == "read"
        with self.db.engine.connect() as conn:
            started = list(
                conn.execute(
                    sa.select(
                        ledger.c.run_id,
                        ledger.c.attempt,
                        ledger.c.step_id,
                        ledger.c.idempotency_key,
                        ledger.c.op_id,
                    )
                    .join(runs, runs.c.run_id == ledger.c.run_id)
                    .where(
                        app_runs(self.runs.app),
                        ledger.c.status == "started",
                        which,
                        sa.or_(
                            runs.c.status.in_(tuple(FINISHED)),
                            sa.and_(
                                moved_on_too,
                                sa.or_(
                                    runs.c.attempt != ledger.c.attempt,
                                    runs.c.status.not_in(("queued", "running")),
                                ),
                            ),
                        ),
                    )
                )
            )
        ids = {attempt_workflow_id(row.run_id, row.attempt) for row in started}
        found = attempts_of(self.client, sorted(ids)) if ids else {}
        ended: list[tuple[Any, str, str]] = []
        for row in started:
            workflow_id = attempt_workflow_id(row.run_id, row.attempt)
            attempt = found.get(workflow_id)
            if attempt is not None and attempt.status not in _GOING:
                reason = f"{row.op_id} started in {workflow_id}, which ended {attempt.status}"
                ended.append((row, workflow_id, reason))
        for row in self._stale_direct_calls(which):
            reason = (
                f"{row.op_id}, called directly by {row.actor}, started at "
                f"{row.started_at:%Y-%m-%d %H:%M:%S} UTC and recorded no outcome within "
                f"{DIRECT_LEASE}"
            )
            ended.append((row, row.run_id, reason))
        return ended

    def _stale_direct_calls(self, which: sa.ColumnElement[bool]) -> list[Any]:
        """Calls made directly (`remit call`, `remit data`) that started longer ago than any
        call takes and recorded no outcome: the process making them stopped. A direct call
        has no run or attempt to ask, so its age is all there is to go on."""
        cutoff = self.runs.clock.now() - DIRECT_LEASE
        with self.db.engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(
                        ledger.c.run_id,
                        ledger.c.attempt,
                        ledger.c.step_id,
                        ledger.c.idempotency_key,
                        ledger.c.op_id,
                        ledger.c.actor,
                        ledger.c.started_at,
                    ).where(
                        ledger.c.status == "started",
                        which,
                        ledger.c.run_id.startswith(DIRECT_CALL_PREFIX, autoescape=True),
                        ledger.c.started_at < cutoff,
                    )
                )
            )

    def _queues(self, report: Report, apply: bool) -> None:
        """Pass 6: every queue's bounds as the pause flag says."""
        assert self.app_state is not None
        paused = self.app_state.paused()
        off = self.app_state.align_queues() if apply else self.app_state.queues_off()
        for name in off:
            reason = (
                f"queue {name} dequeues while the app is paused: stop it"
                if paused
                else f"queue {name} lacks its declared bounds while the app runs: restore them"
            )
            log.warning("reconciler: %s", reason)
            report.actions.append(Action("-", "-", "paused" if paused else "-", reason, "queues"))

    def _resume_parked(self, report: Report, apply: bool) -> None:
        """Pass 7: while the app is not paused, carry on the runs a pause parked."""
        assert self.app_state is not None
        if self.app_state.paused():
            return
        for parked in self.app_state.parked():
            self._act(
                report,
                apply,
                parked.run_id,
                parked.workflow_id,
                "resume",
                self.app_state.resume_parked,
                "the run is parked and the app is not paused",
            )

    def _release_orphans(self, report: Report, apply: bool) -> None:
        """Pass 8: release the reservations no call will settle."""
        assert self.budgets is not None
        open_ = self.budgets.open_reservations()
        if not open_:
            return
        # Only the attempts still current need DBOS's word: the rest have ended for remit.
        asked = sorted(
            {r.workflow_id for r, run in open_ if run is not None and run[0] == r.workflow_id}
        )
        found = attempts_of(self.client, asked) if asked else {}
        now = self.runs.clock.now()
        for reservation, run in open_:
            attempt = found.get(reservation.workflow_id)
            why = orphaned(
                reservation,
                run=run,
                attempt_status=None if attempt is None else attempt.status,
                now=now,
            )
            if why is None:
                continue
            if apply and not self.budgets.release_orphan(reservation):
                continue  # settled, or taken over by its call's step running again, meanwhile
            reason = (
                f"{reservation.op_id} (key {reservation.idempotency_key}) reserved "
                f"{usd(reservation.reserved_usd)} and will not settle: {why}"
            )
            log.warning("reconciler: run %s: released: %s", reservation.run_id, reason)
            report.actions.append(
                Action(reservation.run_id, reservation.workflow_id, "released", reason, "release")
            )

    def _drift(self, report: Report) -> None:
        """Pass 9: report every live period whose counter is not its ledger's sum."""
        assert self.budgets is not None
        for found in self.budgets.drift():
            if found.drift_usd == 0:
                continue
            log.error(
                "reconciler: budget %s %s: the counter says %s spent, the ledger %s (off by %s); "
                "not corrected",
                found.scope,
                found.period,
                usd(found.spent_usd),
                usd(found.ledger_usd),
                usd(found.drift_usd),
            )
            report.drift.append(found)

    def _overdue(self, report: Report, apply: bool) -> None:
        """Pass 10: fail the runs still going past their workflow's timeout (counted from the
        run's start, or its latest retry). A run whose attempt has a call in flight is left to
        it: the call ends within its op's timeout, and the run fails before its next step."""
        timed = self.timeouts.workflows
        if not timed:
            return
        now = self.runs.clock.now()
        past = sa.or_(
            *(
                sa.and_(runs.c.workflow == name, runs.c.created_at < now - timedelta(seconds=t))
                for name, t in timed.items()
            )
        )
        in_flight = (
            sa.select(ledger.c.id)
            .where(
                ledger.c.run_id == runs.c.run_id,
                ledger.c.attempt == runs.c.attempt,
                ledger.c.status == "started",
            )
            .exists()
        )
        with self.db.engine.connect() as conn:
            candidates = list(
                conn.execute(
                    sa.select(
                        runs.c.run_id, runs.c.workflow, runs.c.workflow_id, runs.c.status
                    ).where(
                        app_runs(self.runs.app),
                        runs.c.status.in_(ACTIVE),
                        past,
                        sa.not_(sa.and_(runs.c.status == "running", in_flight)),
                    )
                )
            )
        for row in candidates:
            timeout = timed[row.workflow]
            deadline = self.runs.timed_since(row.run_id) + timedelta(seconds=timeout)
            if deadline > now:
                continue  # retried since: its bound counts from then
            reason = (
                f"run {row.run_id} went past its workflow's timeout of "
                f"{describe_seconds(timeout)} (`{row.workflow}`, timeout=) while {row.status}: "
                f"it had to end by {deadline:%Y-%m-%d %H:%M:%S} UTC. Raise the timeout, or "
                "retry the run"
            )
            if apply:
                try:
                    ended = cancel_run(
                        self.runs,
                        self.client,
                        row.run_id,
                        by=RECONCILER,
                        timed_out=reason,
                        only_on=row.workflow_id,
                    )
                except Exception as error:
                    log.exception(
                        "reconciler: run %s: overdue failed; the pass goes on", row.run_id
                    )
                    report.errors.append(
                        f"run {row.run_id}: overdue: {type(error).__name__}: {error}"
                    )
                    continue
                if ended.status != "failed" or ended.error != reason:
                    continue  # it ended, or moved on, meanwhile
            log.warning("reconciler: run %s fails: %s", row.run_id, reason)
            report.actions.append(Action(row.run_id, row.workflow_id, "failed", reason, "overdue"))

    def _stuck(self, report: Report) -> None:
        """Pass 11: report the calls in flight past their op's timeout in attempts still
        running. Nothing is done to them: the worker that makes each one is not answering."""
        now = self.runs.clock.now()
        shortest = min([self.timeouts.default_call, *self.timeouts.calls.values()])
        with self.db.engine.connect() as conn:
            started = list(
                conn.execute(
                    sa.select(
                        ledger.c.run_id,
                        ledger.c.attempt,
                        ledger.c.op_id,
                        ledger.c.idempotency_key,
                        ledger.c.started_at,
                    )
                    .join(runs, runs.c.run_id == ledger.c.run_id)
                    .where(
                        app_runs(self.runs.app),
                        ledger.c.status == "started",
                        ledger.c.attempt == runs.c.attempt,
                        runs.c.status == "running",
                        ledger.c.started_at < now - timedelta(seconds=shortest) - STUCK_GRACE,
                    )
                )
            )
        late = [
            row
            for row in started
            if now - row.started_at > timedelta(seconds=self.timeouts.call(row.op_id)) + STUCK_GRACE
        ]
        if not late:
            return
        ids = sorted({attempt_workflow_id(row.run_id, row.attempt) for row in late})
        found = attempts_of(self.client, ids)
        for row in late:
            workflow_id = attempt_workflow_id(row.run_id, row.attempt)
            attempt = found.get(workflow_id)
            if attempt is None or attempt.status not in _GOING:
                continue  # ended: the `uncertain` and `abandoned` passes see to it
            longest = self.timeouts.call(row.op_id)
            reason = (
                f"`{row.op_id}` (key {row.idempotency_key}) has been in flight for "
                f"{describe_seconds((now - row.started_at).total_seconds())}, past the "
                f"{describe_seconds(longest)} its tries may take, in attempt {workflow_id} on executor "
                f"{attempt.executor_id}: that worker is not answering (hung, or blocked where no "
                "timeout reaches). Restart it; its attempts are then taken over"
            )
            log.error("reconciler: run %s: %s", row.run_id, reason)
            report.actions.append(Action(row.run_id, workflow_id, "running", reason, "stuck"))

    def start(self) -> None:
        """A pass now, then one every `interval` seconds on a daemon thread."""
        self.run_pass()
        self._periodic = Periodic("remit-reconciler", self.interval, self.run_pass)
        self._periodic.start()

    def stop(self) -> None:
        if self._periodic is not None:
            self._periodic.stop(timeout=5)
            self._periodic = None

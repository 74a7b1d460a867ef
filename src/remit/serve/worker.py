"""The worker: loads the app, prepares the database, launches DBOS and serves the app's queues.

Executor ids. DBOS gives every process the executor id `local`, so two live workers recover each
other's running work. A remit worker takes its own id: `REMIT_EXECUTOR_ID` if set, otherwise the
lowest free *slot* of its app on its host, `<host>-<app>-<n>`, held by an exclusive file lock for
the life of the process. A worker restarted after a crash gets the slot (and so the id) its
predecessor held, and DBOS's recovery at launch completes that predecessor's unfinished attempts. A worker that never
comes back is taken over by a live one (`Heartbeat`, and the registry in `ops/registry.py`).

Version. Every worker runs under the app's explicit version (`App.version`): a hash of remit's
version and the code of every workflow, or what `REMIT_VERSION` says (a build's SHA).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import math
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig

from remit.app import App
from remit.changes.workflow import CHANGE
from remit.client import Client
from remit.connectors.base import Implementation
from remit.core import telemetry
from remit.core.clock import Clock, SystemClock
from remit.core.database import portable_serializer
from remit.core.errors import RemitError
from remit.core.periodic import Periodic
from remit.core.principals import SYSTEM_PREFIX
from remit.core.runs import ParentLink, queue_id
from remit.core.settings import Settings
from remit.execution.timers import Waker
from remit.execution.waits import ChildStart, WaitSweep
from remit.ops.idle import IdleCheck
from remit.ops.pause import AppState, PauseWatch, paused, register_queue
from remit.ops.reconciler import Reconciler, Timeouts
from remit.ops.registry import WorkerRegistry, live_versions, takeover_candidates
from remit.ops.retries import Retries
from remit.ops.runtime import Runtime, implementations_for
from remit.ops.scheduler import Scheduler
from remit.ops.wake import Listener, QueueWake
from remit.people.approvals import Approvals
from remit.people.ending import cancel_orphans
from remit.people.notify import Notifier, default_notifiers
from remit.people.tasks import TaskOpener, Tasks
from remit.policy.guard import Guard

log = logging.getLogger("remit.worker")


class ExecutorSlot:
    """The lowest free executor slot on this host for one app on one database. Its id names
    the app, `<host>-<app>-<n>`: the workers of two apps on one database never share an id,
    which DBOS's recovery at launch and the workers table key by."""

    def __init__(self, scope: str, app: str) -> None:
        digest = hashlib.sha256(f"{scope}\n{app}".encode()).hexdigest()[:12]
        self.folder = Path(tempfile.gettempdir()) / "remit-executors" / digest
        self.app = app
        self._held: IO[str] | None = None

    def acquire(self) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0] or "host"
        for n in range(4096):
            handle = (self.folder / f"slot-{n}.lock").open("w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            handle.write(str(os.getpid()))
            handle.flush()
            self._held = handle
            return f"{host}-{self.app}-{n}"
        raise RemitError(f"no free executor slot under {self.folder}: set REMIT_EXECUTOR_ID")

    def release(self) -> None:
        if self._held is not None:
            fcntl.flock(self._held, fcntl.LOCK_UN)
            self._held.close()
            self._held = None


class Worker:
    """One worker process's DBOS instance, serving the app's queues.

    `start()` prepares the database and launches; `serve()` blocks until SIGTERM or SIGINT and
    then drains; `stop()` drains running work for up to `drain_timeout` seconds.
    """

    def __init__(
        self,
        app: App,
        settings: Settings,
        *,
        implementations: Mapping[str, Implementation] | None = None,
        clock: Clock | None = None,
        environ: Mapping[str, str] | None = None,
        on_taken_over: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        clock = clock or SystemClock()
        # The worker's database, DBOS client and services are its client's: one composition
        # root, with a pool as wide as the worker's threads. Direct calls made through it use
        # the worker's implementations (the same fakes).
        self.remit = Client(
            app,
            settings,
            clock=clock,
            environ=environ,
            pool_size=min(settings.threads, 16),
            prepare=False,
        )
        self.db = self.remit.db
        self.implementations, credentials = implementations_for(
            app, self.db, settings, implementations=implementations, environ=environ, clock=clock
        )
        self.remit.use_implementations(self.implementations)
        self.runtime = Runtime(
            app,
            self.db,
            implementations=self.implementations,
            clock=clock,
            environ=credentials,
            notifiers=app.notifiers if app.notifiers is not None else self._notifiers(environ),
            suspend_after=settings.suspend_after,
            version=settings.version,
            max_recoveries=settings.max_recoveries,
            op_timeout=settings.op_timeout,
        )
        self.runtime.waits.starter = self._start_child
        self.runtime.waits.fork = lambda resumes: self.approvals.resumer.fork_all(resumes)
        self._slot = ExecutorSlot(self.db.dbos_url, app.name)
        self.executor_id = ""
        self._stop = threading.Event()
        self._launched = False
        self._stopped = False
        self._reconciler: Reconciler | None = None
        self._heartbeat: Heartbeat | None = None
        self._sweeper: Sweeper | None = None
        self._pause_watch: PauseWatch | None = None
        self._wake: QueueWake | None = None
        self._listener: Listener | None = None
        self._dbos_engine: sa.Engine | None = None
        self.registry = WorkerRegistry(self.db, clock=self.runtime.clock)
        self.on_taken_over = on_taken_over or _taken_over

    def _start_child(self, start: ChildStart) -> None:
        """Start a child run for `ctx.start`, as its parent's principal, under the policies
        (remit's own principals, a schedule's, are not checked), linked to its parent."""
        wf = self.app.workflow(start.workflow)
        runs = self.runtime.runs.naming(None, app=self.app.name)
        parent = ParentLink(
            start.parent.run_id,
            start.parent.workflow_id,
            start.step_id,
            start.key,
            start.detached,
        )
        actor = start.parent.actor
        if actor.startswith(SYSTEM_PREFIX):
            runs.start(
                self.client, wf, start.input, started_by=actor, run_id=start.run_id, parent=parent
            )
        else:
            self.guard.start(
                runs, self.client, wf, start.input, by=actor, run_id=start.run_id, parent=parent
            )

    def _notifiers(self, environ: Mapping[str, str] | None) -> list[Notifier]:
        """The notifiers of an app that names none: the log, a webhook if one is set, and
        Telegram if `REMIT_TELEGRAM_API` is set (its bot token a stored secret)."""
        chosen = default_notifiers(self.settings.webhook_url, self.settings.webhook_secret)
        if self.settings.telegram_api is not None:
            from remit.people.telegram import TelegramNotifier, stored_token

            app = self.app
            token = stored_token(self.remit.services.secrets, environ=environ)
            chosen.append(
                TelegramNotifier(lambda: app.policy, token, api_base=self.settings.telegram_api)
            )
        return chosen

    # The services are the worker's client's, built once (and again after the worker stops).

    @property
    def client(self) -> DBOSClient:
        """DBOS's client on the app's system database. Refused once the worker has stopped: a
        step still running then opens no new client that nothing would close."""
        if self._stopped:
            raise RemitError(
                f"worker {self.executor_id or '-'} has stopped: its DBOS client is closed"
            )
        return self.remit.services.dbos

    @property
    def approvals(self) -> Approvals:
        """List, show and decide the app's approvals (the same `decide()` as every surface)."""
        return self.remit.services.approvals

    @property
    def tasks(self) -> Tasks:
        """List, show and resolve the app's tasks: writes whose outcome a person confirms."""
        return self.remit.services.tasks

    @property
    def retries(self) -> Retries:
        """Retry the app's failed and cancelled runs on the code this worker runs."""
        return self.remit.services.retries

    @property
    def guard(self) -> Guard:
        """The app's policies, enforced, with the record of what they refuse."""
        return self.remit.services.guard

    @property
    def app_state(self) -> AppState:
        """The app's pause flag: pause, resume, and what follows from them."""
        return self.remit.services.app_state

    def start(self, *, before_launch: Callable[[], None] | None = None) -> None:
        """Prepare the database, register the app's workflows and queues, and launch DBOS.

        `before_launch` runs after remit has registered its workflows and before DBOS launches:
        the place to register plain DBOS workflows of your own beside remit's.
        """
        self._stopped = False
        self.db.prepare()
        self.executor_id = self.settings.executor_id or self._slot.acquire()
        config: DBOSConfig = {
            "name": self.app.name,
            "system_database_url": self.db.dbos_url,
            "application_version": self.runtime.version,
            "executor_id": self.executor_id,
            "serializer": portable_serializer(),
            "max_executor_threads": self.settings.threads,
            "sys_db_pool_size": min(self.settings.threads, 16),
            # DBOS's own connections get the bound remit's have (`Database.connect_args`).
            "sys_db_idle_transaction_timeout_sec": self.settings.idle_transaction_timeout,
            "run_migrations": False,
            "log_level": self.settings.log_level,
            "notification_listener_polling_interval_sec": self.settings.poll_interval,
            # DBOS traces into the tracer provider remit's spans go to, exporting nothing itself.
            "enable_otlp": telemetry.tracing(
                self.settings,
                service=self.app.name,
                version=self.runtime.version,
                instance=self.executor_id,
            ),
        }
        self._dbos_engine = self.db.dbos_engine(pool_size=min(self.settings.threads, 16))
        if self._dbos_engine is not None:
            config["system_database_engine"] = self._dbos_engine
        # Queues are registered before launch, so DBOS's queue manager serves them from its
        # first pass rather than finding them on a later one (it looks once a second). A paused
        # app's queues stay stopped. A pause or resume landing between reading the flag and
        # registering is healed by the reconciler, which re-derives the queues from the flag.
        self._pause_watch = PauseWatch(
            lambda: paused(self.db, self.app.name),
            self.runtime.paused,
            self.settings.sweep_interval,
        )
        self._pause_watch.refresh()
        for queue in self.app.queues.values():
            register_queue(
                self.client,
                self.app,
                queue,
                paused=self.runtime.paused.is_set(),
                poll_interval=self.settings.poll_interval,
            )
        registering = time.monotonic()
        self.registry.register(self.executor_id, app=self.app.name, version=self.runtime.version)
        registered = time.monotonic(), time.monotonic() - registering
        moved = self.runtime.runs.adopt_queues(self.app.workflows, self.app.queues)
        if moved:
            log.info(
                "%d runs moved onto %s's own queues (`%s:<queue>`)",
                moved,
                self.app.name,
                self.app.name,
            )
        deployed = self.runtime.version not in {
            known["version_name"]
            for known in self.client.list_application_versions()
            if known["application_name"] in (None, self.app.name)
        }
        DBOS(config=config)
        telemetry.quiet_expected_failures()
        self.runtime.list_steps = lambda workflow_id: self.client.list_workflow_steps(workflow_id)
        self.runtime.attempt_status = self._attempt_status
        self.runtime.register()
        if before_launch is not None:
            before_launch()
        # A fork onto one of the queues wakes its thread at once (`ops/wake.py`), on Postgres
        # from any process; the poll interval is the fallback.
        self._wake = QueueWake()
        self._wake.start()
        DBOS.launch()
        self._launched = True
        if not self.db.is_sqlite:
            self._listener = Listener(self.db.url)
            self._listener.start()
        # Started: from now on a short outage is waited out, not failed (README, "Outages").
        self.db.wait_out_outages()
        if deployed:
            # This code is new here: it is the latest version, the one that takes the work no
            # version is named for (starts, resumes, runs moved off a dead version). DBOS ranks
            # versions by when they were first registered, to the second on SQLite, so a deploy
            # within the second of the last one could rank below it: rank it explicitly.
            self.client.set_latest_application_version(self.runtime.version)
        self._heartbeat = Heartbeat(self, registered=registered)
        self._heartbeat.start()
        self._reconciler = Reconciler(
            self.runtime.runs,
            self.client,
            version=self.runtime.version,
            live_versions=self.live_versions,
            app_state=self.app_state,
            tasks=TaskOpener(self.db, self.app.name, clock=self.runtime.clock),
            budgets=self.runtime.caller.budgets,
            interval=self.settings.reconcile_interval,
            timeouts=Timeouts.of(self.app, self.settings.op_timeout),
        )
        if deployed and CHANGE in self.app.workflows:
            # Change runs outlive the deploys they make: a new version takes them first.
            self._reconciler.carry_over(CHANGE)
        self._pause_watch.start()
        self._reconciler.start()
        self._sweeper = Sweeper(self)
        self._sweeper.start()
        log.info(
            "worker %s serving app %s version %s on %s",
            self.executor_id,
            self.app.name,
            self.runtime.version,
            self.db.url.render_as_string(),
        )

    def sweep_at(self, at: datetime) -> None:
        """Sweep at `at` as well as every sweep interval (see `Sweeper.sweep_at`)."""
        if self._sweeper is None:
            raise RemitError(f"worker {self.executor_id} is not running: it sweeps nothing")
        self._sweeper.sweep_at(at)

    def idle_check(self) -> IdleCheck:
        """What says whether this worker is idle (see `ops/idle.py`), on its own parts."""
        return IdleCheck(
            self.db,
            self.client,
            app=self.app.name,
            # With any bare-named queue an earlier remit left for the app, still served.
            queues=sorted(
                {
                    *(queue_id(self.app.name, name) for name in self.app.queues),
                    *self.app_state.dbos_queues(),
                }
            ),
            executor_id=self.executor_id,
            # Read from the database, not the worker's copy: a resume elsewhere within the
            # last sweep interval must make its queued runs count.
            paused=lambda: paused(self.db, self.app.name),
            other_versions=lambda: self.live_versions() - {self.runtime.version},
            timeouts=Timeouts.of(self.app, self.settings.op_timeout).workflows,
            channels=self.runtime.notifications.channels,
            reconciler_due=lambda: (
                None if self._reconciler is None else self._reconciler.next_needed()
            ),
            horizon=self.settings.idle_horizon,
            clock=self.runtime.clock,
        )

    def _attempt_status(self, workflow_id: str) -> str | None:
        """The DBOS status of attempt `workflow_id` (None: DBOS holds no such attempt)."""
        found = self.client.list_workflows(
            workflow_ids=[workflow_id], load_input=False, load_output=False
        )
        return found[0].status if found else None

    def live_versions(self) -> set[str]:
        """The versions the app's live workers run (this one's included). While this worker's
        own heartbeats are not steady (see `Heartbeat`), an old heartbeat proves nothing, and
        every worker neither stopped nor taken over counts as live."""
        rows = self.registry.list(app=self.app.name)
        if self._heartbeat is not None and not self._heartbeat.steady():
            return {row.version for row in rows if row.stopped_at is None and not row.taken_over_by}
        return live_versions(
            rows,
            now=self.runtime.clock.now(),
            dead_after=timedelta(seconds=self.settings.dead_after),
        ) | {self.runtime.version}

    def stop(self, timeout: float | None = None, *, keep_slot: bool = False) -> int:
        """Stop taking work and let running attempts finish for up to `timeout` seconds.

        Attempts still running then are left PENDING under this executor id, and their threads
        go on until the process ends: end it soon after (the `remit` commands do, at once),
        keeping the executor slot (`keep_slot=True`) so that no other worker takes the id and
        recovers attempts this process is still running. Returns how many were left so.
        """
        drain = self.settings.drain_timeout if timeout is None else timeout
        self.runtime.stopping = True
        for background in (
            self._sweeper,
            self._reconciler,
            self._heartbeat,
            self._pause_watch,
            self._listener,
        ):
            if background is not None:
                background.stop()
        self._sweeper = self._pause_watch = None
        self._reconciler = self._heartbeat = None
        self._listener = None
        if self._wake is not None:
            self._wake.stop()  # the queue threads take no more work, whatever their interval
        left = 0
        if self._launched:
            DBOS.destroy(workflow_completion_timeout_sec=math.ceil(drain), destroy_registry=True)
            self._launched = False
            left = self._sign_off()
            telemetry.flush()
        if self._wake is not None:
            self._wake.detach()
            self._wake = None
        if not keep_slot:
            self._slot.release()
        if self._dbos_engine is not None:
            self._dbos_engine.dispose()
            self._dbos_engine = None
        self._stopped = True
        self.remit.close()
        return left

    def release_slot(self) -> None:
        """Give up the executor slot a stopped worker kept: for a process that goes on after
        a stop that left no attempt running."""
        self._slot.release()

    def _sign_off(self) -> int:
        """Mark the worker stopped, unless it leaves attempts behind: then its heartbeat goes
        stale and a live worker takes them over (or this executor id, restarted, recovers them)."""
        left = self.client.list_workflows(
            executor_id=self.executor_id, status="PENDING", load_input=False, load_output=False
        )
        if left:
            log.warning("worker %s leaves %d attempts for recovery", self.executor_id, len(left))
        else:
            self.registry.stopped(self.executor_id)
        return len(left)

    def serve(self, *, ready: Callable[[], object] | None = None) -> None:
        """Serve until SIGTERM or SIGINT, then drain (see `stop`). `ready` is called once the
        signals are handled: a worker that says it serves before then dies of a SIGTERM sent
        the moment it says so, without draining.

        A second signal while draining is logged and ignored: the drain has its bound. Should
        the drain overrun that bound by `DRAIN_MARGIN` seconds (a database that stopped
        answering, a DBOS shutdown that hangs), a watchdog ends the process (exit code 70),
        leaving its attempts to the next worker with this executor id.
        """
        draining = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if draining.is_set():
                log.warning(
                    "received %s again while draining: ignored; the drain ends within %.0fs",
                    name,
                    self.settings.drain_timeout,
                )
                return
            draining.set()
            log.warning("received %s: draining for up to %.0fs", name, self.settings.drain_timeout)
            self._stop.set()

        previous: dict[int, Any] = {
            sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            if ready is not None:
                ready()
            self._stop.wait()
        finally:
            draining.set()
            watchdog = Watchdog(self.settings.drain_timeout + DRAIN_MARGIN, _drain_overran)
            watchdog.arm()
            try:
                self.stop(keep_slot=True)
            finally:
                watchdog.disarm()
                for sig, handler in previous.items():
                    signal.signal(sig, handler)


# Seconds a drain may overrun REMIT_DRAIN_TIMEOUT before the watchdog ends the process.
DRAIN_MARGIN = 15.0


class Watchdog:
    """Calls `on_overrun` (on its own thread) if not disarmed within `bound` seconds."""

    def __init__(self, bound: float, on_overrun: Callable[[float], None]) -> None:
        self.bound = bound
        self._disarmed = threading.Event()
        self._on_overrun = on_overrun
        self._thread = threading.Thread(target=self._watch, name="remit-watchdog", daemon=True)

    def arm(self) -> None:
        self._thread.start()

    def disarm(self) -> None:
        self._disarmed.set()

    def _watch(self) -> None:
        if not self._disarmed.wait(self.bound):
            self._on_overrun(self.bound)


def _drain_overran(bound: float) -> None:
    log.critical(
        "the drain did not end within %.0fs: stopping now; attempts still running are "
        "recovered by the next worker with this executor id",
        bound,
    )
    logging.shutdown()
    os._exit(70)


def _taken_over() -> None:
    """A worker that another has taken over stops at once: its attempts now run elsewhere."""
    log.critical("this worker was declared dead and taken over; stopping now")
    logging.shutdown()
    os._exit(75)


class Heartbeat:
    """Renews the worker's heartbeat, and takes over dead workers of the same version.

    Runs on a daemon thread every `REMIT_HEARTBEAT_INTERVAL` seconds.

    A heartbeat older than `REMIT_DEAD_AFTER` is evidence that its worker is dead only if this
    worker reached the database all that time: while the database was away, every worker's
    heartbeat stopped with it. So a worker that could not write its own heartbeat for more than
    half the bound (the database was away, or this process stalled) declares no worker dead
    until it has written it steadily for the whole bound again. Half the bound is shorter than
    any outage after which a live worker's heartbeat could be older than the bound (the outage,
    an interval, and the live worker's own wait of up to 2 s to try again), with the defaults
    and in general where the interval is well under half the bound; it is never less than two
    intervals, so a beat that is merely late does not count.
    """

    def __init__(
        self,
        worker: Worker,
        *,
        registered: tuple[float, float],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`registered`: when the worker's registration was written (`monotonic` seconds), and
        how long writing it took; a long write means the database was away."""
        self.worker = worker
        self.monotonic = monotonic
        self.interval = worker.settings.heartbeat_interval
        self.dead_after = timedelta(seconds=worker.settings.dead_after)
        self._periodic = Periodic("remit-heartbeat", self.interval, self.beat)
        # Monotonic seconds: the longest pause between two writes of the heartbeat that is not
        # taken for an outage; this worker's last write (at first, its registration); and
        # since when its writes have had no longer pause.
        self._pause = max(worker.settings.dead_after / 2, 2 * self.interval)
        at, took = registered
        self._last_reached = at
        self._steady_since = at if took > self._pause else at - worker.settings.dead_after

    def start(self) -> None:
        # The first beat is an interval from now: launching DBOS since the registration was
        # written is no pause of the heartbeat's.
        self._last_reached = self.monotonic()
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def steady(self) -> bool:
        """Whether this worker has reached the database without a long pause for the whole
        bound, up to a moment ago: only then is another worker's old heartbeat a sign that it
        is dead. A heartbeat overdue now (the database may be away as this is asked) is not
        steady either."""
        now = self.monotonic()
        return (
            now - self._steady_since >= self.dead_after.total_seconds()
            and now - self._last_reached <= self._pause
        )

    def beat(self) -> list[str]:
        """Renew the heartbeat and take over the dead; returns the executor ids taken over."""
        worker = self.worker
        me = worker.executor_id
        if not worker.registry.heartbeat(me):
            worker.on_taken_over()
            return []
        reached = self.monotonic()
        paused = reached - self._last_reached
        self._last_reached = reached
        if paused > self._pause:
            self._steady_since = reached
            log.warning(
                "worker %s could not write its heartbeat for %.0fs (the database was away, or "
                "this process stalled): it declares no worker dead for the next %.0fs",
                me,
                paused,
                self.dead_after.total_seconds(),
            )
        if not self.steady():
            return []
        rows = worker.registry.list(app=worker.app.name)
        if not self.steady():
            return []  # the read waited for the database: every heartbeat may be old now
        dead = takeover_candidates(
            rows,
            me=me,
            version=worker.runtime.version,
            now=worker.runtime.clock.now(),
            dead_after=self.dead_after,
        )
        taken: list[str] = []
        for executor_id in dead:
            if not worker.registry.claim(executor_id, by=me, dead_after=self.dead_after):
                continue
            # DBOS's own guarded recovery: it re-enqueues each PENDING attempt of the dead
            # executor (of this version) on its queue, and only while it is still PENDING
            # under that executor, so an attempt another worker already picked up is left
            # alone. The public resume_workflow has no such guard. Only the claimer calls it.
            handles = DBOS._recover_pending_workflows([executor_id])
            log.warning(
                "took over worker %s: %d attempts back on their queues", executor_id, len(handles)
            )
            taken.append(executor_id)
        return taken


# Seconds past a deadline that a sweep asked for at it runs, so the clock has passed it.
AT_MARGIN = 0.01


class Sweeper:
    """Every `REMIT_SWEEP_INTERVAL` seconds, on a daemon thread: forks the resumes a decider
    left in the outbox, expires approvals past their time through `decide()`, wakes the runs
    whose long sleep is due, starts the runs schedules have made due, and retries unsent
    notifications. Its first pass (all but notifications) runs as the worker starts, just after
    it launches, so a decision made while no worker ran is carried on at once; sending
    notifications, which may wait on slow receivers, is left to the thread."""

    # A resume younger than this is left to the process that decided it.
    OUTBOX_GRACE = 2.0

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.interval = worker.settings.sweep_interval
        self.scheduler = Scheduler(
            worker.app,
            worker.runtime.runs,
            worker.client,
            clock=worker.runtime.clock,
            interval=self.interval,
        )
        self.waker = Waker(worker.db, worker.client, clock=worker.runtime.clock)
        self.waits = WaitSweep(worker.db, worker.client, clock=worker.runtime.clock)
        self._periodic = Periodic(
            "remit-sweeper", self.interval, lambda: self.sweep(older_than=self.OUTBOX_GRACE)
        )

    def start(self) -> None:
        self.sweep(older_than=0.0, notify=False)
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def sweep_at(self, at: datetime) -> None:
        """Sweep at `at` as well, between the regular sweeps: a deadline known to fall before
        the next one (a sleep's end, an expiry, a schedule's instant) is met on time."""
        self._periodic.run_in((at - self.worker.runtime.clock.now()).total_seconds() + AT_MARGIN)

    def sweep(self, *, older_than: float, notify: bool = True) -> None:
        approvals = self.worker.approvals
        jobs: list[tuple[str, Callable[[], object]]] = [
            ("outbox", lambda: approvals.complete_outbox(older_than=older_than)),
            ("expiry", approvals.expire_due),
            ("wake", self.waker.wake_due),
            ("waits", self.waits.due),
            ("orphans", lambda: cancel_orphans(self.worker.runtime.runs, self.worker.client)),
            ("schedules", self.scheduler.fire_due),
        ]
        if notify:
            jobs.append(("notifications", self.worker.runtime.notifications.send_due))
        for name, job in jobs:
            try:
                job()
            except Exception:
                log.exception("sweep: %s failed; the next sweep runs in %.0fs", name, self.interval)

"""The worker of `remit serve --worker` and `remit worker --exit-when-idle`: started, stopped
when idle, and started again when woken.

With `stop_when_idle` (or a wakeup declared in the app's data files), every
`REMIT_IDLE_CHECK_INTERVAL` seconds the supervisor asks its `StopRule` (`ops/idle.py`) whether
to stop, having registered the next deadline through the wakeup's `register` op
(`client.ops.register_wake`). When it says so, the worker drains and releases
everything it holds: DBOS, its threads, and every database connection, the API's included
(a request while stopped opens what it needs and closes it again, `after_request`). A stopped
worker is a DBOS instance destroyed, so a wake (`GET /wake`, or a write through the API)
starts a new one, on the same executor slot.

Starting takes time, so a worker asks to be woken a little ahead of its deadline (`lead`), and
a worker that starts with a deadline within the idle horizon sweeps at that deadline as well as
at its sweep interval: what falls due is carried on when it does.

A wake means "run if stopped": one that arrives late, twice, or for a deadline registered
before the last start finds the worker running, or starts a worker that finds nothing to do and
stops again. Nothing it does depends on which registration it answers.

A stop whose drain left an attempt running (one dequeued in the moment before the stop, that
outlived `REMIT_DRAIN_TIMEOUT`) cannot be followed by a new worker in this process: its thread
still runs, and a worker with its executor id would recover the attempt beside it. The process
then ends (`on_stranded`), keeping its slot until it does, and the next worker with its id
recovers the attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from remit.client import Client
from remit.core.errors import RemitError
from remit.core.text import describe_seconds
from remit.ops.idle import StopRule, WakeupState
from remit.resources.wakeups import declarations_of, stops_when_idle
from remit.serve.worker import Worker

log = logging.getLogger("remit.supervisor")

# The most of the idle horizon that a worker is woken ahead of its deadline.
LEAD_SHARE = 0.8

# Seconds before a worker that failed to start is tried again: doubled each time, up to the last.
RESTART_WAITS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)


class Supervisor:
    """Runs one worker at a time for an instance, as `make_worker()` builds it.

    `remit` is the process's own client (the HTTP API's): closed when the worker stops, so the
    stopped process holds no database connection. `on_idle` is called, on the supervisor's
    thread, once a worker has stopped for being idle (`remit worker --exit-when-idle` ends the
    process there); `on_stranded(count)` once a stop left attempts running (the process must
    end). `tell` hears each start and stop in a line (default: the log, at INFO).
    `stop_when_idle` None stops the worker when idle if the app's data files declare a wakeup
    (`resources/wakeups.py`); True or False says so outright.
    """

    def __init__(
        self,
        make_worker: Callable[[], Worker],
        remit: Client,
        *,
        stop_when_idle: bool | None = None,
        on_idle: Callable[[], None] | None = None,
        on_stranded: Callable[[int], None] | None = None,
        tell: Callable[[str], None] = log.info,
    ) -> None:
        self.make_worker = make_worker
        self.remit = remit
        self.settings = remit.settings
        self.stop_when_idle = stops_when_idle(
            declarations_of(remit.app), stop_when_idle, flag="stop_when_idle=False"
        )
        self.on_idle = on_idle
        self.on_stranded = on_stranded
        self.tell = tell
        self.state = WakeupState(remit.db, remit.app.name, clock=remit.clock)
        self.worker: Worker | None = None
        self.status = "stopped"  # starting, running, stopping, stopped, stranded
        self.stops = 0
        self._rule: StopRule | None = None
        self._started_in = 0.0  # seconds the last start of a worker took
        self._lock = threading.Lock()
        self._activity = 0
        self._requests = 0
        self._wanted = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="remit-supervisor", daemon=True)

    def start(self) -> Worker:
        """Start the first worker (here, so a worker that cannot start fails the command), then
        watch it on a thread."""
        worker = self._start_worker()
        self._thread.start()
        return worker

    def wake(self) -> str:
        """Note a write or a wake: a worker stopped (or stopping) starts again. Returns what
        the worker was doing when woken."""
        with self._lock:
            self._activity += 1
            was = self.status
            if was == "stopped":
                self._wanted.set()
        return was

    def before_request(self) -> None:
        with self._lock:
            self._requests += 1

    def after_request(self) -> None:
        """A request has been answered: while the worker is stopped and no other request is
        being answered, close what it opened, so the stopped process holds no connection."""
        with self._lock:
            self._requests -= 1
            if self._requests == 0 and self.status in ("stopped", "stranded"):
                self.remit.close()

    def close(self, timeout: float | None = None, *, keep_slot: bool = True) -> None:
        """Stop watching and stop the worker, draining it (see `Worker.stop`: a process that
        ends at once keeps its executor slot until it does)."""
        self._closing.set()
        self._wanted.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.settings.idle_check_interval + 30)
        with self._lock:
            worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop(timeout, keep_slot=keep_slot)

    def _run(self) -> None:
        failures = 0
        while not self._closing.is_set():
            if self.worker is None:
                # Stopped: wait for a wake, using no CPU and holding no connection.
                self._wanted.wait()
                if self._closing.is_set() or self.status == "stranded":
                    return
                self._wanted.clear()
                try:
                    self._start_worker()
                except Exception:
                    wait = RESTART_WAITS[min(failures, len(RESTART_WAITS) - 1)]
                    failures += 1
                    log.exception("the worker could not start; trying again in %.0fs", wait)
                    if self._closing.wait(wait):
                        return
                    self._wanted.set()
                else:
                    failures = 0
                continue
            if self._closing.wait(self.settings.idle_check_interval):
                return
            if self.stop_when_idle:
                self._check()

    def _check(self) -> None:
        worker, rule = self.worker, self._rule
        if worker is None or rule is None:
            return
        seen = self._activity
        try:
            stop = rule.check()
        except Exception:
            log.exception("the idle check failed; the worker serves on")
            return
        if stop is None:
            return
        with self._lock:
            self.status = "stopping"
        shown = (
            "nothing is due"
            if stop.at is None
            else f"to be woken {describe_seconds(self.lead())} before its deadline at "
            f"{stop.at.isoformat()}"
        )
        self.tell(f"worker {worker.executor_id} is idle and stops ({shown})")
        left = 0
        try:
            left = worker.stop(keep_slot=True)
        except Exception:
            log.exception("the worker did not stop cleanly")
        if left:
            self._stranded(worker, left)
            return
        worker.release_slot()
        self.state.stopped()
        self.remit.close()
        with self._lock:
            self.worker = None
            self.status = "stopped"
            self.stops += 1
            if self._activity != seen:
                self._wanted.set()  # woken while it stopped: start again at once
        if self.on_idle is not None:
            self.on_idle()

    def _stranded(self, worker: Worker, left: int) -> None:
        # Stopped as far as anyone writing work can tell: they register a wake, which the
        # process that follows this one answers.
        self.state.stopped()
        self.state.checked(f"its stop left {left} attempts running, so its process ended")
        with self._lock:
            self.worker = None
            self.status = "stranded"
        self.tell(
            f"worker {worker.executor_id} left {left} attempts running as it stopped: this "
            "process ends, and the next worker with its executor id recovers them"
        )
        if self.on_stranded is not None:
            self.on_stranded(left)

    def lead(self) -> float:
        """Seconds ahead of a deadline that the worker asks to be woken, so that it runs when
        the deadline comes: twice the time its last start took, and a poll, but at most
        `LEAD_SHARE` of the idle horizon (a worker woken ahead finds the deadline within the
        horizon and serves on until it has passed)."""
        settings = self.settings
        wanted = 2 * self._started_in + settings.poll_interval
        return min(wanted, LEAD_SHARE * settings.idle_horizon)

    def _register(self, at: datetime) -> None:
        worker = self.worker
        if worker is None:
            raise RemitError("no worker runs to register the wake")
        result = worker.remit.ops.register_wake(at - timedelta(seconds=self.lead()))
        if result.status != "ok":
            raise RemitError(result.error or f"the wakeup's register call came to {result.status}")

    def _start_worker(self) -> Worker:
        with self._lock:
            self.status = "starting"
        began = time.monotonic()
        try:
            worker = self.make_worker()
            worker.start()
        except BaseException:
            with self._lock:
                self.status = "stopped"
            raise
        self._started_in = time.monotonic() - began
        self.state.started(worker.executor_id)
        if self._rule is None:
            self._rule = StopRule(
                worker.idle_check(), self.state, self._register, activity=lambda: self._activity
            )
        else:
            self._rule.idle = worker.idle_check()  # its last problem is remembered across
        with self._lock:
            self.worker = worker
            self.status = "running"
        self._meet_next_deadline(worker)
        self.tell(f"worker {worker.executor_id} started")
        return worker

    def _meet_next_deadline(self, worker: Worker) -> None:
        # Woken ahead of a deadline (see `lead`): sweep at it, not at the next sweep interval.
        assert self._rule is not None
        try:
            deadline = self._rule.idle.deadline()
        except Exception:
            log.exception("could not read the next deadline; the sweeps meet it")
            return
        if deadline is None:
            return
        ahead = (deadline.at - self.remit.clock.now()).total_seconds()
        if 0 < ahead <= self.settings.idle_horizon:
            worker.sweep_at(deadline.at)

"""Waking a worker's queues: a resumed run starts as soon as its fork is made, and a new run
as soon as its start commits, not at the next poll of its queue.

A decision (an answer to a task, a sleep's end, a resume after a pause) forks the run's next
attempt onto its queue, where it waits for a worker's queue thread to dequeue it; the thread
polls every `REMIT_POLL_INTERVAL` seconds. Every fork rings its queue's doorbell
(`core/outbox.py`): in the process that made it directly, and on Postgres, by `NOTIFY
remit_outbox`, in every worker that listens. A start rings its queue the same way
(`outbox.announce`). While a worker runs it:

- waits between the polls of each of its queues on the doorbell as well as on the poll
  interval (`QueueWake`): a ring ends the wait, and the queue thread polls at once. DBOS's own
  queue thread does the dequeue, as on any poll, so every bound of the queue (its concurrency
  across workers and on this one, its rate) holds as it always does;
- on Postgres, holds one connection that listens on `remit_outbox` (`Listener`) and rings the
  queue each notification names. A connection that is lost is made again, waiting a little
  longer each time (up to 10 s), and every queue is rung once it is back, for the
  notifications sent while it was away.

Nothing depends on a ring: a lost one (a connection down, a notification dropped, a fork made
on SQLite in another process) costs the wait for the next poll, which goes on as before. The
listening connection runs no query and holds no transaction; it is made at start and closed at
stop with the worker's other connections, so it neither counts towards a worker's idleness
(`ops/idle.py` reads the database's runs and outbox, not its connections) nor outlives a
stopped one.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import Any

import sqlalchemy as sa

from remit.core.outbox import CHANNEL, Doorbell, doorbell

log = logging.getLogger("remit.wake")

# The name the listening connection shows in `pg_stat_activity`.
APPLICATION_NAME = "remit-listen"


class QueueWake:
    """While started, the process's DBOS queue threads wait on the doorbell between polls.

    DBOS starts one thread per queue, which waits on DBOS's stop event for the poll interval
    between polls (`dbos._queue.queue_worker_thread`). `install()` wraps that function, before
    DBOS launches, so that each thread it starts waits through a `_WakeableStop` instead: its
    `wait` also ends when the thread's queue is rung, and then answers False (not stopped),
    which DBOS takes for the end of the interval. Outside a started `QueueWake` the threads get
    DBOS's own event. With a DBOS that no longer has the function, nothing is wrapped and the
    queues are polled as before (logged).

    The function is DBOS's own, not part of its API (DBOS 3.4, which remit pins). The other way
    to start a fork at once, a dequeue of remit's own beside DBOS's thread, would run two
    claims of one queue in one process at once, each counting the worker's running attempts
    before the other's claim: a queue's `worker_concurrency` could be passed. Waking DBOS's
    thread keeps one claim at a time, and DBOS's rules for it.
    """

    # The generation threads started now belong to (None: no worker has started one).
    _current: QueueWake | None = None
    _installed = False

    def __init__(self, bell: Doorbell = doorbell) -> None:
        self.bell = bell
        self._closed = threading.Event()

    @classmethod
    def install(cls) -> bool:
        """Wrap DBOS's queue thread (once a process). False if DBOS has no such function."""
        if cls._installed:
            return True
        from dbos import _queue

        original = getattr(_queue, "queue_worker_thread", None)
        if original is None:
            log.warning(
                "this DBOS has no queue_worker_thread: resumed runs start at their queue's "
                "next poll"
            )
            return False

        def queue_worker_thread(stop_event: threading.Event, dbos: Any, queue: Any) -> None:
            wake = cls._current
            if wake is None:
                original(stop_event, dbos, queue)
            else:
                original(_WakeableStop(stop_event, wake, queue.name), dbos, queue)

        _queue.queue_worker_thread = queue_worker_thread
        cls._installed = True
        return True

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def start(self) -> None:
        """Queue threads started from now on wait on the doorbell (call before DBOS launches)."""
        if self.install():
            QueueWake._current = self

    def stop(self) -> None:
        """Stop the queue threads started since `start`, at once, whatever their interval:
        they poll no more (the worker calls it just before DBOS stops, which would stop them
        at the end of their interval). A thread DBOS starts again meanwhile stops too."""
        self._closed.set()
        self.bell.wake_all()

    def detach(self) -> None:
        """After DBOS has stopped: queue threads started from now on are DBOS's own again."""
        if QueueWake._current is self:
            QueueWake._current = None


class _WakeableStop:
    """DBOS's stop event as one queue thread sees it: stopped when DBOS stops it or its
    `QueueWake` stops; its wait (the poll interval) also ends when the queue is rung."""

    def __init__(self, stop: threading.Event, wake: QueueWake, queue: str) -> None:
        self._stop = stop
        self._wake = wake
        self._queue = queue

    def is_set(self) -> bool:
        return self._stop.is_set() or self._wake.closed

    def wait(self, timeout: float | None = None) -> bool:
        self._wake.bell.wait(self._queue, timeout, self.is_set)
        return self.is_set()


class Listener:
    """On Postgres: one connection listening on `remit_outbox`, ringing the queue each
    notification names. `start` returns at once (it connects on its own thread); `stop` closes
    the connection and returns once it is closed (or after `timeout` seconds)."""

    # Seconds before connecting again after a lost connection: doubled each failure, up to MAX.
    FIRST_DELAY = 0.5
    MAX_DELAY = 10.0

    def __init__(self, url: sa.URL, *, bell: Doorbell = doorbell) -> None:
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.bell = bell
        self._stopping = threading.Event()
        # A pipe that ends the listening thread's wait on the connection: written by `stop`,
        # closed by the thread as it ends (under the lock, so that `stop` never writes to a
        # closed one).
        self._wake_r, self._wake_w = os.pipe()
        self._pipe_lock = threading.Lock()
        self._pipe_open = True
        self._thread = threading.Thread(target=self._run, name="remit-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Close the connection (a thread still connecting closes it once it has connected)."""
        self._stopping.set()
        with self._pipe_lock:
            if self._pipe_open:
                os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            with self._pipe_lock:
                self._pipe_open = False
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _serve(self) -> None:
        delay = self.FIRST_DELAY
        lost: str | None = None  # what ended the last connection, until one is made again
        while not self._stopping.is_set():
            try:
                conn = self._connect()
            except Exception as error:
                lost = self._lost(lost, error, delay, connecting=True)
            else:
                try:
                    if lost is not None:
                        log.info("listening on %s again", CHANNEL)
                    lost = None
                    delay = self.FIRST_DELAY
                    # A fork announced before the LISTEN took hold was heard by no one here.
                    self.bell.ring_all()
                    self._listen(conn)
                    return  # stopped
                except Exception as error:
                    lost = self._lost(lost, error, delay, connecting=False)
                finally:
                    conn.close()
            if self._pause(delay):
                return
            delay = min(delay * 2, self.MAX_DELAY)

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            application_name=APPLICATION_NAME,
            connect_timeout=10,
            # A server that vanishes without closing the connection is noticed in about a
            # minute, as a connection that fails: it is then made again.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _listen(self, conn: Any) -> None:
        """Ring the queue of each notification until stopped; raises when the connection is
        lost."""
        pgconn = conn.pgconn
        # poll(), not select(): a process serving many clients may hold descriptors past 1024.
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready or self._stopping.is_set():
                return
            pgconn.consume_input()
            while (notice := pgconn.notifies()) is not None:
                self.bell.ring(notice.extra.decode())

    def _lost(self, lost: str | None, error: Exception, delay: float, *, connecting: bool) -> str:
        """Log a lost (or refused) connection once until one is made again."""
        said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if lost is None and not self._stopping.is_set():
            log.warning(
                "%s on %s: %s; resumed runs start at their queue's next poll until it is "
                "back (trying again in %.1fs, then less often)",
                "cannot listen" if connecting else "stopped listening",
                CHANNEL,
                said,
                delay,
            )
        return said

    def _pause(self, delay: float) -> bool:
        """Wait `delay` seconds before connecting again; True if stopped meanwhile."""
        return self._stopping.wait(delay)

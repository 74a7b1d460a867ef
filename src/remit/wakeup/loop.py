"""The loop that calls instances: it claims the wakes that are due and calls each one's
`GET {url}/wake`, many at once, recording how each went.

It runs on a thread of its own beside the HTTP server. It sleeps until the next wake falls due
(at most `idle_poll` seconds, so wakes registered through another service process on the same
database are seen too), or until `poke()`: a `PUT /wakeup/wake` pokes it, so a wake due now is
called at once. Each call runs on a thread of its own, at most `concurrency` at a time, with a
10-second timeout and no redirects followed (a 3xx is a failure, like a 4xx, a 5xx or no
answer).

A claimed wake is leased for `lease` seconds: a service process that dies mid-call leaves the
lease to lapse, and the wake is claimed and called again. On `stop()` the loop claims nothing
more and waits up to `drain` seconds for the calls in flight; an outcome that arrives after
that is not recorded, and its wake is called again once its lease lapses.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

import httpx

from remit.core.text import excerpt
from remit.wakeup.store import Due, WakeupStore
from remit.wakeup.urls import UrlRefused, target

log = logging.getLogger("remit.wakeup")

CALL_TIMEOUT_S = 10.0
DEFAULT_LEASE_S = 30.0
LEASE_SETTING = "REMIT_WAKEUP_LEASE"
# The most wakes claimed in one statement.
CLAIM_ROWS = 100


class WakeLoop:
    def __init__(
        self,
        store: WakeupStore,
        *,
        allow_private: bool = False,
        lease: float = DEFAULT_LEASE_S,
        concurrency: int = 64,
        idle_poll: float = 5.0,
        drain: float = CALL_TIMEOUT_S,
        call_timeout: float = CALL_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.allow_private = allow_private
        self.lease = lease
        self.idle_poll = idle_poll
        self.drain = drain
        self._slots = threading.BoundedSemaphore(concurrency)
        self._concurrency = concurrency
        self._poked = threading.Event()
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._in_flight: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Keep-alive is off: connections go to an address, and two instances on one address
        # with different names (and TLS server names) must not share one.
        self._http = httpx.Client(
            timeout=call_timeout,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
            trust_env=False,
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="wakeup-loop", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Look for due wakes now, rather than at the next one known."""
        self._poked.set()

    def stop(self) -> None:
        """Claim nothing more; let the calls in flight end, for up to `drain` seconds."""
        self._stopping.set()
        self._poked.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            flying = list(self._in_flight)
        deadline = time.monotonic() + self.drain
        for thread in flying:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._abandoned.set()
        self._http.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._poked.clear()
            try:
                claimed = self._claim_and_call()
                if claimed:
                    continue
                wait = self._until_next()
            except Exception:
                log.exception("wakeup: looking for due wakes failed; looking again shortly")
                wait = 1.0
            self._poked.wait(wait)

    def _claim_and_call(self) -> bool:
        """Claim what is due, as many as there are free call slots; True if a full claim
        suggests more are due."""
        free = self._free_slots()
        if free == 0:
            # Every slot busy: wait for one rather than claim wakes that would wait on it.
            if self._slots.acquire(timeout=0.5):
                self._slots.release()
            return True
        limit = min(free, CLAIM_ROWS)
        claimed = self.store.claim(_now(), self.lease, limit)
        for due in claimed:
            self._slots.acquire()
            thread = threading.Thread(
                target=self._call, args=(due,), name="wakeup-call", daemon=True
            )
            with self._lock:
                self._in_flight.add(thread)
            thread.start()
        return len(claimed) == limit

    def _free_slots(self) -> int:
        with self._lock:
            return self._concurrency - len(self._in_flight)

    def _until_next(self) -> float:
        upcoming = self.store.next_due(_now())
        if upcoming is None:
            return self.idle_poll
        return max(0.0, min((upcoming - _now()).total_seconds(), self.idle_poll))

    def _call(self, due: Due) -> None:
        try:
            why = self._wake(due.url)
            if self._abandoned.is_set():
                return  # the service stopped without waiting for this one: called again later
            if why is None:
                recorded = self.store.called(due, _now())
                log.info("wakeup: called %s/wake", due.url)
            else:
                recorded = self.store.failed(due, _now(), why)
                self._poked.set()  # its retry may fall due before the loop would look again
                log.warning("wakeup: calling %s/wake failed (%s); it is tried again", due.url, why)
            if not recorded:
                log.info("wakeup: %s changed during its call; its new wake stands", due.url)
        except Exception:
            log.exception("wakeup: recording the call of %s/wake failed", due.url)
        finally:
            with self._lock:
                self._in_flight.discard(threading.current_thread())
            self._slots.release()

    def _wake(self, url: str) -> str | None:
        """Call `url`'s `/wake` once; why it failed, or None for a 2xx."""
        try:
            where = target(url, allow_private=self.allow_private)
        except UrlRefused as refused:
            return str(refused)
        request = httpx.URL(f"{url}/wake")
        headers: dict[str, str] = {}
        extensions: dict[str, str] = {}
        if where.address is not None:
            # Connect to the address that was checked, not to whatever the name resolves to
            # next: the URL names the address, the Host header and the TLS server name (SNI,
            # and so the certificate checked) keep the instance's own name.
            headers["Host"] = request.netloc.decode("ascii")
            extensions["sni_hostname"] = where.host
            request = request.copy_with(host=str(where.address))
        try:
            # Only the status is read: a body the instance sends slowly holds no call slot.
            with self._http.stream("GET", request, headers=headers, extensions=extensions) as got:
                status = got.status_code
        except httpx.TimeoutException:
            return f"no answer within {self._http.timeout.read:g} s"
        except httpx.HTTPError as error:
            return excerpt(f"{type(error).__name__}: {error}", 500)
        if 200 <= status < 300:
            return None
        return f"it answered {status}"


def _now() -> datetime:
    return datetime.now(UTC)

"""The tries of one op call: its driver called until it answers, fails for good, or fails in a
way that leaves unknown whether the vendor acted.

A failed try is tried again only when the error says a retry can help and repeating the call
cannot double its effect, after the delay the op's retry policy gives (`core/backoff.py`),
slept on the injected clock. A write that is not idempotent and may have reached the vendor is
never tried again: its outcome is unknown, and a person is asked (`calls.py`).

Each try runs on a thread of its own (one kept from an earlier try, when one is idle) and is
given up on after the op's timeout: Python cannot stop a thread, so a driver that hangs is left
to finish (or not) on its own, its answer discarded, and its thread serves no other try
meanwhile. A try that timed out may have reached the vendor. The failures a driver's transport
raises without saying what they mean (`TimeoutError`, `ConnectionError`,
`httpx.TransportError`) are read as a `DriverError` a retry can help (`as_driver_error`).
"""

from __future__ import annotations

import contextvars
import logging
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from remit.connectors.base import CallContext, Implementation
from remit.connectors.credentials import SecretError
from remit.core.backoff import next_delay
from remit.core.clock import Clock
from remit.core.errors import DriverError, MissingCredential
from remit.core.outcome import CredentialFailure, DriverFailure
from remit.declare.ops import Op

log = logging.getLogger("remit.calls")

# Seconds one try of an op call may take unless the op says (REMIT_OP_TIMEOUT).
DEFAULT_OP_TIMEOUT = 120.0


@dataclass(frozen=True)
class Answered:
    """The driver answered `output` on try number `tries`."""

    output: BaseModel
    tries: int


@dataclass(frozen=True)
class GaveUp:
    """The call failed and is not tried again: `failure` says why."""

    failure: DriverFailure | CredentialFailure
    tries: int


@dataclass(frozen=True)
class Unknown:
    """A write that cannot be repeated safely failed in a way that may have reached the
    vendor: whether it happened is unknown, and `message` says so."""

    message: str
    tries: int


Tried = Answered | GaveUp | Unknown


@dataclass(frozen=True)
class InFlight:
    """What a try still running after `after` seconds tells: `show()`, once per try."""

    after: float
    show: Callable[[], None]


def make_tries(
    op: Op[Any, Any],
    implementation: Implementation,
    request: BaseModel,
    call: CallContext,
    *,
    clock: Clock,
    retrying: Callable[[int, str], None],
    timeout: float = DEFAULT_OP_TIMEOUT,
    in_flight: InFlight | None = None,
) -> Tried:
    """Call `op`'s driver with `request` until the call comes to an end, each try given
    `timeout` seconds. `retrying(tries, error)` is told before each try again, with the number
    of tries so far and what the last one failed with. `in_flight` is told of a try still
    running after its `after` seconds."""
    tries = 0
    while True:
        tries += 1
        answer = invoke_within(implementation, op, request, call, timeout, in_flight=in_flight)
        if isinstance(answer, BaseModel):
            return Answered(answer, tries)
        error = answer.error
        if isinstance(error, MissingCredential):
            return GaveUp(CredentialFailure(message=str(error), variable=error.variable), tries)
        if isinstance(error, SecretError):
            message = f"op `{op.id}` cannot read the credential `{error.name}`: {error}"
            return GaveUp(CredentialFailure(message=message, variable=error.name or ""), tries)
        after = _after_failure(op, error, call, tries)
        if not isinstance(after, float):
            return after
        retrying(tries, _said(error))
        clock.sleep(after)


def _said(error: BaseException) -> str:
    """What a failed try is kept with: the driver's message (already redacted), as a refusal
    is named wherever it is shown."""
    refused = as_driver_error(error)
    return str(refused) if refused is not None else f"{type(error).__name__}: {error}"


def _after_failure(
    op: Op[Any, Any], raised: BaseException, call: CallContext, tries: int
) -> Tried | float:
    """What a failed try leads to: the call's end, or the seconds to wait before the next."""
    error = as_driver_error(raised)
    if error is None:
        return _unexpected(op, raised, tries)
    if op.effect == "write" and not op.idempotent and error.maybe_applied:
        return Unknown(
            f"op `{op.id}` (key {call.idempotency_key}) failed in a way that may have "
            f"reached the vendor ({error}): it is not idempotent, so remit will not call "
            "it again; check with the vendor whether it happened",
            tries,
        )
    delay = next_delay(
        op.retry,
        safe_to_repeat=op.safe_to_repeat or not error.maybe_applied,
        retryable=error.retryable,
        tries=tries,
    )
    if delay is None:
        return GaveUp(DriverFailure.of(error), tries)
    log.info("%s failed (%s); trying again in %.2fs", op.id, error, delay)
    return delay


def _unexpected(op: Op[Any, Any], error: BaseException, tries: int) -> Tried:
    """A try that raised what no driver should: a bug, output that does not parse, or a
    `BaseException` such as `SystemExit`. The vendor may have acted before it, so a write that
    cannot be repeated safely is uncertain; anything else fails for good."""
    message = f"op `{op.id}` raised {type(error).__name__}: {error}"
    if op.effect == "write" and not op.safe_to_repeat:
        return Unknown(message + "; its outcome is unknown", tries)
    if isinstance(error, ValidationError):
        message = f"op `{op.id}` returned output that does not parse: {error}"
    return GaveUp(DriverFailure(message=message, retryable=False), tries)


class CallTimedOut(Exception):
    """A try had no answer within its op's timeout (and is left running on its thread)."""

    def __init__(self, op_id: str, timeout: float, *, earlier: bool = False) -> None:
        what = (
            f"an earlier try with this key, given up on, is still running after another {timeout:g}s"
            if earlier
            else f"no answer within {timeout:g}s"
        )
        super().__init__(
            f"{what}, the op's timeout (op(..., timeout=...) or REMIT_OP_TIMEOUT); the try may "
            "still reach the vendor"
        )
        self.op_id = op_id
        self.timeout = timeout


@dataclass(frozen=True)
class Raised:
    """What a try raised, handed back to the caller as a value: anything the caller's own
    thread raises while it waits (Ctrl-C in `remit call`) is not the try's, and goes up."""

    error: BaseException


# The tries given up on that are still running, by idempotency key: the next try of a key that
# cannot be repeated safely waits for its earlier one rather than racing it to the vendor.
_abandoned: dict[str, threading.Event] = {}
_abandoned_lock = threading.Lock()


def invoke_within(
    implementation: Implementation,
    op: Op[Any, Any],
    request: BaseModel,
    call: CallContext,
    timeout: float,
    *,
    in_flight: InFlight | None = None,
) -> BaseModel | Raised:
    """One try: the implementation's answer, or what it raised (any `BaseException`), or
    `CallTimedOut` after `timeout` seconds. `in_flight`: told when the try is still running
    after its `after` seconds.

    The try runs on a daemon thread, in a copy of the caller's context (its trace span), so
    that the caller can stop waiting for it: a thread cannot be stopped from outside. A driver
    should end its own request within `call.timeout`; the thread is the bound for one that
    does not. An implementation that marks itself `inline` (remit's collections, whose every
    statement the database bounds) is called on the caller's thread.
    """
    if implementation.inline:
        try:
            return implementation.invoke(op, request, call)
        except Exception as error:
            return Raised(error)
    key = call.idempotency_key
    # A write that cannot be repeated safely never races an earlier try of its own to the
    # vendor (a person's "it did not happen" while that try still runs); a read, or a write
    # the vendor dedupes by its key, may be tried anew beside one.
    with _abandoned_lock:
        earlier = None if op.safe_to_repeat else _abandoned.get(key)
    if earlier is not None and not earlier.wait(timeout):
        return Raised(CallTimedOut(op.id, timeout, earlier=True))
    outcome: list[BaseModel | Raised] = []
    done = threading.Event()
    context = contextvars.copy_context()

    def attempt() -> None:
        try:
            outcome.append(context.run(implementation.invoke, op, request, call))
        except BaseException as error:  # handed to the caller, which decides what it means
            outcome.append(Raised(error))

    def ended() -> None:
        done.set()
        with _abandoned_lock:
            if _abandoned.get(key) is done:
                del _abandoned[key]

    try:
        _try_threads.run(attempt, then=ended, name=f"remit-call {op.id}")
    except RuntimeError as error:  # no thread to be had: nothing was sent
        failure = DriverError(
            f"could not start the call ({error})", retryable=True, maybe_applied=False, op=op.id
        )
        return Raised(failure)
    given_up_at = time.monotonic() + timeout
    if in_flight is not None and in_flight.after < timeout and not done.wait(in_flight.after):
        in_flight.show()
    if not done.wait(max(given_up_at - time.monotonic(), 0.0)) and not done.is_set():
        if not op.safe_to_repeat:
            with _abandoned_lock:
                _abandoned[key] = done
                if done.is_set():  # it ended just now, before it could see itself registered
                    del _abandoned[key]
        log.warning(
            "%s (key %s) has not answered within %gs: giving up on this try",
            op.id,
            key,
            timeout,
        )
        return Raised(CallTimedOut(op.id, timeout))
    return outcome[0]


class _TryThreads:
    """The threads tries run on, each kept after its try for the next one, rather than one
    started per try (starting one, under load, cost about a tenth of a run's CPU in the
    drain benchmark). A try finds an idle thread or starts another: one that hangs holds its
    thread alone, and never holds up another try. A thread idle for `IDLE_SECONDS` ends."""

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_TryThread] = []

    def run(self, fn: Callable[[], None], *, then: Callable[[], None], name: str) -> None:
        """Run `fn` on an idle thread, or on a new one (`RuntimeError`: none can be started),
        and `then` once the thread is idle again: a try that follows at once finds it."""
        with self._lock:
            thread = self._idle.pop() if self._idle else None
        if thread is None:
            thread = _TryThread(self)
            thread.start()
        thread.name = name
        thread.give(fn, then)

    def _back(self, thread: _TryThread) -> None:
        with self._lock:
            self._idle.append(thread)

    def _retire(self, thread: _TryThread) -> bool:
        """Take an idle thread out, to end it: False if a try took it meanwhile."""
        with self._lock:
            if thread in self._idle:
                self._idle.remove(thread)
                return True
            return False


class _TryThread(threading.Thread):
    def __init__(self, threads: _TryThreads) -> None:
        super().__init__(name="remit-call", daemon=True)
        self._threads = threads
        self._work: queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]]] = (
            queue.SimpleQueue()
        )

    def give(self, fn: Callable[[], None], then: Callable[[], None]) -> None:
        self._work.put((fn, then))

    def run(self) -> None:
        while True:
            try:
                fn, then = self._work.get(timeout=_TryThreads.IDLE_SECONDS)
            except queue.Empty:
                if self._threads._retire(self):
                    return
                continue  # taken just now: its try is on the way
            try:
                fn()
            finally:
                self.name = "remit-call"
                self._threads._back(self)
                then()


# The process's threads for tries.
_try_threads = _TryThreads()


def as_driver_error(error: BaseException) -> DriverError | None:
    """What a try's error says about the call, as a `DriverError`; None for an error that says
    nothing about the vendor (a bug).

    A timeout, a dropped connection and an HTTP transport failure can each be helped by trying
    again, and may have reached the vendor, unless the connection was never made (refused, or
    no connection to be had): then nothing was sent.
    """
    if isinstance(error, DriverError):
        return error
    if isinstance(error, CallTimedOut):
        return DriverError(str(error), retryable=True, maybe_applied=True, op=error.op_id)
    never_sent = _never_sent(error)
    if never_sent is None:
        return None
    what = f"{type(error).__name__}: {error}".rstrip(": ")
    return DriverError(what, retryable=True, maybe_applied=not never_sent)


def _never_sent(error: BaseException) -> bool | None:
    """For a transport failure, whether the request certainly never left; None for an error
    that is no transport failure."""
    # The drivers' HTTP clients: an error can be one of theirs only if it was imported.
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(error, httpx.TransportError):
        return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    requests = sys.modules.get("requests")
    if requests is not None and isinstance(error, requests.ConnectionError | requests.Timeout):
        # Only its connect timeout says the request never left; the rest may have reached it.
        return isinstance(error, requests.ConnectTimeout)
    if isinstance(error, ConnectionRefusedError | socket.gaierror):
        return True  # refused, or the host's name has no address: nothing was sent
    if isinstance(error, ConnectionError | TimeoutError):
        return False
    return None

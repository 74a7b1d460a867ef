"""One try of a call: the driver's answer, what it raised, or a timeout, on a thread of its own
(kept from an earlier try when one is idle).
A write that cannot be repeated safely never races an earlier try of its own, and Ctrl-C in the
caller is the caller's, never the try's outcome."""

from __future__ import annotations

import signal
import threading
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from remit import CallContext, DriverError, Fake, implements, op
from remit.connectors.base import Implementation
from remit.execution.tries import (
    CallTimedOut,
    Raised,
    _TryThreads,
    as_driver_error,
    invoke_within,
)


class Ask(BaseModel):
    n: int = 0


send = op("post.letters.send", effect="write", input=Ask, output=Ask)
look = op("post.letters.look", effect="read", input=Ask, output=Ask)


class Slow(Fake):
    """Each call waits until `go` is set, and counts itself."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.go = threading.Event()
        self.made = 0

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Ask:
        self.made += 1
        self.go.wait(10)
        return Ask(n=self.made)

    @implements(look)
    def look(self, input: Ask, call: CallContext) -> Ask:
        self.made += 1
        self.go.wait(10)
        return Ask(n=self.made)


def _call(key: str, which: Any = send) -> CallContext:
    return CallContext(op=which, idempotency_key=key, run_id="r", attempt=1, actor="a", environ={})


def test_a_write_that_cannot_be_repeated_waits_for_its_try_given_up_on() -> None:
    slow = Slow()
    first = invoke_within(slow, send, Ask(), _call("r:1"), 0.1)
    assert isinstance(first, Raised)
    assert isinstance(first.error, CallTimedOut)
    assert "may still reach the vendor" in str(first.error)

    # The earlier try still runs: the next one does not start beside it.
    second = invoke_within(slow, send, Ask(), _call("r:1"), 0.1)
    assert isinstance(second, Raised)
    assert "an earlier try with this key, given up on, is still running" in str(second.error)
    assert slow.made == 1

    # Once it has ended, the next try goes to the vendor, which answers with what it did.
    slow.go.set()
    third = invoke_within(slow, send, Ask(), _call("r:1"), 5)
    assert third == Ask(n=1)
    assert slow.made == 1


def test_a_read_is_tried_anew_beside_a_try_given_up_on() -> None:
    slow = Slow()
    assert isinstance(invoke_within(slow, look, Ask(), _call("r:2", look), 0.1), Raised)
    assert isinstance(invoke_within(slow, look, Ask(), _call("r:2", look), 0.1), Raised)
    assert slow.made == 2
    slow.go.set()


class Where(Fake):
    """Each call notes the thread it runs on (the object: a new thread may reuse an old one's
    id); `look` then waits for `go`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.go = threading.Event()
        self.threads: list[threading.Thread] = []

    @implements(send)
    def send(self, input: Ask, call: CallContext) -> Ask:
        self.threads.append(threading.current_thread())
        return Ask()

    @implements(look)
    def look(self, input: Ask, call: CallContext) -> Ask:
        self.threads.append(threading.current_thread())
        self.go.wait(10)
        return Ask()


def test_a_try_runs_on_a_thread_kept_from_an_earlier_one_and_never_beside_a_hung_one() -> None:
    where = Where()
    assert isinstance(invoke_within(where, send, Ask(), _call("r:5"), 5), Ask)
    assert isinstance(invoke_within(where, send, Ask(), _call("r:6"), 5), Ask)
    first, second = where.threads
    assert first is second
    assert first is not threading.current_thread()

    # A try given up on keeps its thread; the next try runs on another and answers.
    hung = invoke_within(where, look, Ask(), _call("r:7", look), 0.1)
    assert isinstance(hung, Raised)
    assert isinstance(hung.error, CallTimedOut)
    assert isinstance(invoke_within(where, send, Ask(), _call("r:8"), 5), Ask)
    held, after = where.threads[-2:]
    assert after is not held
    where.go.set()


def test_an_idle_try_thread_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_TryThreads, "IDLE_SECONDS", 0.05)
    threads = _TryThreads()
    ran: list[threading.Thread] = []
    done = threading.Event()

    def note() -> None:
        ran.append(threading.current_thread())
        done.set()

    threads.run(note, then=lambda: None, name="remit-call test")
    assert done.wait(5)
    ran[0].join(5)
    assert not ran[0].is_alive(), "the idle thread did not end"
    # A try after it starts a thread of its own.
    again = threading.Event()
    threads.run(again.set, then=lambda: None, name="remit-call test")
    assert again.wait(5)


def test_ctrl_c_in_the_caller_goes_up_rather_than_becoming_the_outcome() -> None:
    # A SIGINT sent to the main thread itself interrupts its wait at once. `interrupt_main`
    # only marks one pending, which a wait does not notice: under load it was not raised in
    # time. A signal sent to the process may land on another thread, which is no better.
    main = threading.main_thread()
    assert threading.current_thread() is main, "the test must run on the main thread"
    slow = Slow()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main.ident is not None
        threading.Timer(0.2, signal.pthread_kill, (main.ident, signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            invoke_within(slow, look, Ask(), _call("r:3", look), 60)
    finally:
        signal.signal(signal.SIGINT, previous)
        slow.go.set()


class Exits(Implementation):
    @implements(look)
    def look(self, input: Ask, call: CallContext) -> Ask:
        raise SystemExit(2)


def test_what_a_driver_raises_comes_back_as_a_value() -> None:
    raised = invoke_within(Exits(), look, Ask(), _call("r:4", look), 5)
    assert isinstance(raised, Raised)
    assert isinstance(raised.error, SystemExit)


@pytest.mark.parametrize(
    ("error", "applied"),
    [
        (TimeoutError("read timed out"), True),
        (ConnectionResetError("reset by peer"), True),
        (ConnectionRefusedError("refused"), False),
        (httpx.ReadTimeout("slow"), True),
        (httpx.RemoteProtocolError("cut"), True),
        (httpx.ConnectError("no route"), False),
        (httpx.ConnectTimeout("no answer to connect"), False),
        (httpx.PoolTimeout("pool"), False),
    ],
)
def test_a_transport_failure_is_a_driver_error_a_retry_can_help(
    error: BaseException, applied: bool
) -> None:
    driver_error = as_driver_error(error)
    assert isinstance(driver_error, DriverError)
    assert (driver_error.retryable, driver_error.maybe_applied) == (True, applied)


@pytest.mark.parametrize("error", [ValueError("bug"), KeyError("k"), SystemExit(1)])
def test_other_errors_say_nothing_about_the_vendor(error: BaseException) -> None:
    assert as_driver_error(error) is None

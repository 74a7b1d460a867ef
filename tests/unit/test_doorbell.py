"""The doorbell a fork rings (`core/outbox.py`): a ring ends the wait of its queue's thread, and
is kept for the next wait when no thread waits; nothing else ends a wait but its timeout or its
`done`."""

from __future__ import annotations

import threading

from remit.core.outbox import Doorbell

NEVER = 60.0  # seconds: a wait no test lets run out


def never() -> bool:
    return False


def waiting(
    bell: Doorbell, queue: str, done: threading.Event | None = None
) -> tuple[threading.Thread, list[bool]]:
    """A thread waiting on `queue` (until `done`, if given), and what its wait returned; started
    and known to be waiting once this returns."""
    began = threading.Event()
    answers: list[bool] = []

    def check() -> bool:
        began.set()
        return done is not None and done.is_set()

    thread = threading.Thread(target=lambda: answers.append(bell.wait(queue, NEVER, check)))
    thread.start()
    assert began.wait(NEVER)
    return thread, answers


def test_a_ring_wakes_the_thread_waiting_on_its_queue() -> None:
    bell = Doorbell()
    thread, answers = waiting(bell, "app:work")
    bell.ring("app:work")
    thread.join(NEVER)
    assert answers == [True]


def test_a_ring_while_no_thread_waits_is_kept_for_the_next_wait_and_taken_once() -> None:
    bell = Doorbell()
    bell.ring("app:work")
    bell.ring("app:work")
    assert bell.wait("app:work", 0, never) is True
    assert bell.wait("app:work", 0, never) is False


def test_a_ring_of_another_queue_leaves_a_wait_to_its_timeout() -> None:
    bell = Doorbell()
    bell.ring("app:other")
    assert bell.wait("app:work", 0.01, never) is False
    assert bell.wait("app:other", 0, never) is True


def test_a_wait_ends_when_it_is_done_and_woken() -> None:
    bell = Doorbell()
    done = threading.Event()
    thread, answers = waiting(bell, "app:work", done)
    done.set()
    bell.wake_all()
    thread.join(NEVER)
    assert answers == [False]


def test_ring_all_rings_every_queue_a_thread_has_waited_on() -> None:
    bell = Doorbell()
    for queue in ("app:work", "app:default"):
        assert bell.wait(queue, 0, never) is False
    bell.ring_all()
    assert bell.wait("app:work", 0, never) is True
    assert bell.wait("app:default", 0, never) is True
    assert bell.wait("app:never-served", 0, never) is False

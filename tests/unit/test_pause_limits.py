"""The bounds a queue runs with, as the pause flag says: pure, no database."""

from __future__ import annotations

from remit import Queue
from remit.ops.pause import Limits, limits


def test_a_paused_queue_dequeues_nothing_and_a_resumed_one_gets_its_declared_bounds() -> None:
    bounded = Queue("mail", concurrency=5, worker_concurrency=2, rate=(10, 60.0))
    assert limits(bounded, paused=True) == Limits(0, None)
    assert limits(bounded, paused=False) == Limits(5, 2)
    assert limits(Queue("default"), paused=False) == Limits(None, None)
    assert limits(Queue("default"), paused=True) == Limits(0, None)

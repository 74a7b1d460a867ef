"""The worker's periodic jobs: run every interval, survive a failing run, stop when told."""

from __future__ import annotations

import threading
import time

from remit.core.periodic import Periodic


def test_a_job_runs_every_interval_past_its_failures_until_stopped() -> None:
    runs: list[int] = []
    enough = threading.Event()

    def job() -> None:
        runs.append(len(runs))
        if len(runs) >= 4:
            enough.set()
        if len(runs) % 2:
            raise RuntimeError("a run that fails")

    periodic = Periodic("test-job", 0.01, job)
    periodic.start()
    assert enough.wait(5)
    periodic.stop()
    stopped_at = len(runs)
    time.sleep(0.05)
    assert len(runs) == stopped_at  # nothing ran after stop
    assert stopped_at >= 4


def test_a_run_asked_for_between_the_intervals_runs_then_and_once() -> None:
    ran: list[float] = []
    periodic = Periodic("test-extra", 60.0, lambda: ran.append(time.monotonic()))
    periodic.start()
    asked = time.monotonic()
    periodic.run_in(0.3)
    periodic.run_in(0.1)  # the sooner of the two is kept
    time.sleep(0.6)
    periodic.stop()
    assert len(ran) == 1  # the extra run, and no regular one within its minute
    assert 0.1 <= ran[0] - asked < 0.3

"""The supervisor of a worker that stops when idle, in this process on a manual clock: it
registers through the wakeup connector before it stops (the fake records each registration),
and a wake starts a new worker that carries on what came due, schedules backfilled from the
stop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import App, Context, schedule, workflow
from remit.client import Client
from remit.connectors.base import Implementation
from remit.connectors.wakeup import FakeWakeup
from remit.core.settings import Settings
from remit.serve.supervisor import Supervisor
from remit.serve.worker import Worker
from remit.testing import ManualClock

ENVIRON = {"REMIT_WAKEUP_TOKEN": "rwi_test", "REMIT_WAKEUP_ACCOUNT_TOKEN": "rwa_test"}


class Tick(BaseModel):
    scheduled_at: datetime


class Nap(BaseModel):
    seconds: float


def sleepy_app() -> App:
    @workflow(name="hourly", input=Tick, trigger=schedule("0 * * * *", backfill="all"))
    def hourly(ctx: Context, input: Tick) -> str:
        return input.scheduled_at.isoformat()

    @workflow(name="nap", input=Nap)
    def nap(ctx: Context, input: Nap) -> str:
        ctx.sleep(input.seconds)
        return ctx.step("after", lambda: "awake")

    return App(name="sleepy-in-process", workflows=[hourly, nap])


class Instance:
    """A supervisor over workers on one database, each on the same clock and fake wakeup."""

    def __init__(self, app: App, database_url: str, clock: ManualClock, tmp: Path) -> None:
        self.app = app
        self.clock = clock
        self.wakeup = FakeWakeup()
        self.settings = replace(
            Settings.from_env(tmp, environ={"REMIT_DATABASE_URL": database_url}),
            fakes=True,
            poll_interval=0.05,
            sweep_interval=0.2,
            idle_check_interval=0.2,
            idle_horizon=60.0,
            threads=8,
        )
        self.implementations: dict[str, Implementation] = {"wakeup": self.wakeup}
        self.remit = Client(
            app, self.settings, clock=clock, environ=ENVIRON, implementations=self.implementations
        )
        self.remit.on_write = None
        self.started: list[Worker] = []
        self.supervisor = Supervisor(self._worker, self.remit, stop_when_idle=True)

    def _worker(self) -> Worker:
        made = Worker(
            self.app,
            self.settings,
            implementations=self.implementations,
            clock=self.clock,
            environ=ENVIRON,
        )
        self.started.append(made)
        return made

    def connect(self) -> None:
        self.remit.calls.call(
            "wakeup.instances.create", {"url": "http://instance.test"}, by="user:ops"
        )

    def wait(self, what: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, "waited in vain"
            time.sleep(0.05)

    def stopped(self) -> bool:
        return self.supervisor.status == "stopped"

    def woken_ahead_of(self, deadline: datetime) -> None:
        """The last registration asks for a wake ahead of `deadline` by the supervisor's lead:
        twice its last start and a poll, at most 80% of the idle horizon."""
        ahead = (deadline - self.wakeup.registrations[-1].at).total_seconds()
        assert ahead == pytest.approx(self.supervisor.lead(), abs=1e-5)  # to the microsecond
        assert self.settings.poll_interval <= ahead <= 0.8 * self.settings.idle_horizon


@pytest.fixture
def instance(database_url: str, tmp_path: Path) -> Iterator[Instance]:
    clock = ManualClock(datetime(2026, 12, 1, 9, 30, tzinfo=UTC))
    made = Instance(sleepy_app(), database_url, clock, tmp_path)
    made.connect()
    yield made
    made.supervisor.close(timeout=0, keep_slot=False)
    made.remit.close()


def test_a_stopped_worker_registers_its_deadline_and_a_wake_backfills_from_the_stop(
    instance: Instance,
) -> None:
    instance.supervisor.start()
    instance.wait(instance.stopped)
    ten = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert len(instance.wakeup.registrations) == 1
    instance.woken_ahead_of(ten)
    row = instance.supervisor.state.get()
    assert row is not None
    assert (row.state, row.at, row.stopped_at) == ("stopped", ten, instance.clock.now())

    # The service is late: three instants pass while the worker is stopped.
    instance.clock.advance(hours=3)
    assert instance.supervisor.wake() == "stopped"
    instance.wait(lambda: len(instance.remit.runs.list(workflow="hourly")) == 3)
    fired = sorted(run.input["scheduled_at"] for run in instance.remit.runs.list(workflow="hourly"))
    assert fired == [f"2026-12-01T{hour}:00:00Z" for hour in ("10", "11", "12")]
    for run in instance.remit.runs.list(workflow="hourly"):
        instance.wait(lambda run_id=run.run_id: instance.remit.runs.get(run_id).status == "done")
    instance.wait(instance.stopped)
    instance.woken_ahead_of(datetime(2026, 12, 1, 13, 0, tzinfo=UTC))
    assert len(instance.started) == 2


def test_a_wake_while_it_runs_changes_nothing_and_a_stale_one_starts_a_worker_that_stops(
    instance: Instance,
) -> None:
    instance.supervisor.start()
    assert instance.supervisor.wake() == "running"
    instance.wait(instance.stopped)
    registered = len(instance.wakeup.registrations)
    deadline = instance.supervisor.state.get().at  # type: ignore[union-attr]
    assert deadline is not None
    assert instance.supervisor.wake() == "stopped"  # no deadline has come: nothing to do
    instance.wait(lambda: len(instance.started) == 2)
    instance.wait(instance.stopped)
    assert instance.remit.runs.list() == []
    # It registered the same deadline again, as a registration of its own.
    assert len(instance.wakeup.registrations) == registered + 1
    assert instance.supervisor.state.get().at == deadline  # type: ignore[union-attr]
    instance.woken_ahead_of(deadline)


def test_a_sleep_that_ends_while_stopped_carries_on_once_woken(instance: Instance) -> None:
    instance.supervisor.start()
    run = instance.remit.runs.start("nap", {"seconds": 600}, by="user:ops")
    instance.wait(lambda: instance.remit.runs.get(run.run_id).status == "sleeping")
    instance.wait(instance.stopped)
    instance.woken_ahead_of(instance.remit.runs.get(run.run_id).created_at + timedelta(seconds=600))
    instance.clock.advance(seconds=600)
    instance.supervisor.wake()
    instance.wait(lambda: instance.remit.runs.get(run.run_id).status == "done")
    assert instance.remit.runs.get(run.run_id).output == "awake"

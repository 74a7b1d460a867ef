"""A wakeup declared in the data files is the switch: with one, the supervisor stops its worker
when idle with no flag, and registers the next deadline through the declared type's own
`register` op (here a host vendor's clock, `clockhost.alarms.register`), never through remit's
own wakeup service. Without one, the worker keeps running unless asked to stop."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remit import App, ref
from remit.client import Client
from remit.connectors.base import Implementation
from remit.connectors.wakeup import FakeWakeup
from remit.core.errors import RemitError
from remit.core.settings import Settings
from remit.serve.supervisor import Supervisor
from remit.serve.worker import Worker
from remit.testing import ManualClock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps"))

from alarmed_app.app import hourly
from alarmed_app.clock import FakeClockhost, alarm, clockhost, site


def alarmed_app(tmp: Path, *, declared: bool = True) -> App:
    """The app of `tests/apps/alarmed_app`, its instance and wakeup declared (or not)."""
    app = App(name="alarmed", workflows=[hourly], connectors=[clockhost])
    declarations = {"web": site(name="desk"), "wake": alarm(app=ref("web", "url"))}
    if not declared:
        declarations = {"web": declarations["web"]}
    app.use_resources(declarations=declarations, lockfile=tmp / "remit.lock")
    return app


class Instance:
    """A supervisor over the app's workers, on a manual clock, each on the same fakes."""

    def __init__(
        self, app: App, database_url: str, tmp: Path, *, stop_when_idle: bool | None = None
    ) -> None:
        self.clock = ManualClock(datetime(2026, 12, 1, 9, 30, tzinfo=UTC))
        self.app = app
        self.clockhost = FakeClockhost()
        self.wakeup = FakeWakeup()
        self.settings = replace(
            Settings.from_env(tmp, environ={"REMIT_DATABASE_URL": database_url}),
            fakes=True,
            poll_interval=0.05,
            sweep_interval=0.2,
            idle_check_interval=0.2,
            idle_horizon=60.0,
        )
        self.implementations: dict[str, Implementation] = {
            "clockhost": self.clockhost,
            "wakeup": self.wakeup,
        }
        self.remit = Client(
            app, self.settings, clock=self.clock, implementations=self.implementations
        )
        self.remit.on_write = None
        self.supervisor = Supervisor(self._worker, self.remit, stop_when_idle=stop_when_idle)

    def _worker(self) -> Worker:
        return Worker(
            self.app, self.settings, implementations=self.implementations, clock=self.clock
        )

    def wait(self, what: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline, "waited in vain"
            time.sleep(0.05)

    def close(self) -> None:
        self.supervisor.close(timeout=0, keep_slot=False)
        self.remit.close()


@pytest.fixture
def instances(database_url: str, tmp_path: Path) -> Iterator[Callable[..., Instance]]:
    made: list[Instance] = []

    def make(app: App, **options: bool | None) -> Instance:
        made.append(Instance(app, database_url, tmp_path, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for instance in made:
        instance.close()


def test_a_declared_wakeup_stops_the_worker_and_registers_through_its_own_op(
    instances: Callable[..., Instance], tmp_path: Path
) -> None:
    instance = instances(alarmed_app(tmp_path))
    assert instance.supervisor.stop_when_idle is True
    instance.supervisor.start()
    instance.wait(lambda: instance.supervisor.status == "stopped")

    # The vendor's clock took the wake, ahead of the hourly schedule's next instant; remit's
    # own wakeup service was never called.
    ten = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert len(instance.clockhost.alarms) == 1
    ahead = (ten - instance.clockhost.alarms[0]).total_seconds()
    assert ahead == pytest.approx(instance.supervisor.lead(), abs=1e-5)
    assert instance.wakeup.registrations == []
    row = instance.supervisor.state.get()
    assert row is not None
    assert (row.state, row.at) == ("stopped", ten)
    # The registration is an op call like any other: a ledger row, made as remit:wakeup.
    rows = instance.remit.calls.ledger(limit=10)
    assert [(r.op_id, r.status, r.actor) for r in rows] == [
        ("clockhost.alarms.register", "ok", "remit:wakeup")
    ]


def test_without_a_declared_wakeup_the_worker_keeps_running(
    instances: Callable[..., Instance], tmp_path: Path
) -> None:
    instance = instances(alarmed_app(tmp_path, declared=False))
    assert instance.supervisor.stop_when_idle is False
    instance.supervisor.start()
    time.sleep(1.0)  # five idle checks' worth: none is made
    assert instance.supervisor.status == "running"
    assert instance.clockhost.alarms == []


def test_the_flag_still_turns_it_on_and_contradicting_a_declaration_is_refused(
    instances: Callable[..., Instance], tmp_path: Path
) -> None:
    assert instances(alarmed_app(tmp_path, declared=False), stop_when_idle=True).supervisor
    with pytest.raises(RemitError) as refused:
        instances(alarmed_app(tmp_path), stop_when_idle=False)
    assert str(refused.value) == (
        "the data files declare a wakeup, `wake` (clockhost.alarm), which makes the worker stop "
        "when idle, and stop_when_idle=False says it must not: remove the declaration (then "
        "`remit apply`), or leave the flag out"
    )

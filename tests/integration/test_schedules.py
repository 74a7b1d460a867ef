"""Scheduled workflows on a real worker with an injected clock: each instant starts one run,
across repeated sweeps, racing sweepers, restarts, both DST transitions and downtime."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from pydantic import BaseModel, field_validator

from remit import App, Context, Deadline, next_deadline, schedule, workflow
from remit.core.errors import UnknownWorkflow
from remit.core.runs import Run
from remit.core.schema import schedules
from remit.declare.schedules import Backfill, scheduled_run_id
from remit.ops.scheduler import Fired, Scheduler
from remit.testing import Harness, ManualClock

HELSINKI = "Europe/Helsinki"
QUIET = 3600.0  # a sweep interval no test waits for: the test sweeps by hand


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


class Tick(BaseModel):
    scheduled_at: datetime


def scheduled_app(
    cron: str = "0 9 * * *", *, tz: str = "UTC", backfill: Backfill = "none", name: str = "daily"
) -> App:
    @workflow(name=name, input=Tick, trigger=schedule(cron, tz=tz, backfill=backfill))
    def tick(ctx: Context, input: Tick) -> str:
        return input.scheduled_at.isoformat()

    return App(name="clockwork", workflows=[tick])


def scheduled_runs(h: Harness, workflow: str = "daily") -> list[Run]:
    return sorted(h.runs.list(workflow=workflow, limit=1000), key=lambda run: run.run_id)


def wait_for_runs(h: Harness, count: int, workflow: str = "daily") -> list[Run]:
    """Wait for `count` scheduled runs to exist and finish; return them, oldest instant first."""
    deadline = time.monotonic() + 20
    while len(found := scheduled_runs(h, workflow)) < count:
        assert time.monotonic() < deadline, f"{len(found)} of {count} scheduled runs started"
        time.sleep(0.02)
    return [h.wait(run.run_id) for run in found]


def instants(runs: list[Run]) -> list[datetime]:
    return [datetime.fromisoformat(run.input["scheduled_at"]) for run in runs]


def scheduler(h: Harness, clock: ManualClock) -> Scheduler:
    return Scheduler(h.app, h.run_store, h.worker.client, clock=clock, interval=QUIET)


def test_each_instant_fires_once_however_often_the_worker_sweeps(database_url: str) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    with Harness(scheduled_app(), database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        # Seen for the first time: its next instant is a deadline, with no run yet.
        expected = Deadline(utc(2026, 1, 5, 9), "schedule", "", "daily")
        assert h.deadlines() == [expected]
        assert next_deadline(database_url) == expected
        time.sleep(0.2)
        assert scheduled_runs(h) == []

        clock.advance(hours=1)  # 09:00 exactly
        (first,) = wait_for_runs(h, 1)
        time.sleep(0.3)  # many sweeps more
        assert [run.run_id for run in scheduled_runs(h)] == [first.run_id]
        assert (first.status, first.output) == ("done", "2026-01-05T09:00:00+00:00")
        assert first.run_id == scheduled_run_id("clockwork", "daily", utc(2026, 1, 5, 9))
        assert first.started_by == "remit:schedule"
        assert h.deadlines() == [Deadline(utc(2026, 1, 6, 9), "schedule", "", "daily")]

        clock.advance(days=1, minutes=2)
        runs = wait_for_runs(h, 2)
        time.sleep(0.2)
        assert instants(scheduled_runs(h)) == [utc(2026, 1, 5, 9), utc(2026, 1, 6, 9)]
        assert all(run.status == "done" for run in runs)


def test_racing_sweepers_fire_each_instant_once(database_url: str) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    app = scheduled_app(backfill="all")
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        clock.advance(days=10, hours=2)  # eleven days' instants due at once
        sweepers = [scheduler(h, clock) for _ in range(4)]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda s: s.fire_due(), sweepers))
        started = [fired for result in results for fired in result if fired.started]
        days = [utc(2026, 1, day, 9) for day in range(5, 16)]
        assert sorted(fired.at for fired in started) == days  # each once, by one of them
        for result in results:  # each sweeper went oldest first
            assert [fired.at for fired in result] == sorted(fired.at for fired in result)
        runs = wait_for_runs(h, 11)
        assert instants(runs) == days
        assert len(scheduled_runs(h)) == 11
        assert all(run.status == "done" for run in runs)


def test_a_restart_fires_nothing_again(database_url: str) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    app = scheduled_app(backfill="all")
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        clock.advance(hours=1, seconds=30)
        (run,) = wait_for_runs(h, 1)
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        time.sleep(0.3)
        assert [each.run_id for each in scheduled_runs(h)] == [run.run_id]

        # A sweep cut off after starting the run and before recording its progress: the next
        # sweep finds the instant due again, and its run there already.
        with h.worker.db.begin() as conn:
            conn.execute(
                schedules.update().values(
                    swept_through=utc(2026, 1, 5, 8), next_at=utc(2026, 1, 5, 9)
                )
            )
        fired = scheduler(h, clock).fire_due()
        assert fired == [Fired("daily", utc(2026, 1, 5, 9), run.run_id, started=False)]
        assert [each.run_id for each in scheduled_runs(h)] == [run.run_id]


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        pytest.param(
            utc(2026, 3, 27, 22),
            utc(2026, 3, 31),
            # 03:30 EET; 03:30 never happens on the 29th: 04:00 EEST, as the clocks jump;
            # then 03:30 EEST.
            [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
            id="spring-forward",
        ),
        pytest.param(
            utc(2026, 10, 23, 22),
            utc(2026, 10, 27, 1),
            # 03:30 EEST; 03:30 happens twice on the 25th: the first, EEST; then 03:30 EET.
            [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)],
            id="fall-back",
        ),
    ],
)
def test_a_daily_job_inside_the_transition_hour_fires_once_a_day(
    database_url: str, since: datetime, until: datetime, expected: list[datetime]
) -> None:
    clock = ManualClock(since)
    app = scheduled_app("30 3 * * *", tz=HELSINKI)
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        sweeper = scheduler(h, clock)
        fired: list[Fired] = []
        while clock.now() < until:  # a sweep every four minutes, through both nights
            clock.advance(minutes=4)
            fired += sweeper.fire_due()
        assert [each.at for each in fired] == expected
        assert all(each.started for each in fired)
        runs = wait_for_runs(h, len(expected))
        assert instants(runs) == expected
        assert [run.output for run in runs] == [at.isoformat() for at in expected]


@pytest.mark.parametrize(
    ("backfill", "expected"),
    [
        ("none", []),
        ("latest", [utc(2026, 1, 15, 9)]),
        ("all", [utc(2026, 1, day, 9) for day in range(5, 16)]),
    ],
)
def test_backfill_after_ten_days_down(
    database_url: str, backfill: Backfill, expected: list[datetime]
) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    app = scheduled_app(backfill=backfill)
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02):
        pass  # the schedule is seen, and starts from 08:00
    clock.advance(days=10, hours=3)  # down until 11:00 ten days later: eleven instants missed
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=0.02) as h:
        runs = wait_for_runs(h, len(expected))
        time.sleep(0.2)
        assert instants(scheduled_runs(h)) == expected
        assert all(run.status == "done" for run in runs)
        # Whatever was missed, the next instant is tomorrow's.
        assert h.deadlines() == [Deadline(utc(2026, 1, 16, 9), "schedule", "", "daily")]


def test_a_changed_or_dropped_schedule_takes_effect_on_the_next_sweep(database_url: str) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    with Harness(scheduled_app("0 9 * * *"), database_url=database_url, clock=clock) as h:
        assert [d.at for d in h.deadlines()] == [utc(2026, 1, 5, 9)]
    app = scheduled_app("0 10 * * *", tz=HELSINKI)  # 10:00 in Helsinki is 08:00 UTC in winter
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        assert [d.at for d in h.deadlines()] == [utc(2026, 1, 6, 8)]
        with h.worker.db.engine.connect() as conn:
            row = conn.execute(sa.select(schedules)).one()
        assert (row.cron, row.tz, row.backfill) == ("0 10 * * *", HELSINKI, "none")
    other = scheduled_app(name="weekly")
    with Harness(other, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        assert [(d.target, d.at) for d in h.deadlines()] == [("weekly", utc(2026, 1, 5, 9))]


class Weekday(BaseModel):
    scheduled_at: datetime

    @field_validator("scheduled_at")
    @classmethod
    def not_on_sunday(cls, value: datetime) -> datetime:
        if value.weekday() == 6:
            raise ValueError("no reports on Sundays")
        return value


def test_an_instant_its_input_refuses_is_skipped_and_the_next_fires(database_url: str) -> None:
    @workflow(name="daily", input=Weekday, trigger=schedule("0 9 * * *", backfill="all"))
    def report(ctx: Context, input: Weekday) -> str:
        return input.scheduled_at.isoformat()

    clock = ManualClock(utc(2026, 1, 3, 8))  # a Saturday
    app = App(name="clockwork", workflows=[report])
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        clock.advance(days=2, hours=2)  # Saturday, Sunday and Monday at 09:00
        fired = scheduler(h, clock).fire_due()
        assert [each.at for each in fired] == [utc(2026, 1, 3, 9), utc(2026, 1, 5, 9)]
        assert instants(wait_for_runs(h, 2)) == [utc(2026, 1, 3, 9), utc(2026, 1, 5, 9)]
        assert [d.at for d in h.deadlines()] == [utc(2026, 1, 6, 9)]


@pytest.mark.parametrize(
    ("backfill", "fired_on_resume"),
    [
        ("none", []),
        ("latest", [utc(2026, 1, 8, 9)]),
        ("all", [utc(2026, 1, 6, 9), utc(2026, 1, 7, 9), utc(2026, 1, 8, 9)]),
    ],
)
def test_a_paused_schedule_fires_nothing_and_its_backfill_decides_on_resuming(
    database_url: str, backfill: Backfill, fired_on_resume: list[datetime]
) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    app = scheduled_app(backfill=backfill)
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        sweeper = scheduler(h, clock)
        assert sweeper.fire_due() == []  # seen: it starts from 08:00
        clock.advance(hours=1)
        assert [each.at for each in sweeper.fire_due()] == [utc(2026, 1, 5, 9)]

        paused = h.client.schedules.pause("daily", by="user:carol")
        assert (paused.paused, paused.paused_by, paused.next_at) == (True, "user:carol", None)
        assert paused.last_fired_at == utc(2026, 1, 5, 9)
        assert h.deadlines() == []  # no deadline: nothing wakes a stopped worker for it
        clock.advance(days=3, hours=3)  # 12:00 on the 8th: three instants while paused
        assert sweeper.fire_due() == []
        again = h.client.schedules.pause("daily", by="user:dana")  # changes nothing
        assert (again.paused_at, again.paused_by) == (paused.paused_at, "user:carol")

        resumed = h.client.schedules.resume("daily", by="user:carol")
        assert (resumed.paused, resumed.paused_at, resumed.paused_by) == (False, None, None)
        assert resumed.next_at == utc(2026, 1, 6, 9)  # where it stopped: due at once
        assert [each.at for each in sweeper.fire_due()] == fired_on_resume
        assert h.deadlines() == [Deadline(utc(2026, 1, 9, 9), "schedule", "", "daily")]
        assert instants(wait_for_runs(h, 1 + len(fired_on_resume))) == [
            utc(2026, 1, 5, 9),
            *fired_on_resume,
        ]
        audit = h.client.ops.audit("schedule:daily")
        assert [(row["action"], row["actor"]) for row in audit] == [
            ("schedule.paused", "user:carol"),
            ("schedule.resumed", "user:carol"),
        ]


def test_a_schedule_paused_before_any_sweep_begins_when_resumed(database_url: str) -> None:
    clock = ManualClock(utc(2026, 1, 5, 8))
    app = scheduled_app(backfill="all")
    with Harness(app, database_url=database_url, clock=clock, sweep_interval=QUIET) as h:
        with h.worker.db.begin() as conn:
            conn.execute(schedules.delete())  # as if no worker had swept yet
        [state] = h.client.schedules.list()
        assert (state.workflow, state.next_at, state.last_fired_at) == (
            "daily",
            utc(2026, 1, 5, 9),
            None,
        )
        h.client.schedules.pause("daily", by="user:carol")
        clock.advance(days=2)
        sweeper = scheduler(h, clock)
        assert sweeper.fire_due() == []
        h.client.schedules.resume("daily", by="user:carol")
        assert sweeper.fire_due() == []  # nothing before its first sweep was missed
        assert h.deadlines() == [Deadline(utc(2026, 1, 7, 9), "schedule", "", "daily")]


def test_only_a_scheduled_workflow_is_paused(database_url: str) -> None:
    with Harness(scheduled_app(), database_url=database_url, sweep_interval=QUIET) as h:
        with pytest.raises(UnknownWorkflow) as unknown:
            h.client.schedules.pause("weekly", by="user:carol")
        assert str(unknown.value) == (
            "`weekly` is no workflow of app `clockwork` (its scheduled workflows: daily): "
            "`remit schedules` lists them"
        )
        assert h.client.ops.audit("schedule:weekly") == []

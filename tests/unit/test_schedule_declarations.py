"""Schedules as an app declares them, and the instants they fire at, with no database.

Europe/Helsinki moves its clocks at 01:00 UTC: in 2026 from 03:00 to 04:00 local on 29 March
(03:00-03:59 never happens) and from 04:00 back to 03:00 on 25 October (03:00-03:59 happens
twice). A daily job at 03:30 local sits in both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, Field

from remit import App, AppError, Schedule, schedule, workflow
from remit.declare.schedules import BACKFILL_LIMIT, scheduled_input, scheduled_run_id

HELSINKI = "Europe/Helsinki"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def walk(s: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every instant in (start, end], one `next_after` at a time."""
    found: list[datetime] = []
    at = s.next_after(start)
    while at <= end:
        found.append(at)
        at = s.next_after(at)
    return found


class Empty(BaseModel):
    pass


class Stamped(BaseModel):
    scheduled_at: datetime
    region: str = "eu"


# --- declaring a schedule ------------------------------------------------------------------


def test_a_schedule_keeps_what_it_was_given() -> None:
    s = schedule("0 9 * * MON-FRI", tz=HELSINKI, backfill="latest")
    assert s == Schedule("0 9 * * MON-FRI", tz=HELSINKI, backfill="latest")
    assert (schedule("@daily").tz, schedule("@daily").backfill) == ("UTC", "none")


def test_a_cron_expression_that_cannot_be_read_is_refused_saying_why() -> None:
    with pytest.raises(AppError, match=r"has 5 fields \(minute, hour.*this one has 4"):
        schedule("0 9 * *")
    with pytest.raises(AppError, match="this one has 6"):
        schedule("0 0 9 * * *")  # a seconds field is not cron
    with pytest.raises(AppError, match=r"schedule\('61 9 \* \* \*'\) is not a cron expression"):
        schedule("61 9 * * *")
    with pytest.raises(AppError, match=r"never fires: no date matches it"):
        schedule("0 0 31 2 *")
    with pytest.raises(AppError, match="give the cron expression as text"):
        schedule(9)  # type: ignore[arg-type]


def test_an_unknown_time_zone_is_refused_with_a_suggestion() -> None:
    with pytest.raises(AppError, match=r"no such time zone \(did you mean 'Europe/Helsinki'\?\)"):
        schedule("0 9 * * *", tz="Europe/Helsnki")
    with pytest.raises(AppError, match="use an IANA name such as 'Europe/Helsinki' or 'UTC'"):
        schedule("0 9 * * *", tz="Mars/Olympus")
    with pytest.raises(AppError, match="name an IANA time zone"):
        schedule("0 9 * * *", tz="")


def test_an_unknown_backfill_is_refused_listing_the_three() -> None:
    with pytest.raises(AppError, match=r"backfill is 'none' .* 'latest' .* or 'all'"):
        schedule("0 9 * * *", backfill="some")  # type: ignore[arg-type]


def test_a_trigger_must_be_a_schedule() -> None:
    with pytest.raises(AppError, match=r"workflow `report`: trigger='0 9 \* \* \*' is not a"):
        workflow(name="report", input=Empty, trigger="0 9 * * *")  # type: ignore[arg-type]


def test_a_scheduled_workflow_needs_an_input_it_can_build() -> None:
    class Needs(BaseModel):
        region: str
        team: str

    class Counted(BaseModel):
        scheduled_at: int

    with pytest.raises(
        AppError,
        match=r"workflow `report` runs on a schedule, so its input `Needs` must be built from "
        r"no fields, or from `scheduled_at` alone; it needs `region`, `team`: give them defaults",
    ):
        workflow(name="report", input=Needs, trigger=schedule("0 9 * * *"))
    with pytest.raises(AppError, match=r"`Counted` does not accept it: declare `scheduled_at: dat"):
        workflow(name="report", input=Counted, trigger=schedule("0 9 * * *"))
    # Buildable: from nothing, or from the instant with defaults for the rest.
    workflow(name="report", input=Empty, trigger=schedule("0 9 * * *"))
    workflow(name="report", input=Stamped, trigger=schedule("0 9 * * *"))


def test_a_scheduled_run_gets_its_instant_when_its_model_asks_for_it() -> None:
    at = utc(2026, 3, 29, 1, 0)
    assert scheduled_input(Empty, at) == {}
    assert scheduled_input(Stamped, at) == {"scheduled_at": "2026-03-29T01:00:00+00:00"}
    assert Stamped.model_validate(scheduled_input(Stamped, at)).scheduled_at == at


def test_the_run_id_is_one_per_app_workflow_and_instant() -> None:
    at = utc(2026, 3, 29, 1, 0)
    run_id = scheduled_run_id("ar-desk", "daily-report", at)
    assert run_id == f"sched_{run_id[6:18]}_20260329T010000Z"
    assert len(run_id) <= 64
    assert run_id == scheduled_run_id("ar-desk", "daily-report", at.astimezone(UTC))
    assert run_id != scheduled_run_id("ar-desk", "weekly-report", at)
    assert run_id != scheduled_run_id("ops", "daily-report", at)
    assert run_id != scheduled_run_id("ar-desk", "daily-report", at + timedelta(minutes=1))
    assert len(scheduled_run_id("a" * 200, "w" * 200, at)) == len(run_id)


# --- the app's version -----------------------------------------------------------------------


class AtNine:
    @workflow(name="report", input=Empty, trigger=schedule("0 9 * * *"))
    def report(ctx: Any, input: Empty) -> str:
        return "sent"


class AtTenInHelsinki:
    @workflow(
        name="report",
        input=Empty,
        trigger=schedule("0 10 * * MON-FRI", tz=HELSINKI, backfill="all"),
    )
    def report(ctx: Any, input: Empty) -> str:
        return "sent"


class OtherInput:
    @workflow(name="report", input=Stamped, trigger=schedule("0 9 * * *"))
    def report(ctx: Any, input: Empty) -> str:
        return "sent"


class OtherBody:
    @workflow(name="report", input=Empty, trigger=schedule("0 9 * * *"))
    def report(ctx: Any, input: Empty) -> str:
        return "sent twice"


class Unscheduled:
    @workflow(name="report", input=Empty)
    def report(ctx: Any, input: Empty) -> str:
        return "sent"


def test_editing_a_schedule_keeps_the_version_and_adding_one_changes_it() -> None:
    at_nine = App(name="desk", workflows=[AtNine.report])
    at_ten = App(name="desk", workflows=[AtTenInHelsinki.report])
    plain = App(name="desk", workflows=[Unscheduled.report])
    assert at_nine.version == at_ten.version
    assert at_nine.version != plain.version
    for changed in (OtherInput, OtherBody):
        assert App(name="desk", workflows=[changed.report]).version != at_nine.version


# --- the instants, across both transitions ---------------------------------------------------


def test_a_daily_job_in_the_skipped_hour_fires_once_as_the_clocks_jump() -> None:
    s = schedule("30 3 * * *", tz=HELSINKI)
    assert walk(s, utc(2026, 3, 27, 12), utc(2026, 3, 31, 12)) == [
        utc(2026, 3, 28, 1, 30),  # 03:30 EET
        utc(2026, 3, 29, 1, 0),  # 03:30 never happens: 04:00 EEST, when the clocks jump
        utc(2026, 3, 30, 0, 30),  # 03:30 EEST
        utc(2026, 3, 31, 0, 30),
    ]
    assert s.between(utc(2026, 3, 27, 12), utc(2026, 3, 31, 12), limit=10) == walk(
        s, utc(2026, 3, 27, 12), utc(2026, 3, 31, 12)
    )


def test_a_daily_job_in_the_repeated_hour_fires_once_at_its_first_pass() -> None:
    s = schedule("30 3 * * *", tz=HELSINKI)
    assert walk(s, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12)) == [
        utc(2026, 10, 24, 0, 30),  # 03:30 EEST
        utc(2026, 10, 25, 0, 30),  # the first 03:30 (EEST); the second (01:30 UTC) fires nothing
        utc(2026, 10, 26, 1, 30),  # 03:30 EET
        utc(2026, 10, 27, 1, 30),
    ]
    assert s.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)
    assert s.between(utc(2026, 10, 23, 12), utc(2026, 10, 27, 12), limit=10) == walk(
        s, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12)
    )


def test_an_hourly_job_fires_24_times_on_either_transition_day() -> None:
    s = schedule("30 * * * *", tz=HELSINKI)
    # The local days: 29 March is 23 hours long, 25 October 25 hours.
    spring = walk(s, utc(2026, 3, 28, 22), utc(2026, 3, 29, 21))
    autumn = walk(s, utc(2026, 10, 24, 21), utc(2026, 10, 25, 22))
    assert len(spring) == len(autumn) == 24
    for instants in (spring, autumn):
        assert instants == sorted(set(instants))
    # 02:30 EET, the skipped 03:30 as the clocks jump to 04:00, then 04:30 EEST.
    assert spring[2:5] == [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)]
    assert utc(2026, 10, 25, 1, 30) not in autumn  # the repeated 03:30


def test_wall_times_the_jump_swallows_fire_once_together() -> None:
    s = schedule("*/15 * * * *", tz=HELSINKI)
    around = walk(s, utc(2026, 3, 29, 0, 40), utc(2026, 3, 29, 1, 20))
    # 02:45 EET, then 03:00-03:45 (skipped) and 04:00 all at 01:00 UTC, then 04:15 EEST.
    assert around == [utc(2026, 3, 29, 0, 45), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 15)]


def test_looking_back_from_the_repeated_hour_misses_nothing() -> None:
    s = schedule("*/15 * * * *", tz=HELSINKI)
    now = utc(2026, 10, 25, 1, 40)  # 03:40 the second time
    assert s.between(utc(2026, 10, 25, 0, 0), now, limit=10) == [
        utc(2026, 10, 25, 0, 15),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 0, 45),  # 03:45 the first time: its wall time is after now's
    ]
    assert s.next_after(now) == utc(2026, 10, 25, 2, 0)  # 04:00 EET


def test_weekdays_and_months_follow_the_local_date() -> None:
    s = schedule("0 9 * * MON-FRI", tz="America/New_York")
    friday = utc(2026, 3, 6, 15)  # 10:00 EST on a Friday
    assert s.next_after(friday) == utc(2026, 3, 9, 13)  # Monday 09:00 EDT (DST began Sunday)


# --- backfill ------------------------------------------------------------------------------


def test_backfill_after_ten_days_down() -> None:
    since = utc(2026, 1, 5, 8)  # the last sweep
    now = utc(2026, 1, 15, 11)  # ten days later, two hours after 09:00
    missed = [utc(2026, 1, day, 9) for day in range(5, 16)]

    def due(backfill: Any, at: datetime = now) -> tuple[list[datetime], int]:
        found = schedule("0 9 * * *", backfill=backfill).due(since, at)
        return found.fire, found.skipped

    assert due("none") == ([], 11)
    assert due("latest") == ([utc(2026, 1, 15, 9)], 10)
    assert due("all") == (missed, 0)
    # Back within five minutes of an instant, it is on time, not missed.
    assert due("none", utc(2026, 1, 15, 9, 5)) == ([utc(2026, 1, 15, 9)], 10)
    assert due("none", utc(2026, 1, 15, 9, 6)) == ([], 11)
    assert schedule("0 9 * * *").due(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)).fire == []


def test_backfill_all_fires_at_most_the_limit_most_recent() -> None:
    hourly = schedule("0 * * * *", backfill="all")
    due = hourly.due(utc(2026, 1, 5, 0), utc(2026, 1, 15, 0, 30))  # 240 instants
    assert len(due.fire) == BACKFILL_LIMIT == 100
    assert due.fire[-1] == utc(2026, 1, 15, 0)
    assert due.fire == sorted(due.fire)
    assert due.fire[0] == utc(2026, 1, 15, 0) - timedelta(hours=99)
    assert due.more


def test_instants_exactly_at_the_bounds() -> None:
    daily = schedule("0 9 * * *")
    assert daily.between(utc(2026, 1, 5, 9), utc(2026, 1, 6, 9), limit=5) == [utc(2026, 1, 6, 9)]
    assert daily.next_after(utc(2026, 1, 5, 9)) == utc(2026, 1, 6, 9)
    assert daily.next_after(utc(2026, 1, 5, 8, 59, 59)) == utc(2026, 1, 5, 9)


class Regional(BaseModel):
    scheduled_at: datetime | None = None
    region: str = Field(default="eu")


def test_scheduled_at_may_be_optional() -> None:
    workflow(name="report", input=Regional, trigger=schedule("@hourly"))
    assert Regional.model_validate(scheduled_input(Regional, utc(2026, 1, 1))).region == "eu"

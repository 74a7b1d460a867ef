"""Schedules: when a scheduled workflow fires, decided with no database.

`@workflow(..., trigger=schedule("0 9 * * MON-FRI", tz="Europe/Helsinki"))` starts one run of
the workflow at every *instant* the cron expression names on the zone's wall clock. An instant is
a UTC moment; the scheduled run's id is derived from it (`scheduled_run_id`), so each instant
starts at most one run however many workers sweep, and however often.

Daylight saving time. The cron expression is read on the wall clock, and each wall time it names
becomes one instant:

- a wall time that happens once is that moment;
- a wall time the clocks skip (spring forward: 03:30 on the last Sunday of March in Helsinki)
  fires at the moment the clocks jump (04:00 local, the first wall time after the gap);
- a wall time that happens twice (fall back: 03:30 on the last Sunday of October in Helsinki)
  fires once, at its first occurrence (03:30 summer time);
- wall times that land on one instant (every 15 minutes inside a skipped hour) fire once.

So a daily job fires exactly once on every day, the two transition days included, and the
instants never go backwards in time. An hourly job at half past fires 24 times on either
transition day: on the spring-forward day its 03:30 fires at 04:00, half an hour before its
04:30; on the fall-back day the repeated hour's second pass fires nothing. A schedule in `UTC`
(the default) has no transitions at all.

croniter walks the wall clock only, on UTC datetimes standing for wall times, where no
transition can disturb its arithmetic; the mapping to instants is `_instant`'s.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BaseModel, ValidationError

from remit.core.errors import AppError

Backfill = Literal["none", "latest", "all"]
BACKFILLS: tuple[str, ...] = get_args(Backfill)

# `backfill="all"` fires at most this many missed instants, the most recent ones, oldest first;
# older ones are skipped (and logged). Kubernetes's CronJob draws its line at 100 too: a catch-up
# of a daily job after three months, or an hourly one after four days, without a storm.
BACKFILL_LIMIT = 100

# An instant found due at most this late is on time, not missed: a worker's restart or a slow
# sweep does not skip it under `backfill="none"`. A worker sweeping every few seconds finds each
# instant seconds late; a worker sweeping less often widens it to two sweeps (`Scheduler`).
ON_TIME = timedelta(minutes=5)

# The input field through which a scheduled run learns its instant, when its model has one.
SCHEDULED_AT = "scheduled_at"

_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_FIELDS = "minute, hour, day of month, month (1-12 or JAN-DEC), day of week (0-6 or SUN-SAT)"


@dataclass(frozen=True)
class Schedule:
    """When a workflow fires: a 5-field cron expression on the wall clock of the IANA zone `tz`.

    `backfill` says what happens to instants missed while no worker ran: `"none"` skips them,
    `"latest"` fires the most recent one once, `"all"` fires each, oldest first (at most
    `BACKFILL_LIMIT`, the most recent). Made by `remit.schedule(...)`; raises `AppError` naming
    what to change when the expression, the zone or the backfill cannot be used.
    """

    cron: str
    tz: str = "UTC"
    backfill: Backfill = "none"

    def __post_init__(self) -> None:
        # croniter is imported where a schedule is made or walked: an app that declares none
        # does not load it.
        from croniter import CroniterBadDateError

        _check_cron(self.cron)
        _check_zone(self.cron, self.tz)
        if self.backfill not in BACKFILLS:
            raise AppError(
                f"schedule({self.cron!r}, backfill={self.backfill!r}): backfill is 'none' (skip "
                "instants missed while no worker ran), 'latest' (fire the most recent one once) "
                f"or 'all' (fire each, oldest first, at most {BACKFILL_LIMIT})"
            )
        try:
            self.next_after(datetime(2000, 1, 1, tzinfo=UTC))
        except CroniterBadDateError:
            raise AppError(
                f"schedule({self.cron!r}) never fires: no date matches it (a day of month the "
                "month never has?); fix the day of month or the month"
            ) from None

    @cached_property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def next_after(self, moment: datetime) -> datetime:
        """The first instant strictly after `moment` (timezone-aware), in UTC."""
        from croniter import croniter

        moment = moment.astimezone(UTC)
        walls = croniter(self.cron, _wall(moment, self.zone), day_or=True)
        while True:
            at = _instant(_step(walls.get_next), self.zone)
            if at > moment:
                return at

    def between(self, after: datetime, upto: datetime, *, limit: int) -> list[datetime]:
        """The instants in `(after, upto]`, oldest first: the latest `limit` of them.

        Walks back from `upto`, so the work is bounded by `limit` however long the span.
        """
        from croniter import croniter

        after, upto = after.astimezone(UTC), upto.astimezone(UTC)
        # A wall time a little after `upto`'s own can still map to an instant before it: while
        # the clocks repeat an hour, that hour's wall times map to its first pass. The margin is
        # the offset the zone gave up in the last day, if it gave one up.
        margin = max(
            timedelta(0),
            _offset(upto - timedelta(days=1), self.zone) - _offset(upto, self.zone),
        )
        start = _wall(upto, self.zone).replace(second=0, microsecond=0) + margin
        walls = croniter(self.cron, start + timedelta(minutes=1), day_or=True)
        found: list[datetime] = []
        while len(found) < limit:
            at = _instant(_step(walls.get_prev), self.zone)
            if at > upto or (found and at == found[-1]):
                continue
            if at <= after:
                break
            found.append(at)
        return found[::-1]

    def due(self, after: datetime, now: datetime, *, on_time: timedelta = ON_TIME) -> Due:
        """What to fire at `now` when every instant up to `after` has been dealt with.

        Only the latest due instant can be on time (at most `on_time` late); the others were
        missed, and `backfill` decides for them and for a late latest one.
        """
        found = self.between(after, now, limit=BACKFILL_LIMIT + 1)
        if not found:
            return Due([], 0, more=False)
        if self.backfill == "all":
            fire = found[-BACKFILL_LIMIT:]
        elif self.backfill == "latest" or now - found[-1] <= on_time:
            fire = found[-1:]
        else:
            fire = []
        return Due(fire, len(found) - len(fire), more=len(found) > BACKFILL_LIMIT)


@dataclass(frozen=True)
class Due:
    """The instants to fire, oldest first, and how many due ones are skipped: exactly, or at
    least that many when `more` (the walk back stops past `BACKFILL_LIMIT`)."""

    fire: list[datetime]
    skipped: int
    more: bool


def schedule(cron: str, *, tz: str = "UTC", backfill: Backfill = "none") -> Schedule:
    """A workflow's trigger: `@workflow(..., trigger=schedule("0 9 * * MON-FRI", tz=...))`.

    See `Schedule`; raises `AppError` naming what to change.
    """
    return Schedule(cron, tz=tz, backfill=backfill)


def scheduled_run_id(app: str, workflow: str, at: datetime) -> str:
    """The id of the run that `workflow` of `app` starts at the instant `at`: the same in every
    process, so a second start of it is refused by the runs table's primary key."""
    digest = hashlib.sha256(f"{app}\n{workflow}".encode()).hexdigest()[:12]
    return f"sched_{digest}_{at.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def scheduled_input(model: type[BaseModel], at: datetime) -> dict[str, Any]:
    """The input of a scheduled run: its instant as `scheduled_at` (ISO 8601, UTC) when the
    model has that field, else nothing; every other field takes its default."""
    if SCHEDULED_AT in model.model_fields:
        return {SCHEDULED_AT: at.astimezone(UTC).isoformat()}
    return {}


def check_scheduled_input(workflow: str, model: type[BaseModel]) -> None:
    """Refuse a scheduled workflow whose input model cannot be built for a scheduled run."""
    try:
        model.model_validate(scheduled_input(model, datetime(2000, 1, 1, tzinfo=UTC)))
    except ValidationError as error:
        locs = [str(e["loc"][0]) for e in error.errors() if e["loc"]]
        if SCHEDULED_AT in locs:
            raise AppError(
                f"workflow `{workflow}` runs on a schedule, which passes the instant as "
                f"`{SCHEDULED_AT}` (an ISO 8601 UTC timestamp), and `{model.__name__}` does not "
                f"accept it: declare `{SCHEDULED_AT}: datetime`"
            ) from None
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(locs)) or "its fields"
        raise AppError(
            f"workflow `{workflow}` runs on a schedule, so its input `{model.__name__}` must be "
            f"built from no fields, or from `{SCHEDULED_AT}` alone; it needs {names}: give "
            f"{'it a default' if len(locs) == 1 else 'them defaults'}"
        ) from None


def _check_cron(cron: object) -> None:
    from croniter import CroniterError, croniter

    if not isinstance(cron, str):
        raise AppError(
            f"schedule({cron!r}): give the cron expression as text, e.g. '0 9 * * MON-FRI'"
        )
    fields = cron.split()
    if len(fields) == 1 and fields[0].lower() in _ALIASES:
        return
    if len(fields) != 5:
        raise AppError(
            f"schedule({cron!r}): a cron expression has 5 fields ({_FIELDS}), e.g. "
            f"'0 9 * * MON-FRI' for 09:00 on weekdays; this one has {len(fields)}"
        )
    try:
        croniter(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CroniterError as error:
        raise AppError(
            f"schedule({cron!r}) is not a cron expression remit can read ({error}): its 5 "
            f"fields are {_FIELDS}"
        ) from None


def _check_zone(cron: str, tz: object) -> None:
    if not isinstance(tz, str) or not tz:
        raise AppError(f"schedule({cron!r}, tz={tz!r}): name an IANA time zone, e.g. 'UTC'")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        close = difflib.get_close_matches(tz, sorted(available_timezones()), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise AppError(
            f"schedule({cron!r}, tz={tz!r}): no such time zone{hint}; use an IANA name such as "
            "'Europe/Helsinki' or 'UTC'"
        ) from None


def _step(method: Any) -> datetime:
    """The next (or previous) wall time from a croniter walk; croniter's methods are untyped."""
    found = method(datetime)
    assert isinstance(found, datetime)
    return found


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    """`moment`'s wall time in `zone`, as a UTC datetime standing for it (what croniter walks)."""
    return moment.astimezone(zone).replace(tzinfo=UTC, fold=0)


def _offset(moment: datetime, zone: ZoneInfo) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant a wall time in `zone` fires at (see the module's note on DST)."""
    local = wall.replace(tzinfo=zone, fold=0)  # fold=0: a repeated wall time's first pass
    at = local.astimezone(UTC)
    naive = wall.replace(tzinfo=None)
    if at.astimezone(zone).replace(tzinfo=None) == naive:
        return at
    # Skipped by the clocks. Read with the offset after the jump it falls before the jump, read
    # with the one before it falls after: the jump is between, found to the second.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = at
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if middle.astimezone(zone).replace(tzinfo=None) >= naive:
            high = middle
        else:
            low = middle
    return high

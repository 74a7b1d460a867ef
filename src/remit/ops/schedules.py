"""`client.schedules`: the app's scheduled workflows, each paused or not, and pausing and
resuming one.

A paused schedule fires nothing: a worker's sweep passes over it (`ops/scheduler.py`), and it
is no deadline (`ops/deadlines.py`), so no stopped worker is woken for it. Its row in
`remit_schedules` stays as the last sweep before the pause left it, so on resuming, the
instants that came while it was paused are missed instants, and the schedule's `backfill`
decides, as after downtime: `"none"` skips them (one found up to 5 minutes late still fires),
`"latest"` fires the most recent once, `"all"` fires each, at most the 100 most recent.

Pausing and resuming are the policy action `manage_schedules` on the workflow (its context's
`verb`: `pause` or `resume`), each an audit row about `schedule:<workflow>`, written with the
row of `remit_schedule_pauses` that holds the pause. Pausing a paused schedule, or resuming one
that is not, changes nothing and writes nothing.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from remit.core.acting import Acting, no_nul, not_in_a_workflow
from remit.core.audit import audit_row
from remit.core.database import count
from remit.core.errors import UnknownWorkflow
from remit.core.schema import schedule_pauses, schedules

if TYPE_CHECKING:
    from remit.app import App
    from remit.declare.schedules import Schedule
    from remit.policy.guard import Guard

# The target of a schedule's audit rows.
TARGET = "schedule:{workflow}"


@dataclass(frozen=True)
class ScheduleState:
    """A scheduled workflow as `remit schedules` lists it: its declaration, its next instant
    (None while it is paused; a past one is due at the next sweep), the latest instant that
    has a run, and whether it is paused, since when and by whom."""

    workflow: str
    cron: str
    tz: str
    backfill: str
    next_at: datetime | None
    last_fired_at: datetime | None
    paused: bool
    paused_at: datetime | None
    paused_by: str | None


def paused_schedules(conn: sa.Connection, app: str) -> set[str]:
    """The workflows of the app `app` whose schedules are paused."""
    found = conn.execute(sa.select(schedule_pauses.c.workflow).where(schedule_pauses.c.app == app))
    return set(found.scalars())


def not_paused(app: str | None = None) -> sa.ColumnElement[bool]:
    """A condition on `remit_schedules`: its row's schedule is not paused (of the app `app`,
    else of the row's own app)."""
    return ~sa.exists().where(
        schedule_pauses.c.app == (schedules.c.app if app is None else app),
        schedule_pauses.c.workflow == schedules.c.workflow,
    )


class ScheduleServices(Protocol):
    """The client's services this room uses."""

    @property
    def guard(self) -> Guard: ...


class SchedulesClient(Acting, Protocol):
    """The client as the schedules room sees it."""

    @property
    def app(self) -> App: ...
    @property
    def services(self) -> ScheduleServices: ...


class SchedulesRoom:
    """`client.schedules`: the app's scheduled workflows."""

    def __init__(self, client: SchedulesClient) -> None:
        self._client = client

    def list(self) -> builtins.list[ScheduleState]:
        """Every scheduled workflow of the app, by name."""
        app = self._client.app_name
        with self._client.db.engine.connect() as conn:
            rows = {
                row.workflow: row
                for row in conn.execute(sa.select(schedules).where(schedules.c.app == app))
            }
            pauses = {
                row.workflow: row
                for row in conn.execute(
                    sa.select(schedule_pauses).where(schedule_pauses.c.app == app)
                )
            }
        now = self._client.clock.now()
        return [
            _state(name, trigger, rows.get(name), pauses.get(name), now)
            for name, trigger in sorted(self._declared().items())
        ]

    def get(self, workflow: str) -> ScheduleState:
        """One scheduled workflow; `UnknownWorkflow` naming the schedules if it is none."""
        self._trigger(workflow)
        return next(each for each in self.list() if each.workflow == workflow)

    def pause(self, workflow: str, *, by: str | None = None) -> ScheduleState:
        """Pause a schedule, as the policies allow: it fires nothing until it is resumed."""
        not_in_a_workflow("schedules.pause")
        self._change(workflow, paused=True, by=by)
        return self.get(workflow)

    def resume(self, workflow: str, *, by: str | None = None) -> ScheduleState:
        """Resume a paused schedule, as the policies allow: the instants it missed are fired or
        skipped as its backfill says, at the next sweep."""
        not_in_a_workflow("schedules.resume")
        if self._change(workflow, paused=False, by=by):
            self._client.written()  # a stopped worker registered no deadline for it
        return self.get(workflow)

    def _change(self, workflow: str, *, paused: bool, by: str | None) -> bool:
        """Pause or resume `workflow`'s schedule, with its audit row; False when it already
        was as asked (nothing is written)."""
        no_nul("schedules.pause" if paused else "schedules.resume", workflow=workflow)
        self._trigger(workflow)
        who = self._client.person(by)
        verb = "pause" if paused else "resume"
        self._client.services.guard.require(who, "manage_schedules", workflow, {"verb": verb})
        db, app, now = self._client.db, self._client.app_name, self._client.clock.now()
        if paused:
            change: sa.Executable = (
                db.insert(schedule_pauses)
                .values(app=app, workflow=workflow, paused_at=now, paused_by=who)
                .on_conflict_do_nothing(index_elements=["app", "workflow"])
                .returning(schedule_pauses.c.workflow)
            )
        else:
            change = (
                schedule_pauses.delete()
                .where(schedule_pauses.c.app == app, schedule_pauses.c.workflow == workflow)
                .returning(schedule_pauses.c.workflow)
            )
        with db.begin() as conn:
            # The rows it returns: an upsert's row count is not kept on every driver.
            changed = count(conn.execute(change)) > 0
            if changed:
                audit_row(
                    conn,
                    at=now,
                    actor=who,
                    action="schedule.paused" if paused else "schedule.resumed",
                    target=TARGET.format(workflow=workflow),
                    meta={},
                )
        return changed

    def _declared(self) -> dict[str, Schedule]:
        return {
            name: wf.trigger
            for name, wf in self._client.app.workflows.items()
            if wf.trigger is not None
        }

    def _trigger(self, workflow: str) -> Schedule:
        declared = self._declared()
        if workflow not in declared:
            known = ", ".join(sorted(declared)) or "none"
            what = "has no schedule" if workflow in self._client.app.workflows else "is no workflow"
            raise UnknownWorkflow(
                f"`{workflow}` {what} of app `{self._client.app_name}` (its scheduled "
                f"workflows: {known}): `remit schedules` lists them"
            )
        return declared[workflow]


def _state(name: str, trigger: Schedule, row: Any, pause: Any, now: datetime) -> ScheduleState:
    """A schedule's state from its declaration, its row (None: never swept) and its pause."""
    next_at = None
    if pause is None:
        # The row's next instant while it is the declared schedule's; else the next one of
        # the declaration, which the next sweep takes over from.
        same = row is not None and (row.cron, row.tz) == (trigger.cron, trigger.tz)
        next_at = row.next_at if same else trigger.next_after(now)
    return ScheduleState(
        workflow=name,
        cron=trigger.cron,
        tz=trigger.tz,
        backfill=trigger.backfill,
        next_at=next_at,
        last_fired_at=None if row is None else row.last_fired_at,
        paused=pause is not None,
        paused_at=None if pause is None else pause.paused_at,
        paused_by=None if pause is None else pause.paused_by,
    )

"""The routes of the app's schedules: `GET /schedules` lists each scheduled workflow, paused or
not (`read_operations`); `POST /schedules/{workflow}/pause` and `.../resume` pause and resume
one (`manage_schedules` on the workflow), as `client.schedules` does (see `ops/schedules.py`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from remit.client import Client
from remit.ops.schedules import ScheduleState
from remit.reads import Reader
from remit.serve.errors import error_responses
from remit.serve.params import NUL_FREE
from remit.serve.requests import Who

ScheduledWorkflow = Annotated[
    str,
    Path(max_length=200, json_schema_extra=NUL_FREE, description="The scheduled workflow's name."),
]


class ScheduleView(BaseModel):
    """A scheduled workflow: its schedule, when it fires next, and whether it is paused."""

    workflow: str
    cron: str = Field(description="The cron expression, read on the wall clock of `tz`.")
    tz: str
    backfill: str = Field(description="What is fired of the instants missed: none, latest, all.")
    next_at: datetime | None = Field(
        description="Its next instant (a past one fires at the next sweep); null while paused."
    )
    last_fired_at: datetime | None = Field(description="The latest instant that has a run.")
    paused: bool
    paused_at: datetime | None
    paused_by: str | None

    @classmethod
    def of(cls, state: ScheduleState) -> ScheduleView:
        return cls.model_validate(state, from_attributes=True)


def schedule_routes(routes: APIRouter, client: Client) -> None:
    """`GET /schedules`, `POST /schedules/{workflow}/pause` and `.../resume`."""

    @routes.get("/schedules", responses=error_responses(401, 403, 422, 503))
    def list_schedules(who: Who) -> list[ScheduleView]:
        """The app's scheduled workflows, by name: each one's schedule, next instant, latest
        run's instant, and whether it is paused (`read_operations`)."""
        Reader(client, who).require_operations()
        return [ScheduleView.of(each) for each in client.schedules.list()]

    @routes.post(
        "/schedules/{workflow}/pause", responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def pause(workflow: ScheduledWorkflow, who: Who) -> ScheduleView:
        """Pause a schedule, as the policies allow (`manage_schedules` on the workflow): it
        fires nothing until resumed. Pausing a paused one changes nothing. A workflow with no
        schedule is 404."""
        return ScheduleView.of(client.schedules.pause(workflow, by=who))

    @routes.post(
        "/schedules/{workflow}/resume", responses=error_responses(400, 401, 403, 404, 413, 422, 503)
    )
    def resume(workflow: ScheduledWorkflow, who: Who) -> ScheduleView:
        """Resume a schedule, as the policies allow (`manage_schedules` on the workflow): the
        instants it missed while paused are fired or skipped as its backfill says."""
        return ScheduleView.of(client.schedules.resume(workflow, by=who))

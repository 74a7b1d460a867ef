"""An app whose data files declare a wakeup of a host vendor's own (`clockhost.alarm`): its
worker stops when idle with no flag, and registers its next deadline through
`clockhost.alarms.register`. `hourly` gives it a deadline to register."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from remit import App, Context, schedule, workflow

from .clock import clockhost


class Tick(BaseModel):
    scheduled_at: datetime


@workflow(name="hourly", input=Tick, trigger=schedule("0 * * * *"))
def hourly(ctx: Context, input: Tick) -> str:
    return input.scheduled_at.isoformat()


app = App(name="alarmed", workflows=[hourly], connectors=[clockhost])

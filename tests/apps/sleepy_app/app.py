"""An app for the scale-to-zero tests: runs that wait (a sleep, an approval's expiry, a schedule)
and then record, in a step, the moment they carried on.

With `SLEEPY_TICK` set, `tick` runs every minute. Each step that carries on writes `{run, what, at}` (a Unix time) as one line of `MOMENTS_FILE`.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime

from pydantic import BaseModel

from remit import App, ApprovalType, Context, schedule, workflow


def moment(run_id: str, what: str) -> float:
    at = time.time()
    line = json.dumps({"run": run_id, "what": what, "at": at})
    with open(os.environ["MOMENTS_FILE"], "a") as moments:
        fcntl.flock(moments, fcntl.LOCK_EX)
        moments.write(line + "\n")
    return at


class Nap(BaseModel):
    seconds: float


@workflow(name="nap", input=Nap)
def nap(ctx: Context, input: Nap) -> float:
    ctx.step("before", lambda: moment(ctx.run_id, "before"))
    ctx.sleep(input.seconds)
    return ctx.step("after", lambda: moment(ctx.run_id, "after"))


class Ask(BaseModel):
    expires_in: float


class Note(BaseModel):
    text: str = "ok"


@workflow(name="ask", input=Ask)
def ask(ctx: Context, input: Ask) -> str:
    decided = ctx.approval(
        "ok", type="note", title="ok?", draft=Note(), expires_in=input.expires_in
    )
    ctx.step("after", lambda: moment(ctx.run_id, decided.status))
    return decided.status


class Tick(BaseModel):
    scheduled_at: datetime


# Scheduled every minute only where `SLEEPY_TICK` is set, so the other tests' deadlines are
# their own.
@workflow(
    name="tick",
    input=Tick,
    trigger=schedule("* * * * *", backfill="all") if os.environ.get("SLEEPY_TICK") else None,
)
def tick(ctx: Context, input: Tick) -> str:
    ctx.step("fired", lambda: moment(ctx.run_id, input.scheduled_at.isoformat()))
    return input.scheduled_at.isoformat()


app = App(
    name="sleepy",
    workflows=[nap, ask, tick],
    approvals=[ApprovalType("note", draft=Note)],
)

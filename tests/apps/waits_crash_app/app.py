"""An app for the tests that kill workers around waits: a run that takes messages, and a parent
of many child runs whose each child posts one entry to a fake ledger.

As in the crash app, the fake journals every applied effect to `CRASH_JOURNAL`, so the record
outlives a killed worker; `<CRASH_HOLD_DIR>/hold-<point>` makes a worker that reaches `point`
write `reached-<point>` there and wait to be killed; `CRASH_JITTER_MS` puts a random pause
before each post, for a kill to land in.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from remit import (
    App,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    Op,
    implements,
    op,
    workflow,
)


def hold(point: str) -> None:
    """Wait here to be killed if `hold-<point>` exists (see the module's docstring)."""
    folder = os.environ.get("CRASH_HOLD_DIR")
    if not folder or not (Path(folder) / f"hold-{point}").exists():
        return
    (Path(folder) / f"reached-{point}").write_text(str(os.getpid()))
    while (Path(folder) / f"hold-{point}").exists():
        time.sleep(0.05)


class EntryIn(BaseModel):
    line: int


class Entry(BaseModel):
    entry_id: str


post_entry = op("books.entries.post", effect="write", idempotent=True, input=EntryIn, output=Entry)


class BooksDriver(Driver):
    @implements(post_entry)
    def post(self, input: EntryIn, call: CallContext) -> Entry:
        raise DriverError("no live books in tests", retryable=False)


class FakeBooks(Fake):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(journal=os.environ.get("CRASH_JOURNAL"), **kwargs)

    def invoke(self, op: Op[Any, Any], input: BaseModel, call: CallContext) -> BaseModel:
        # The pause comes before the fake takes its journal's lock, which one write at a time
        # holds across every process: the calls are in flight together.
        most = float(os.environ.get("CRASH_JITTER_MS", "0"))
        time.sleep(random.random() * most / 1000)
        return super().invoke(op, input, call)

    @implements(post_entry)
    def post(self, input: EntryIn, call: CallContext) -> Entry:
        return Entry(entry_id=f"en_{call.idempotency_key}")


books = Connector("books", ops=[post_entry], driver=BooksDriver, fake=FakeBooks)


class Collect(BaseModel):
    count: int = 2
    topic: str = "item"


@workflow(name="collect", input=Collect)
def collect(ctx: Context, input: Collect) -> list[Any]:
    """Takes `count` messages on one topic, each followed by a step a test can hold."""
    taken = []
    for _ in range(input.count):
        taken.append(ctx.wait_for(input.topic))
        ctx.step("after-take", lambda: hold("after-take"))
    return taken


class Line(BaseModel):
    line: int


@workflow(name="line", input=Line, uses=[post_entry])
def line(ctx: Context, input: Line) -> dict[str, Any]:
    entry = ctx.call(post_entry, line=input.line)
    return {"line": input.line, "entry": entry.entry_id}


class Batch(BaseModel):
    lines: int = 100


@workflow(name="batch", input=Batch)
def batch(ctx: Context, input: Batch) -> dict[str, Any]:
    """Starts one child per line, then waits for them all."""
    handles = [ctx.start(line, Line(line=n), key=f"line-{n}") for n in range(input.lines)]
    ends = ctx.wait_all(handles)
    return {"lines": [end["line"] for end in ends], "entries": [end["entry"] for end in ends]}


# Later versions of `collect`, for the deploy check: `WAITS_VARIANT` picks the code.


@workflow(name="collect", input=Collect)
def collect_waits_first(ctx: Context, input: Collect) -> list[Any]:
    """Variant `waits-first`: a wait for another message before the first, unguarded."""
    ctx.wait_for("approved")
    taken = []
    for _ in range(input.count):
        taken.append(ctx.wait_for(input.topic))
        ctx.step("after-take", lambda: hold("after-take"))
    return taken


@workflow(name="collect", input=Collect)
def collect_starts_first(ctx: Context, input: Collect) -> list[Any]:
    """Variant `starts-first`: a child run started before the first wait, unguarded."""
    ctx.start(line, Line(line=0), key="deposit")
    taken = []
    for _ in range(input.count):
        taken.append(ctx.wait_for(input.topic))
        ctx.step("after-take", lambda: hold("after-take"))
    return taken


_VARIANTS = {"": collect, "waits-first": collect_waits_first, "starts-first": collect_starts_first}
app = App(
    name="waits-crash-app",
    workflows=[_VARIANTS[os.environ.get("WAITS_VARIANT", "")], line, batch],
    connectors=[books],
)

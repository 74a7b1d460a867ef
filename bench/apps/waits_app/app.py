"""The benchmark's app of runs that wait (bench/waits.py): `listen`, which waits for a message
and then stamps the time, and `fan-out`, which starts trivial `leaf` children and waits for
them all. No connector: nothing here calls out."""

from __future__ import annotations

import time

from pydantic import BaseModel

from remit import App, Context, Queue, workflow


class Listen(BaseModel):
    topic: str = "go"


@workflow(name="listen", input=Listen, queue="work")
def listen(ctx: Context, input: Listen) -> float:
    ctx.wait_for(input.topic)
    # The first step after the wait: its stamp (CLOCK_MONOTONIC, one clock for every process
    # of the machine) is where bench/waits.py stops the clock.
    heard: float = ctx.step("heard", time.monotonic)
    return heard


class Leaf(BaseModel):
    n: int


@workflow(name="leaf", input=Leaf, queue="children")
def leaf(ctx: Context, input: Leaf) -> int:
    n: int = ctx.step("leaf", lambda: input.n)
    return n


class FanOut(BaseModel):
    children: int


@workflow(name="fan-out", input=FanOut, queue="work")
def fan_out(ctx: Context, input: FanOut) -> int:
    handles = [ctx.start(leaf, Leaf(n=n)) for n in range(input.children)]
    ends: list[int] = ctx.wait_all(handles)
    return sum(ends)


app = App(
    name="bench-waits",
    workflows=[listen, leaf, fan_out],
    queues=[Queue("work", worker_concurrency=16), Queue("children", worker_concurrency=16)],
)

"""An app for the queue-limit test: each run records when its work started and ended.

Every run appends one line `{run, pid, start, end}` to the file `SPANS_FILE`, from inside a
step that takes `SPAN_SECONDS`.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

from pydantic import BaseModel

from remit import App, Context, Queue, workflow


class SpanInput(BaseModel):
    n: int


def record_span(run_id: str) -> None:
    start = time.time()
    time.sleep(float(os.environ.get("SPAN_SECONDS", "0.02")))
    line = json.dumps({"run": run_id, "pid": os.getpid(), "start": start, "end": time.time()})
    with open(os.environ["SPANS_FILE"], "a") as spans:
        fcntl.flock(spans, fcntl.LOCK_EX)
        spans.write(line + "\n")


@workflow(name="span", input=SpanInput, queue="limited")
def span(ctx: Context, input: SpanInput) -> int:
    ctx.step("work", lambda: record_span(ctx.run_id))
    return input.n


app = App(
    name="queue-app",
    workflows=[span],
    queues=[Queue("limited", concurrency=4, worker_concurrency=2)],
)

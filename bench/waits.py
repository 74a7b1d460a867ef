"""Runs that wait, against bare DBOS, on SQLite and Postgres: a message's resume, and a parent
that starts 100 children and waits for them all.

    .venv/bin/python bench/waits.py [--quick | --smoke] [--write]    # `make bench` runs it too
    .venv/bin/python bench/bench.py --only waits [--quick | --smoke] [--write]

Each side has a fresh database of its own and one worker process serving it, both up for the
whole run: remit's is a `remit worker` on bench/apps/waits_app (every setting at its default:
queues polled every 0.1 s, on Postgres woken at once by a fork's `NOTIFY`); bare DBOS's is a
DBOS process configured as a remit worker configures DBOS (bench/bare.py: JSON serialization,
64 threads, queues polled every 0.1 s, and its notification listener polling every 0.1 s on
SQLite, as a remit worker sets it). This process starts the runs and sends the messages, as a
web hook or the command line would, through `remit.Client` and `DBOSClient`. The two sides
take turns run by run, each going first in every other pair, so that what else the machine
does falls on both alike.

Message resume: runs of `listen` (`ctx.wait_for("go")`, then a step `heard` returning
`time.monotonic()`) are started eight at a time and brought to `waiting`; then each is sent a
message with `client.send`, one at a time, each after a random 0 to 100 ms (not timed, so that
sends fall at random points of the workers' 0.1 s polls), and timed from `send` returning to the
stamp of `heard`, read from the run's output once it is done (CLOCK_MONOTONIC is one clock for
every process of the machine, so the stamp is exact, and the 5 ms poll for the output is not in
the time). Bare DBOS: workflows that `DBOS.recv("go")` then run a step returning the same stamp,
brought to their `recv` (its timeout's `DBOS.sleep` checkpointed: the listener is registered),
sent `DBOSClient.send`, timed the same way. The first five of each are not counted. The time
`send` itself takes is reported beside: remit's send is a transaction that keeps the message
and moves the run on, then forks the run's next attempt; DBOS's inserts a notification.

Children: a `fan-out` run starts 100 `leaf` children (`ctx.start`, each one step) and waits for
them all (`ctx.wait_all`); timed from `client.runs.start` called to this process seeing the
parent `done` (polled every 5 ms). Bare DBOS: a parent workflow enqueues 100 one-step child
workflows (`DBOS.enqueue_workflow`) and waits for each `handle.get_result()` (polled every
0.1 s, the workers' poll; DBOS's default is 1 s); timed from `DBOSClient.enqueue` called to its
result. Parents run on one queue and children on another, each bounded at 16 at a time per
worker, on both sides. The first parent of each side is not counted.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import bare  # bench/bare.py, beside this file
import sqlalchemy as sa
from approvals import WorkerProcess, percentile  # bench/approvals.py, beside this file
from common import (
    ROOT,
    Figure,
    Process,
    Size,
    Unsupported,
    deadline,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    wait_until,
    write_section,
)
from dbos import DBOS, DBOSClient, WorkflowHandle

from remit.core.database import Database
from remit.core.schema import runs

if TYPE_CHECKING:
    from remit import Client

APP = ROOT / "bench" / "apps" / "waits_app"
TOPIC = "go"
POLL = 0.1  # seconds between the workers' queue polls, both sides (remit's default)
RESULT_POLL = 0.005  # seconds between this process's reads of a run's end
JITTER = 0.1  # seconds, at most, before each send
BATCH = 8  # runs brought to their wait at once (bare DBOS holds a thread and a slot for each)
WARMUP = 5  # sends of each side not counted
CHILDREN = 100
SMOKE_CHILDREN = 10  # at smoke size: `children_10_*`
RECV_TIMEOUT = 600.0  # seconds a bare DBOS workflow waits in `recv`
SERVING_TIMEOUT = 120.0  # seconds, at most, for a worker to start serving
DONE_TIMEOUT = 120.0  # seconds, at most, for a run to reach its wait, or to end

# The bare DBOS side: its application, queues and workflows, served by `serve_bare`.
BARE_APP = "bench-bare-waits"
BARE_QUEUE = "bare-waits"
BARE_CHILDREN = "bare-children"
BARE_LISTEN = "bare-listen"
BARE_FAN_OUT = "bare-fan-out"
BARE_LEAF = "bare-leaf"
# Its worker, imported after `common` (see its MOVED), so that it runs on an older remit too.
BARE_WORKER = (
    f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
    "import common, waits; waits.serve_bare(sys.argv[1])"
)

RUN = sa.select(runs.c.status, runs.c.output)

T = TypeVar("T")
Report = Callable[[str, float, str, str], None]  # prints a figure's `BENCH` line and keeps it


def register_bare() -> None:
    """Register the bare DBOS workflows with the DBOS instance being set up (before launch)."""

    @DBOS.workflow(name=BARE_LISTEN)
    def bare_listen(topic: str) -> float:
        DBOS.recv(topic, timeout_seconds=RECV_TIMEOUT)
        heard: float = DBOS.run_step({"name": "heard"}, time.monotonic)
        return heard

    @DBOS.workflow(name=BARE_LEAF)
    def bare_leaf(n: int) -> int:
        done: int = DBOS.run_step({"name": "leaf"}, lambda: n)
        return done

    @DBOS.workflow(name=BARE_FAN_OUT)
    def bare_fan_out(count: int) -> int:
        handles = [DBOS.enqueue_workflow(BARE_CHILDREN, bare_leaf, n) for n in range(count)]
        return sum(handle.get_result(polling_interval_sec=POLL) for handle in handles)


def serve_bare(url: str) -> None:
    """The bare DBOS worker: serve the parents' queue and the children's until SIGTERM."""
    bare.serve(
        url,
        poll=POLL,
        app=BARE_APP,
        queues=(BARE_QUEUE, BARE_CHILDREN),
        workflows=register_bare,
        notification_poll=POLL,
    )


@dataclass
class Sides:
    """Both sides, serving: each its database, its worker, and this process's client of it."""

    remit_db: Database
    remit: Client
    remit_worker: WorkerProcess
    bare_db: Database
    bare: DBOSClient
    bare_worker: Process

    def remit_end(self, conn: sa.Connection, run_id: str) -> Any:
        """The output of the run `run_id` once it is done, read every RESULT_POLL seconds."""

        def ended() -> tuple[Any] | None:
            row = conn.execute(RUN.where(runs.c.run_id == run_id)).one()
            conn.commit()  # the next read sees what committed since
            if row.status in ("failed", "cancelled"):
                raise RuntimeError(f"run {run_id} ended {row.status}")
            return (row.output,) if row.status == "done" else None

        return wait_until(
            ended,
            timeout=DONE_TIMEOUT,
            what=f"run {run_id} to be done",
            state=lambda: f"{self.remit_worker.name}'s last output:\n{self.remit_worker.tail()}",
            every=RESULT_POLL,
        )[0]

    def bare_end(self, handle: WorkflowHandle[T], what: str) -> T:
        with deadline(DONE_TIMEOUT, what):
            return handle.get_result(polling_interval_sec=RESULT_POLL)


@contextmanager
def serving(kind: str, folder: Path) -> Iterator[Sides]:
    """A fresh database of `kind` for each side, its worker serving it, and a client of it;
    all stopped and dropped afterwards."""
    from remit import Client

    made: list[Callable[[], None]] = []  # what to undo, last first
    try:
        remit_url = fresh_database(kind, folder)
        made.append(lambda: drop_database(remit_url))
        remit_db = Database(remit_url)
        made.append(remit_db.dispose)
        remit_db.prepare()
        remit_worker = WorkerProcess(remit_url, app=APP)
        made.append(remit_worker.stop)
        remit = Client.connect(APP, remit_url, by="user:bench", environ={})
        made.append(remit.close)

        bare_url = fresh_database(kind, folder)
        made.append(lambda: drop_database(bare_url))
        bare_db = Database(bare_url)
        made.append(bare_db.dispose)
        bare_db.prepare()
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
        bare_worker = Process(
            "the bare DBOS worker", [sys.executable, "-c", BARE_WORKER, bare_url], env=env
        )
        made.append(bare_worker.stop)
        bare_worker.wait_for_line("serving", timeout=SERVING_TIMEOUT)
        bare_client = bare.client(bare_db, BARE_APP)
        made.append(bare_client.destroy)
        yield Sides(remit_db, remit, remit_worker, bare_db, bare_client, bare_worker)
    finally:
        _undo(made)


def _undo(made: list[Callable[[], None]]) -> None:
    """Call each of `made`, last first, each even if one before it raised; then raise the
    first error, if any."""
    failed: BaseException | None = None
    for undo in reversed(made):
        try:
            undo()
        except BaseException as error:
            failed = failed or error
    if failed is not None:
        raise failed


def _waiting(sides: Sides, run_ids: list[str]) -> None:
    """Wait for each of `run_ids` to be `waiting`."""

    def count() -> int:
        with sides.remit_db.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(runs)
                    .where(runs.c.run_id.in_(run_ids), runs.c.status == "waiting")
                ).scalar_one()
            )

    wait_until(
        lambda: count() == len(run_ids),
        timeout=DONE_TIMEOUT,
        what=f"{len(run_ids)} runs of `listen` waiting",
        state=lambda: f"{count()} waiting; the worker's last output:\n{sides.remit_worker.tail()}",
    )


def _receiving(sides: Sides, workflow_ids: list[str]) -> None:
    """Wait for each of the bare workflows `workflow_ids` to wait in its `recv`: its timeout's
    sleep is checkpointed after the listener is registered."""

    def receiving(workflow_id: str) -> bool:
        steps = sides.bare.list_workflow_steps(workflow_id, load_output=False)
        return any(step["function_name"] == "DBOS.sleep" for step in steps)

    wait_until(
        lambda: all(receiving(workflow_id) for workflow_id in workflow_ids),
        timeout=DONE_TIMEOUT,
        what=f"{len(workflow_ids)} bare workflows waiting in `recv`",
        state=lambda: f"the bare worker's last output:\n{sides.bare_worker.tail()}",
    )


@dataclass
class Resumes:
    """Seconds from a send returning to the step after the wait, and in the send itself, by
    side."""

    remit: list[float]
    bare: list[float]
    remit_send: list[float]
    bare_send: list[float]


def message_resume(
    sides: Sides, sends: int, *, warmup: int = WARMUP, jitter_s: float = JITTER
) -> Resumes:
    """`sends` messages to waiting runs on each side (after `warmup` more), one at a time."""
    found = Resumes([], [], [], [])
    jitter = random.Random(7)
    with sides.remit_db.engine.connect() as conn:
        total, n = sends + warmup, 0
        while n < total:
            batch = min(BATCH, total - n)
            run_ids = [sides.remit.runs.start("listen", {}).run_id for _ in range(batch)]
            handles: list[WorkflowHandle[float]] = [
                sides.bare.enqueue({"workflow_name": BARE_LISTEN, "queue_name": BARE_QUEUE}, TOPIC)
                for _ in range(batch)
            ]
            _waiting(sides, run_ids)
            _receiving(sides, [handle.workflow_id for handle in handles])
            for run_id, handle in zip(run_ids, handles, strict=True):
                pair = [
                    (found.remit, found.remit_send, partial(_remit_one, sides, conn, run_id, n)),
                    (found.bare, found.bare_send, partial(_bare_one, sides, handle, n)),
                ]
                # Each side goes first in every other pair: neither gains from following.
                for resumes, sends_took, one in pair if n % 2 == 0 else pair[::-1]:
                    time.sleep(jitter.uniform(0, jitter_s))
                    resumed, send_took = one()
                    if n >= warmup:
                        resumes.append(resumed)
                        sends_took.append(send_took)
                n += 1
    return found


def _remit_one(sides: Sides, conn: sa.Connection, run_id: str, n: int) -> tuple[float, float]:
    """Send message `n` to the waiting run `run_id`: seconds from the send returning to the
    step after the wait, and in the send."""
    began = time.monotonic()
    sent = sides.remit.send(run_id, TOPIC, {"n": n})
    returned = time.monotonic()
    assert sent.resumed_workflow_id is not None, f"run {run_id} was not moved on by its message"
    heard = float(sides.remit_end(conn, run_id))
    return heard - returned, returned - began


def _bare_one(sides: Sides, handle: WorkflowHandle[float], n: int) -> tuple[float, float]:
    """The same for the bare workflow of `handle`, waiting in its `recv`."""
    began = time.monotonic()
    sides.bare.send(handle.workflow_id, {"n": n}, TOPIC)
    returned = time.monotonic()
    heard = float(sides.bare_end(handle, f"bare workflow {handle.workflow_id}"))
    return heard - returned, returned - began


def children(
    sides: Sides, parents: int, count: int, *, warmup: int = 1
) -> tuple[list[float], list[float]]:
    """Seconds from start to done of `parents` parents of `count` children each (after
    `warmup` more), one at a time: (remit, bare DBOS)."""
    took: tuple[list[float], list[float]] = ([], [])
    with sides.remit_db.engine.connect() as conn:
        for i in range(parents + warmup):
            pair = [
                (took[0], partial(_remit_parent, sides, conn, count)),
                (took[1], partial(_bare_parent, sides, count)),
            ]
            # Each side goes first in every other round.
            for times, one in pair if i % 2 == 0 else pair[::-1]:
                seconds = one()
                if i >= warmup:
                    times.append(seconds)
    return took


def _remit_parent(sides: Sides, conn: sa.Connection, count: int) -> float:
    """Seconds from the start of a `fan-out` of `count` children to its end."""
    began = time.monotonic()
    run_id = sides.remit.runs.start("fan-out", {"children": count}).run_id
    output = sides.remit_end(conn, run_id)
    ended = time.monotonic()
    assert output == sum(range(count)), f"run {run_id} returned {output}"
    return ended - began


def _bare_parent(sides: Sides, count: int) -> float:
    """The same for a bare DBOS parent."""
    began = time.monotonic()
    handle: WorkflowHandle[int] = sides.bare.enqueue(
        {"workflow_name": BARE_FAN_OUT, "queue_name": BARE_QUEUE}, count
    )
    output = sides.bare_end(handle, f"bare parent {handle.workflow_id}")
    ended = time.monotonic()
    assert output == sum(range(count)), f"bare parent {handle.workflow_id} returned {output}"
    return ended - began


def _reporter(figures: list[Figure]) -> Report:
    """What prints a figure's `BENCH` line and adds it to `figures`."""

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    return report


def _has_waits() -> None:
    """Refuse, naming it, a remit older than `ctx.wait_for` (bench/compare.py measures one)."""
    from remit import Context

    if not hasattr(Context, "wait_for"):
        raise Unsupported("this remit has no ctx.wait_for, ctx.start or ctx.wait_all")


def _messages(sides: Sides, db: str, size: Size, report: Report) -> None:
    """Message resume on `sides`' databases (`db`): measure it and report its figures."""
    sends = size.pick(smoke=3, quick=60, full=200)
    found = message_resume(
        sides,
        sends,
        warmup=size.pick(smoke=1, quick=WARMUP, full=WARMUP),
        jitter_s=size.pick(smoke=0.01, quick=JITTER, full=JITTER),
    )
    smaller = size.pick(smoke=" (smoke size; full 200)", quick=" (quick size; full 200)", full="")
    remit_p50 = percentile(found.remit, 50) * 1000
    bare_p50 = percentile(found.bare, 50) * 1000
    report(
        f"message_resume_p50_ms_{db}",
        remit_p50,
        "ms",
        "remit: `client.send` returned → the step after `ctx.wait_for` ran, median of "
        f"{sends} sends{smaller}",
    )
    report(
        f"message_resume_p99_ms_{db}",
        percentile(found.remit, 99) * 1000,
        "ms",
        "the same, 99th percentile, nearest rank",
    )
    report(
        f"message_resume_bare_p50_ms_{db}",
        bare_p50,
        "ms",
        "bare DBOS: `DBOSClient.send` returned → the step after `DBOS.recv` ran, median",
    )
    report(
        f"message_resume_bare_p99_ms_{db}",
        percentile(found.bare, 99) * 1000,
        "ms",
        "the same, 99th percentile",
    )
    report(f"message_resume_ratio_{db}", remit_p50 / bare_p50, "x", "remit ÷ bare DBOS, medians")
    report(
        f"message_send_ms_{db}",
        statistics.median(found.remit_send) * 1000,
        "ms",
        "remit's `client.send` itself (its transaction, then the fork), median",
    )
    report(
        f"message_send_bare_ms_{db}",
        statistics.median(found.bare_send) * 1000,
        "ms",
        "bare DBOS's `DBOSClient.send` itself, median",
    )


def children_at(size: Size) -> int:
    """How many children a parent starts at `size` (the figures are named after it)."""
    return size.pick(smoke=SMOKE_CHILDREN, quick=CHILDREN, full=CHILDREN)


def _children(sides: Sides, db: str, size: Size, report: Report) -> None:
    """A parent and its children on `sides`' databases (`db`): measure it and report its
    figures."""
    parents = size.pick(smoke=1, quick=3, full=7)
    count = children_at(size)
    remit_s, bare_s = children(sides, parents, count, warmup=size.pick(smoke=0, quick=1, full=1))
    remit_ms = statistics.median(remit_s) * 1000
    bare_ms = statistics.median(bare_s) * 1000
    report(
        f"children_{count}_ms_{db}",
        remit_ms,
        "ms",
        f"remit: a parent starting {count} one-step children and waiting for them all, "
        f"start → done, median of {parents} parents",
    )
    report(
        f"children_{count}_bare_ms_{db}",
        bare_ms,
        "ms",
        f"bare DBOS: a parent enqueuing {count} one-step children and getting their results, "
        "the same",
    )
    report(f"children_{count}_ratio_{db}", remit_ms / bare_ms, "x", "remit ÷ bare DBOS")


def _measure(
    size: Size, folder: Path, parts: tuple[Callable[[Sides, str, Size, Report], None], ...]
) -> list[Figure]:
    """`parts` on SQLite, then on Postgres, each database's sides served once for them all;
    their figures, part by part."""
    _has_waits()
    figures: list[list[Figure]] = [[] for _ in parts]
    for kind, db in (("sqlite", "sqlite"), ("postgres", "pg")):
        with serving(kind, folder) as sides:
            for part, found in zip(parts, figures, strict=True):
                part(sides, db, size, _reporter(found))
    return [figure for found in figures for figure in found]


def measure_messages(*, size: Size, folder: Path) -> list[Figure]:
    """Message resume on SQLite and Postgres: print `BENCH` lines and return the figures
    (bench/compare.py measures this alone)."""
    return _measure(size, folder, (_messages,))


def measure_children(*, size: Size, folder: Path) -> list[Figure]:
    """A parent and its children on SQLite and Postgres: print `BENCH` lines and return the
    figures (bench/compare.py measures this alone)."""
    return _measure(size, folder, (_children,))


def measure(*, size: Size, folder: Path) -> list[Figure]:
    """Both measures; print `BENCH` lines and return the figures."""
    return _measure(size, folder, (_messages, _children))


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Each side has a "
        "fresh database and one worker process of its own: a `remit worker` with default "
        f"settings (queues polled every {POLL:g} s; on Postgres a fork's `NOTIFY` wakes it at "
        "once) on bench/apps/waits_app, and a bare DBOS process configured as a remit worker "
        "configures DBOS (its notification listener, which `recv` waits on on SQLite, polls "
        f"every {POLL:g} s too). The benchmark's own process starts the runs and sends the "
        "messages, through `remit.Client` and `DBOSClient`; the sides take turns, run by run.",
        "",
        'Message resume: runs of `listen` are brought to `ctx.wait_for("go")` eight at a time, '
        f"then sent a message one at a time, each after a random 0 to {JITTER * 1000:.0f} ms, "
        "and timed from `client.send` returning to the stamp (`time.monotonic()`, one clock for "
        "every process of the machine) the step after the wait returns, read from the run's "
        'output once it is done. Bare DBOS: a workflow waiting in `DBOS.recv("go")`, sent '
        f"`DBOSClient.send`, timed the same way. The first {WARMUP} of each side are not "
        "counted. remit's send is a transaction that keeps the message and moves the run to its "
        "next attempt, then the fork of that attempt from the wait's step; the worker dequeues "
        "the fork and runs the wait's step again, which takes the message.",
        "",
        f"Children: a parent starts {CHILDREN} one-step children (`ctx.start`) and waits for "
        "them all (`ctx.wait_all`), timed from `client.runs.start` to the parent seen `done` "
        f"(polled every {RESULT_POLL * 1000:.0f} ms). Bare DBOS: a parent workflow enqueues "
        f"{CHILDREN} one-step child workflows on a queue (`DBOS.enqueue_workflow`) and calls "
        f"each one's `get_result()` (polling every {POLL:g} s; DBOS's default is 1 s), timed "
        "from `DBOSClient.enqueue` to its result. Parents and children are on two queues, 16 at "
        "a time each per worker, on both sides. The first parent of each side is not counted.",
        "",
        *figure_table(figures),
    ]
    write_section("Runs that wait: a message's resume, and 100 children", "\n".join(lines))


def main() -> None:
    run_alone(
        "waits.py",
        measure,
        write,
        quick_help="60 sends and 3 parents instead of 200 and 7",
        smoke_help="3 sends and 1 parent of 10 children: only that it runs",
    )


if __name__ == "__main__":
    main()

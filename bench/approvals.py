"""Approvals on Postgres: how long from `decide()` to a run past its gate, and what waiting
runs cost a worker.

    .venv/bin/python bench/approvals.py [--quick | --smoke] [--write]    # `make bench` runs it too

Every worker here is a separate `remit worker` process on the bench app's `payout` workflow
(fakes, every other setting at its default: queues polled every 0.1 s), and this process is the
decider, as the CLI or the web console would be.

Decide to resume: runs of `payout` are started and a worker brings them all to `waiting`. Then
this process decides them one at a time with `Approvals.decide()`, and times each from the call
to the moment it sees, in DBOS's step table, the checkpoint of `passed`: the workflow's first
step after the gate, so the fork, the worker's pickup from the queue and the gate's step are
all inside the time. It polls for the checkpoint every 2 ms, so a time is late by at most that
and one query. Each run is left to finish before the next decision, and each decision waits a
random 0 to 250 ms first (not timed), so that decisions fall at random points of the worker's
poll cycle rather than in step with it. The first five decisions warm up and are not counted.

What waiting runs cost: a fresh worker's resident memory (VmRSS) and thread count from
/proc/<pid>/status, on a database with no runs and on one with 1,000 runs waiting at their gate,
each read after the worker has settled (a heartbeat and a sweep in). The worker that brought the
1,000 runs to `waiting` is read too, after it has settled: what serving them left behind.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import sqlalchemy as sa
from common import (
    ROOT,
    Process,
    Size,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    run_store,
    wait_until,
    write_section,
)

from remit.app import load_app
from remit.core.database import Database
from remit.core.schema import runs
from remit.people.approvals import Approvals

APP = ROOT / "bench" / "apps" / "bench_app"
WORKFLOW = "payout"
WARMUP = 5
RESULT_POLL = 0.002
JITTER = 0.25  # seconds, at most, before each decision
SETTLE = 6.0  # past the first heartbeat (5 s) and the first sweep after start (5 s)
WAITING = 1000
SERVING_TIMEOUT = 120.0  # seconds, at most, for a worker to start serving
DECIDED_TIMEOUT = 60.0  # seconds, at most, for a decided run to pass its gate, and to finish

Figure = tuple[str, float, str, str]

PASSED = sa.text(
    "SELECT 1 FROM dbos.operation_outputs WHERE workflow_uuid = :workflow_id "
    "AND function_name = 'passed'"
)
STATUS = sa.text("SELECT status FROM remit_runs WHERE run_id = :run_id")


class WorkerProcess(Process):
    """A `remit worker` subprocess on the bench app (or `app`) with fakes and otherwise default
    settings, serving once made."""

    def __init__(self, url: str, *, app: Path = APP) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
        env |= {"REMIT_DATABASE_URL": url, "REMIT_FAKES": "1"}
        command = [sys.executable, "-m", "remit", "--app", str(app), "worker"]
        super().__init__(f"{app.name}'s `remit worker`", command, env=env)
        try:
            self.wait_for_line("serving", timeout=SERVING_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def status(self) -> tuple[float, int]:
        """(resident memory in MB, threads), from /proc/<pid>/status."""
        fields = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
        )
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])

    def settled(self, settle: float = SETTLE, reads: int = 5) -> tuple[float, int]:
        """`status()` after `settle` seconds idle: the median of `reads` reads, half a second
        apart."""
        time.sleep(settle)
        read = [self.status()]
        for _ in range(reads - 1):
            time.sleep(0.5)
            read.append(self.status())
        return statistics.median(r[0] for r in read), int(statistics.median(r[1] for r in read))


@contextmanager
def database(folder: Path) -> Iterator[tuple[Database, str]]:
    """A fresh Postgres database prepared for remit, and its URL; dropped afterwards."""
    url = fresh_database("postgres", folder)
    db = Database(url)
    try:
        db.prepare()
        yield db, url
    finally:
        db.dispose()
        drop_database(url)


def start_runs(db: Database, count: int) -> list[str]:
    """Start `count` runs of `payout`, as `remit start` does; returns their run ids."""
    app = load_app(APP)
    client = db.client(app.name)
    store = run_store(db, app.name)
    try:
        wf = app.workflow(WORKFLOW)
        return [
            store.start(client, wf, {"item": f"item-{i}"}, started_by="bench").run_id
            for i in range(count)
        ]
    finally:
        client.destroy()


def count_waiting(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(runs).where(runs.c.status == "waiting")
            ).scalar_one()
        )


def wait_waiting(db: Database, worker: WorkerProcess, count: int) -> None:
    """Wait for `count` runs to wait at their gate, `worker` serving them (at most a minute and
    a fifth of a second a run)."""
    wait_until(
        lambda: count_waiting(db) == count,
        timeout=60 + count / 5,
        what=f"{count} runs waiting at their gate",
        state=lambda: f"{count_waiting(db)} waiting; {worker.name}'s last output:\n{worker.tail()}",
    )


def decide_resume(
    decisions: int, folder: Path, warmup: int = WARMUP, jitter_s: float = JITTER
) -> tuple[list[float], list[float]]:
    """Seconds from `decide()` to the checkpoint of the step after the gate, and seconds in
    `decide()` itself, for each of `decisions` decisions after `warmup` more, each made a
    random 0 to `jitter_s` seconds after the last run finished."""
    with database(folder) as (db, url):
        total = decisions + warmup
        run_ids = start_runs(db, total)
        worker = WorkerProcess(url)
        app = load_app(APP)
        client = db.client(app.name)
        deciding = Approvals(db, client, app.approval_types)
        try:
            wait_waiting(db, worker, total)
            gate = {a.run_id: a.id for a in deciding.list(status="pending", limit=total)}
            jitter = random.Random(7)
            to_pass: list[float] = []
            in_decide: list[float] = []
            with db.engine.connect() as conn:
                for i, run_id in enumerate(run_ids):
                    time.sleep(jitter.uniform(0, jitter_s))
                    began = time.perf_counter()
                    result = deciding.decide(
                        gate[run_id],
                        "approved",
                        by="user:bench",
                        via="bench",
                        decision_key=f"bench:{gate[run_id]}",
                    )
                    returned = time.perf_counter()
                    attempt = result.decided[0].resumed_workflow_id
                    assert attempt is not None, f"run {run_id} was not resumed"
                    wait_until(
                        partial(_shows, conn, PASSED, 1, workflow_id=attempt),
                        timeout=DECIDED_TIMEOUT,
                        what=f"run {run_id}, approved, to checkpoint `passed` (attempt {attempt})",
                        state=lambda: f"{worker.name}'s last output:\n{worker.tail()}",
                        every=RESULT_POLL,
                    )
                    passed = time.perf_counter()
                    conn.commit()
                    wait_until(
                        partial(_shows, conn, STATUS, "done", run_id=run_id),
                        timeout=DECIDED_TIMEOUT,
                        what=f"run {run_id}, past its gate, to be done",
                        state=lambda: f"{worker.name}'s last output:\n{worker.tail()}",
                        every=0.01,
                    )
                    conn.commit()
                    if i >= warmup:
                        to_pass.append(passed - began)
                        in_decide.append(returned - began)
        finally:
            worker.stop()
            client.destroy()
    return to_pass, in_decide


def _shows(conn: sa.Connection, query: sa.TextClause, want: object, **values: str) -> bool:
    """Whether the first column of `query`'s first row is `want`. If not, its transaction is
    ended, so that the next read sees what committed since."""
    if conn.execute(query, values).scalar() == want:
        return True
    conn.commit()
    return False


def waiting_cost(
    folder: Path, waiting: int = WAITING, settle: float = SETTLE, reads: int = 5
) -> dict[str, tuple[float, int]]:
    """(RSS MB, threads) of: a fresh worker with no runs (`empty`), a fresh worker with
    `waiting` runs at their gate (`waiting`), and the worker that brought them there
    (`served`); each read `settle` seconds after it began serving, `reads` times."""
    found: dict[str, tuple[float, int]] = {}
    with database(folder) as (_, url):
        worker = WorkerProcess(url)
        try:
            found["empty"] = worker.settled(settle, reads)
        finally:
            worker.stop()
    with database(folder) as (db, url):
        start_runs(db, waiting)
        worker = WorkerProcess(url)
        try:
            wait_waiting(db, worker, waiting)
            found["served"] = worker.settled(settle, reads)
        finally:
            worker.stop()
        worker = WorkerProcess(url)
        try:
            found["waiting"] = worker.settled(settle, reads)
            assert count_waiting(db) == waiting, "a waiting run moved while the worker idled"
        finally:
            worker.stop()
    return found


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile: the smallest value with at least p % of values at or below."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * p / 100)) - 1]


def _reporter(figures: list[Figure]) -> Callable[[str, float, str, str], None]:
    """What prints a figure's `BENCH` line and adds it to `figures`."""

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    return report


def measure_decide(*, size: Size, folder: Path) -> list[Figure]:
    """Decide to resume: print its `BENCH` lines and return its figures (bench/compare.py
    measures this alone)."""
    decisions = size.pick(smoke=3, quick=60, full=200)
    figures: list[Figure] = []
    report = _reporter(figures)
    to_pass, in_decide = decide_resume(
        decisions,
        folder,
        warmup=size.pick(smoke=1, quick=WARMUP, full=WARMUP),
        jitter_s=size.pick(smoke=0.02, quick=JITTER, full=JITTER),
    )
    smaller = size.pick(
        smoke=" (smoke size; full size 200)", quick=" (quick size; full size 200)", full=""
    )
    what = f"{decisions} decisions{smaller} one at a time, worker in its own process"
    report(
        "decide_resume_p50_ms",
        percentile(to_pass, 50) * 1000,
        "ms",
        f"`decide()` called → step after the gate checkpointed, median of {what} (goal ≤ 150)",
    )
    report(
        "decide_resume_p99_ms",
        percentile(to_pass, 99) * 1000,
        "ms",
        "the same, 99th percentile, nearest rank (goal ≤ 1000)",
    )
    report(
        "decide_resume_max_ms",
        max(to_pass) * 1000,
        "ms",
        "the same, slowest",
    )
    report(
        "decide_call_p50_ms",
        percentile(in_decide, 50) * 1000,
        "ms",
        "of which `decide()` itself (the transaction and the fork), median",
    )
    return figures


def measure_waiting(*, size: Size, folder: Path) -> list[Figure]:
    """What waiting runs cost a worker: print its `BENCH` lines and return its figures."""
    waiting = size.pick(smoke=10, quick=WAITING, full=WAITING)
    figures: list[Figure] = []
    report = _reporter(figures)
    # At smoke size: 10 runs, read once half a second after serving (a heartbeat is 5 s).
    cost = waiting_cost(
        folder,
        waiting,
        settle=size.pick(smoke=0.5, quick=SETTLE, full=SETTLE),
        reads=size.pick(smoke=1, quick=5, full=5),
    )
    (empty_rss, empty_threads), (rss, threads) = cost["empty"], cost["waiting"]
    served_rss, served_threads = cost["served"]
    report(
        "waiting_1000_rss_mb",
        rss - empty_rss,
        "MB",
        f"fresh worker's RSS with {waiting} runs waiting ({rss:.1f}) minus with none "
        f"({empty_rss:.1f}) (goal < 20)",
    )
    report(
        "waiting_1000_threads",
        threads - empty_threads,
        "threads",
        f"the same for threads: {threads} minus {empty_threads} (goal 0)",
    )
    report(
        "waiting_1000_served_rss_mb",
        served_rss - empty_rss,
        "MB",
        f"the worker that brought the {waiting} runs to `waiting`, settled ({served_rss:.1f}) "
        "minus a fresh one with none",
    )
    report(
        "waiting_1000_served_threads",
        served_threads - empty_threads,
        "threads",
        f"the same for threads: {served_threads} minus {empty_threads}",
    )
    return figures


def measure(*, size: Size, folder: Path) -> list[Figure]:
    """Run both measures; print `BENCH` lines and return the figures."""
    return measure_decide(size=size, folder=folder) + measure_waiting(size=size, folder=folder)


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres, {time.strftime('%Y-%m-%d')}. Workers are "
        "`remit worker` processes with default settings (queues polled every 0.1 s) serving the "
        "bench app's `payout` workflow (a read, an approval gate, a step `passed`, a write; "
        "fakes); the decider is the benchmark's own process.",
        "",
        "Decide to resume: the runs are started and brought to `waiting` first, then decided one "
        "at a time; each is timed from the `decide()` call to the moment the decider sees the "
        "checkpoint of `passed`, the first step after the gate, in DBOS's step table (polled "
        f"every {RESULT_POLL * 1000:.0f} ms), and finishes before the next is decided, which waits "
        f"a random 0 to {JITTER * 1000:.0f} ms first so as not to fall in step with the worker's "
        "queue poll. The first "
        f"{WARMUP} decisions warm up and are not counted. What a waiting run costs: VmRSS and "
        "Threads from /proc/<pid>/status of a worker started fresh on a database with "
        f"{WAITING} runs waiting at their gate and of one started on an empty database, each "
        f"read {SETTLE:.0f} s after it began serving (median of five reads over 2 s). The "
        "worker that served the runs keeps the executor threads DBOS started for them (at most "
        "the queue's 16 at a time), and its fake connector keeps a record of every call in "
        "memory.",
        "",
        *figure_table(figures),
    ]
    write_section("Approvals: decide to resume, and what a waiting run costs", "\n".join(lines))


def main() -> None:
    run_alone(
        "approvals.py",
        measure,
        write,
        quick_help="60 decisions instead of 200",
        smoke_help="3 decisions and 10 waiting runs, each worker read once: only that it runs",
    )


if __name__ == "__main__":
    main()

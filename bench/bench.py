"""remit against bare DBOS, in one run: sequential latency per database, and queue drain.

    make bench            # full size
    make bench QUICK=1    # about half the runs, in three to five minutes
    make bench SMOKE=1    # every benchmark at its smallest, checked to print its figures (~1 min)

Sequential: one process serves remit's 3-op workflow (fake connector) and bare DBOS's 3-step
workflow side by side, and runs them one at a time, alternating A/B, each from enqueue to
result. Drain: runs queued on Postgres in advance, then timed from the moment the worker
processes serve until the last one is done: bare DBOS with one worker, remit with one, remit
with two; `--only bare` runs just these two. Approvals (bench/approvals.py): decide to resume,
and what waiting runs cost a worker. Runs that wait (bench/waits.py): a message's resume and a
parent's 100 children, against bare DBOS's `recv` and child workflows; `--only waits` runs just
that. Reconciler (bench/reconcile.py): one pass against 10,000
and 100,000 runs. Policies (bench/policy.py): what a Cedar check adds to a start. Budgets
(bench/budgets.py): what reserving and settling cost a call with a cost. Deploy check
(bench/deploy_check.py): replaying 1,000 waiting runs against the code. Command line
(bench/cli_startup.py): how fast `remit --help` and `remit runs` start, against
`python -c pass`; `--only cli` runs just that. Op calls (bench/calls.py): what a `started` row
for every read and a thread per try cost, against the version before them, in the same run;
`--only calls` runs just that. Scale to zero (bench/wakeup.py, bench/scale_to_zero.py): how
late the wakeup service calls 1,000 wakes due over 10 s, the CPU a stopped instance uses, and
how soon a wake gets a queued run's first step going; `--only wakeup` runs just those. Declared
resources (bench/resources.py): a plan over 1,000 resources and an apply creating 100, against
bare DBOS; `--only resources` runs just that. Scenarios (bench/scenarios.py): what the example's
month of dunning costs in real time under `remit test`. Prints `BENCH <name> <value> <unit>` lines and,
with `--write`, writes the tables to BENCHMARKS.md and the core figures it measured (common.py's
CORE) to bench/baseline.json, which bench/compare.py holds the working tree to.

`--smoke` (alone) runs bench/smoke.py instead: every benchmark above, and the web console's
(bench/console.py) and queue polling's (bench/poll.py), each in its own process at the least
size that goes through its code, checking that each prints its `BENCH` lines; it writes
nothing. `--smoke --only PART` runs one part at that size, in this process.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import bare  # bench/bare.py, beside this file
import smoke  # bench/smoke.py, beside this file
import sqlalchemy as sa
from common import (
    ROOT,
    Figure,
    Process,
    Size,
    deadline,
    drop_database,
    figure_table,
    fresh_database,
    handle_of,
    run_store,
    wait_until,
    write_baseline,
    write_section,
)

from remit.app import load_app
from remit.core.database import Database
from remit.core.settings import Settings
from remit.serve.worker import Worker

APP = ROOT / "bench" / "apps" / "bench_app"
SEQ_POLL = 0.01
RESULT_POLL = 0.002
SEQ_WARMUP = 5
RESULT_TIMEOUT = 60.0  # seconds, at most, for one sequential run's result
SERVING_TIMEOUT = 120.0  # seconds, at most, for a drain's worker to start serving
# A drain's bare DBOS worker: bench/bare.py's, imported after `common` (see its MOVED), so that
# it runs on an older version of remit too.
BARE_WORKER = (
    f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
    "import common, bare; bare.serve(sys.argv[1])"
)


def sequential(kind: str, runs: int, folder: Path) -> tuple[float, float]:
    """Mean seconds per run: (bare DBOS, remit), interleaved A/B in one process."""
    url = fresh_database(kind, folder)
    app = load_app(APP)
    settings = replace(
        Settings.from_env(APP, environ={"REMIT_DATABASE_URL": url}),
        fakes=True,
        poll_interval=SEQ_POLL,
    )
    worker = Worker(app, settings)
    worker.start(before_launch=bare.register)
    bare_client = bare.client(worker.db, app.name)  # served by the remit worker's DBOS
    bare.register_queue(bare_client, poll=SEQ_POLL, worker_concurrency=16)
    wf = app.workflow("bump")
    timings: dict[str, list[float]] = {"bare": [], "remit": []}
    try:
        for i in range(runs + SEQ_WARMUP):  # the first of each warm up and are not counted
            began = time.perf_counter()
            handle = bare_client.enqueue(
                {"workflow_name": bare.WORKFLOW, "queue_name": bare.QUEUE}, f"item-{i}"
            )
            with deadline(RESULT_TIMEOUT, f"sequential on {kind}: bare DBOS run {i}'s result"):
                handle.get_result(polling_interval_sec=RESULT_POLL)
            took_bare = time.perf_counter() - began

            began = time.perf_counter()
            run = worker.runtime.runs.start(
                worker.client, wf, {"item": f"item-{i}"}, started_by="bench"
            )
            with deadline(RESULT_TIMEOUT, f"sequential on {kind}: remit run {run.run_id}'s result"):
                handle_of(worker.client, run.workflow_id).get_result(
                    polling_interval_sec=RESULT_POLL
                )
            took_remit = time.perf_counter() - began
            if i >= SEQ_WARMUP:
                timings["bare"].append(took_bare)
                timings["remit"].append(took_remit)
        done = worker.runtime.runs.list(status="done", limit=runs + SEQ_WARMUP + 5)
        assert len(done) == runs + SEQ_WARMUP, f"{len(done)} remit runs done of {runs + SEQ_WARMUP}"
    finally:
        bare_client.destroy()
        worker.stop(timeout=0)
        drop_database(url)
    return statistics.mean(timings["bare"]), statistics.mean(timings["remit"])


def drain(kind: str, runs: int, workers: int, folder: Path) -> float:
    """Runs per second for `workers` processes of `kind` (bare or remit) draining a full queue,
    while all of them serve."""
    url = fresh_database("postgres", folder)
    db = Database(url)
    db.prepare()
    procs: list[Process] = []
    try:
        if kind == "bare":
            client = bare.client(db)
            bare.register_queue(client, poll=0.1, worker_concurrency=16)
            for i in range(runs):
                client.enqueue(
                    {"workflow_name": bare.WORKFLOW, "queue_name": bare.QUEUE}, f"item-{i}"
                )
            command = [sys.executable, "-c", BARE_WORKER, url]
        else:
            app = load_app(APP)
            client = db.client(app.name)
            store = run_store(db, app.name)
            for i in range(runs):
                store.start(client, app.workflow("bump"), {"item": f"item-{i}"}, started_by="bench")
            command = [sys.executable, "-m", "remit", "--app", str(APP), "worker"]
        env = {**os.environ, "REMIT_DATABASE_URL": url, "REMIT_FAKES": "1"}
        procs = [
            Process(f"drain's {kind} worker {n + 1} of {workers}", command, env=env)
            for n in range(workers)
        ]
        for proc in procs:
            proc.wait_for_line("serving", timeout=SERVING_TIMEOUT)
        done_query = sa.text("SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'")
        with db.engine.connect() as conn:

            def succeeded() -> int:
                done = int(conn.execute(done_query).scalar_one())
                conn.commit()
                return done

            # Timed from when every worker serves, over the runs left then: a worker that
            # started first drains on its own meanwhile, which is not what `workers` do.
            began, before = time.perf_counter(), succeeded()
            if before > runs // 2:
                print(
                    f"# drain ({kind}, {workers} workers): {before} of {runs} runs were done "
                    "before every worker served: the figure rests on the rest",
                    flush=True,
                )
            wait_until(
                lambda: succeeded() >= runs,
                timeout=60 + runs * 0.5,
                what=f"drain ({kind}, {workers} workers): {runs} queued runs to succeed",
                state=lambda: (
                    f"{succeeded()} succeeded; the workers' last output:\n"
                    + "".join(f"  {proc.name}:\n{proc.tail()}" for proc in procs)
                ),
            )
        took = time.perf_counter() - began
        client.destroy()
        return (runs - before) / took if before < runs else math.nan
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.stop()
        db.dispose()
        drop_database(url)


def _reporter(figures: list[Figure]) -> Callable[[str, float, str, str], None]:
    """What prints a figure's `BENCH` line and adds it to `figures`."""

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    return report


def measure_sequential(*, size: Size, folder: Path) -> list[Figure]:
    """Sequential latency on SQLite and Postgres: print `BENCH` lines and return the figures."""
    seq_runs = size.pick(smoke=3, quick=60, full=200)
    figures: list[Figure] = []
    report = _reporter(figures)
    for kind, short in (("sqlite", "sqlite"), ("postgres", "pg")):
        bare_s, remit_s = sequential(kind, seq_runs, folder)
        report(
            f"seq_bare_ms_{short}",
            bare_s * 1000,
            "ms",
            f"bare DBOS, mean of {seq_runs} sequential runs",
        )
        report(
            f"seq_remit_ms_{short}",
            remit_s * 1000,
            "ms",
            f"remit, mean of {seq_runs} sequential runs",
        )
        goal = "1.3" if kind == "sqlite" else "1.2"  # SQLite's one writer costs remit's rows more
        report(f"seq_ratio_{short}", remit_s / bare_s, "x", f"remit ÷ bare DBOS (goal ≤ {goal})")
    return figures


def measure_drain(*, size: Size, folder: Path) -> list[Figure]:
    """Queue drain on Postgres: print `BENCH` lines and return the figures."""
    drain_runs = size.pick(smoke=20, quick=250, full=1000)
    figures: list[Figure] = []
    report = _reporter(figures)
    bare_1 = drain("bare", drain_runs, 1, folder)
    remit_1 = drain("remit", drain_runs, 1, folder)
    remit_2 = drain("remit", drain_runs, 2, folder)
    report("drain_bare_1w_pg", bare_1, "runs/s", f"bare DBOS, 1 worker, {drain_runs} queued runs")
    report("drain_remit_1w_pg", remit_1, "runs/s", f"remit, 1 worker, {drain_runs} queued runs")
    report("drain_remit_2w_pg", remit_2, "runs/s", f"remit, 2 workers, {drain_runs} queued runs")
    report(
        "drain_ratio_pg",
        bare_1 / remit_1,
        "x",
        "bare throughput ÷ remit throughput, 1 worker (goal ≤ 1.2)",
    )
    report("scale_2w_pg", remit_2 / remit_1, "x", "remit 2 workers ÷ 1 worker (goal ≥ 1.6)")
    return figures


def remit_against_bare(*, size: Size, folder: Path) -> list[Figure]:
    """Sequential latency on SQLite and Postgres, then queue drain on Postgres: print `BENCH`
    lines and return the figures."""
    return measure_sequential(size=size, folder=folder) + measure_drain(size=size, folder=folder)


def write_table(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Sequential runs poll "
        f"their queue every {SEQ_POLL} s (both sides); drain workers poll every 0.1 s with 16 "
        "runs at a time per worker.",
        "",
        *figure_table(figures),
    ]
    write_section("remit against bare DBOS", "\n".join(lines))


def _startup(*, size: Size, folder: Path) -> list[Figure]:
    """The command line's startup, measured in a folder of its own (its app copy is removed)."""
    import cli_startup  # bench/cli_startup.py, beside this file

    with tempfile.TemporaryDirectory(dir=folder) as own:
        return cli_startup.measure(size=size, folder=Path(own))


def _write_reconcile(made: tuple[list[Figure], list[Any]], *, command: str) -> None:
    import reconcile  # bench/reconcile.py, beside this file

    reconcile.write(*made, command=command)


# A part: what measures it (printing its `BENCH` lines) and what writes its section.
Part = tuple[Callable[..., Any], Callable[..., None]]


# The modules of bench/ that measure parts (see `_part`).
PART_MODULES: list[str] = []


def _part(module: str, measure: str = "measure", write: str = "write") -> Part:
    """The part `module` of bench/ measures and writes, imported when it runs (and by `main`):
    so that bench/compare.py can import this module under an older version of remit, which
    lacks much of what the other benchmarks import."""
    PART_MODULES.append(module)

    def measure_it(**options: Any) -> Any:
        return getattr(importlib.import_module(module), measure)(**options)

    def write_it(made: Any, **options: Any) -> None:
        getattr(importlib.import_module(module), write)(made, **options)

    return measure_it, write_it


# What each `--only` runs, and, in this order, what a whole run does.
PARTS: dict[str, list[Part]] = {
    "bare": [(remit_against_bare, write_table)],
    "approvals": [_part("approvals")],
    "waits": [_part("waits")],
    "reconcile": [(_part("reconcile")[0], _write_reconcile)],
    "policy": [_part("policy")],
    "budgets": [_part("budgets")],
    "deploy": [_part("deploy_check")],
    "cli": [(_startup, _part("cli_startup")[1])],
    "calls": [_part("calls")],
    "wakeup": [_part("wakeup"), _part("scale_to_zero")],
    "resources": [_part("resources")],
    "scenarios": [_part("scenarios")],
}
ONLY = ("bare", "waits", "cli", "calls", "wakeup", "resources")


def figures_of(made: Any) -> list[Figure]:
    """The figures a part's measure returned: a list of them, or a tuple that starts with one."""
    figures = made[0] if isinstance(made, tuple) else made
    return list(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    Size.add_options(
        parser,
        quick="about half the runs, and fewer repetitions",
        smoke="run bench/smoke.py: every benchmark at its smallest, each in its own process, "
        "checked to print its figures (with --only: that part at its smallest, here)",
    )
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="run one part alone: bare, remit against bare DBOS (sequential runs and queue "
        "drain); waits, a message's resume and a parent's 100 children against bare DBOS; cli, the command line's startup; calls, what an op call costs; wakeup, how "
        "late the wakeup service calls instances; resources, plan and apply of declared "
        "resources",
    )
    args = parser.parse_args()
    size = Size.of(parser, args)
    if size is Size.SMOKE and args.only is None:
        sys.exit(smoke.run_all(smoke.MODULES))
    for module in PART_MODULES:  # one that does not import fails the run before it measures
        importlib.import_module(module)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    if args.only is None:
        parts = [part for each in PARTS.values() for part in each]
        command = size.pick(
            smoke="make bench SMOKE=1", quick="make bench QUICK=1", full="make bench"
        )
    else:
        parts = PARTS[args.only]
        command = f"python bench/bench.py --only {args.only}{size.flag}"
    measured = [(measure(size=size, folder=folder), write) for measure, write in parts]
    if args.write:
        for made, write in measured:
            write(made, command=command)
        figures = [figure for made, _ in measured for figure in figures_of(made)]
        kept = write_baseline(figures, command=command)
        if kept:
            print(f"bench/baseline.json: {len(kept)} core figures kept ({', '.join(kept)})")


if __name__ == "__main__":
    main()

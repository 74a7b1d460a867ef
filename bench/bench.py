"""remit against bare DBOS, in one run: sequential latency per database, and queue drain.

    make bench            # full size
    make bench QUICK=1    # about half the runs, in about three minutes

Sequential: one process serves remit's 3-op workflow (fake connector) and bare DBOS's 3-step
workflow side by side, and runs them one at a time, alternating A/B, each from enqueue to
result. Drain: runs queued on Postgres in advance, then timed from the moment the worker
processes serve until the last one is done: bare DBOS with one worker, remit with one, remit
with two. Approvals (bench/approvals.py): decide to resume, and what waiting runs cost a
worker. Reconciler (bench/reconcile.py): one pass against 10,000 and 100,000 runs. Policies
(bench/policy.py): what a Cedar check adds to a start. Budgets (bench/budgets.py): what
reserving and settling cost a call with a cost. Deploy check (bench/deploy_check.py): replaying
1,000 waiting runs against the code. Command line (bench/cli_startup.py): how fast `remit --help`
and `remit runs` start, against `python -c pass`; `--only cli` runs just that. Op calls
(bench/calls.py): what a `started` row for every read and a thread per try cost, against the
version before them, in the same run; `--only calls` runs just that. Scale to zero
(bench/wakeup.py, bench/scale_to_zero.py): how late the wakeup service calls 1,000 wakes due
over 10 s, the CPU a stopped instance uses, and how soon a wake gets a queued run's first step
going; `--only wakeup` runs just those. Declared resources (bench/resources.py): a plan over
1,000 resources and an apply creating 100, against bare DBOS; `--only resources` runs just
that. Prints
`BENCH <name> <value> <unit>` lines and writes the tables to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import approvals  # bench/approvals.py, beside this file
import bare  # bench/bare.py, beside this file
import budgets  # bench/budgets.py, beside this file
import calls  # bench/calls.py, beside this file
import cli_startup  # bench/cli_startup.py, beside this file
import deploy_check  # bench/deploy_check.py, beside this file
import policy  # bench/policy.py, beside this file
import reconcile  # bench/reconcile.py, beside this file
import resources  # bench/resources.py, beside this file
import scale_to_zero  # bench/scale_to_zero.py, beside this file
import sqlalchemy as sa
import wakeup  # bench/wakeup.py, beside this file
from common import ROOT, drop_database, figure_table, fresh_database, write_section

from remit.app import load_app
from remit.core.database import Database
from remit.core.runs import RunStore
from remit.core.settings import Settings
from remit.serve.worker import Worker

APP = ROOT / "bench" / "apps" / "bench_app"
POSTGRES = os.environ.get(
    "REMIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SEQ_POLL = 0.01
RESULT_POLL = 0.002


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
        for i in range(runs + 5):  # the first five of each warm up and are not counted
            began = time.perf_counter()
            handle = bare_client.enqueue(
                {"workflow_name": bare.WORKFLOW, "queue_name": bare.QUEUE}, f"item-{i}"
            )
            handle.get_result(polling_interval_sec=RESULT_POLL)
            took_bare = time.perf_counter() - began

            began = time.perf_counter()
            run = worker.runtime.runs.start(
                worker.client, wf, {"item": f"item-{i}"}, started_by="bench"
            )
            worker.client.retrieve_workflow(run.workflow_id).get_result(
                polling_interval_sec=RESULT_POLL
            )
            took_remit = time.perf_counter() - began
            if i >= 5:
                timings["bare"].append(took_bare)
                timings["remit"].append(took_remit)
        done = worker.runtime.runs.list(status="done", limit=runs + 10)
        assert len(done) == runs + 5, f"{len(done)} remit runs done of {runs + 5}"
    finally:
        bare_client.destroy()
        worker.stop(timeout=0)
        drop_database(url)
    return statistics.mean(timings["bare"]), statistics.mean(timings["remit"])


def _serving(proc: subprocess.Popen[str], ready: threading.Event) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if "serving" in line:
            ready.set()


def drain(kind: str, runs: int, workers: int, folder: Path) -> float:
    """Runs per second for `workers` processes of `kind` (bare or remit) draining a full queue."""
    url = fresh_database("postgres", folder)
    db = Database(url)
    db.prepare()
    try:
        if kind == "bare":
            client = bare.client(db)
            bare.register_queue(client, poll=0.1, worker_concurrency=16)
            for i in range(runs):
                client.enqueue(
                    {"workflow_name": bare.WORKFLOW, "queue_name": bare.QUEUE}, f"item-{i}"
                )
            command = [sys.executable, str(ROOT / "bench" / "bare.py"), "worker", url]
        else:
            app = load_app(APP)
            client = db.client(app.name)
            store = RunStore(db)
            for i in range(runs):
                store.start(client, app.workflow("bump"), {"item": f"item-{i}"}, started_by="bench")
            command = [sys.executable, "-m", "remit", "--app", str(APP), "worker"]
        env = {**os.environ, "REMIT_DATABASE_URL": url, "REMIT_FAKES": "1"}
        procs = [
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for _ in range(workers)
        ]
        ready = [threading.Event() for _ in procs]
        for proc, event in zip(procs, ready, strict=True):
            threading.Thread(target=_serving, args=(proc, event), daemon=True).start()
        for event in ready:
            if not event.wait(120):
                raise RuntimeError("a worker did not start serving within 120 s")
        began = time.perf_counter()
        done_query = sa.text("SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'")
        with db.engine.connect() as conn:
            while conn.execute(done_query).scalar_one() < runs:
                time.sleep(0.05)
                conn.commit()
        took = time.perf_counter() - began
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        client.destroy()
        return runs / took
    finally:
        db.dispose()
        drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument(
        "--only",
        choices=["cli", "calls", "wakeup", "resources"],
        help="run one part alone: cli, the command line's startup; calls, what an op call "
        "costs; wakeup, how late the wakeup service calls instances; resources, plan and apply "
        "of declared resources",
    )
    args = parser.parse_args()
    command = "make bench QUICK=1" if args.quick else "make bench"
    seq_runs, drain_runs = (60, 250) if args.quick else (200, 1000)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    if args.only == "cli":
        started = _startup(quick=args.quick, folder=folder)
        if args.write:
            here = "python bench/bench.py --only cli" + (" --quick" if args.quick else "")
            cli_startup.write(started, command=here)
        return
    if args.only == "calls":
        made = calls.measure(quick=args.quick, folder=folder)
        if args.write:
            calls.write(
                made,
                command="python bench/bench.py --only calls" + (" --quick" if args.quick else ""),
            )
        return
    if args.only == "wakeup":
        woken = wakeup.measure(quick=args.quick, folder=folder)
        stopped = scale_to_zero.measure(quick=args.quick, folder=folder)
        if args.write:
            here = "python bench/bench.py --only wakeup" + (" --quick" if args.quick else "")
            wakeup.write(woken, command=here)
            scale_to_zero.write(stopped, command=here)
        return
    if args.only == "resources":
        declared = resources.measure(quick=args.quick, folder=folder)
        if args.write:
            resources.write(
                declared,
                command="python bench/bench.py --only resources"
                + (" --quick" if args.quick else ""),
            )
        return
    figures: list[tuple[str, float, str, str]] = []

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

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
        report(f"seq_ratio_{short}", remit_s / bare_s, "x", "remit ÷ bare DBOS (goal ≤ 1.2)")

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
    report("scale_2w_pg", remit_2 / remit_1, "x", "remit 2 workers ÷ 1 worker (goal ≥ 1.5)")

    gates = approvals.measure(quick=args.quick, folder=folder)
    reconciled, passes = reconcile.measure(quick=args.quick, folder=folder)
    checks = policy.measure(quick=args.quick, folder=folder)
    billed = budgets.measure(quick=args.quick, folder=folder)
    replayed = deploy_check.measure(quick=args.quick, folder=folder)
    started = _startup(quick=args.quick, folder=folder)
    made = calls.measure(quick=args.quick, folder=folder)
    woken = wakeup.measure(quick=args.quick, folder=folder)
    stopped = scale_to_zero.measure(quick=args.quick, folder=folder)
    declared = resources.measure(quick=args.quick, folder=folder)

    if args.write:
        write_table(figures, quick=args.quick)
        approvals.write(gates, command="make bench QUICK=1" if args.quick else "make bench")
        reconcile.write(
            reconciled, passes, command="make bench QUICK=1" if args.quick else "make bench"
        )
        policy.write(checks, command="make bench QUICK=1" if args.quick else "make bench")
        budgets.write(billed, command="make bench QUICK=1" if args.quick else "make bench")
        deploy_check.write(replayed, command="make bench QUICK=1" if args.quick else "make bench")
        cli_startup.write(started, command=command)
        calls.write(made, command=command)
        wakeup.write(woken, command=command)
        scale_to_zero.write(stopped, command=command)
        resources.write(declared, command=command)


def _startup(*, quick: bool, folder: Path) -> list[cli_startup.Figure]:
    """The command line's startup, measured in a folder of its own (its app copy is removed)."""
    with tempfile.TemporaryDirectory(dir=folder) as own:
        return cli_startup.measure(quick=quick, folder=Path(own))


def write_table(figures: list[tuple[str, float, str, str]], *, quick: bool) -> None:
    command = "make bench QUICK=1" if quick else "make bench"
    lines = [
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Sequential runs poll "
        f"their queue every {SEQ_POLL} s (both sides); drain workers poll every 0.1 s with 16 "
        "runs at a time per worker.",
        "",
        *figure_table(figures),
    ]
    write_section("remit against bare DBOS", "\n".join(lines))


if __name__ == "__main__":
    main()

"""Queue polling: start-to-finish latency of a run against a worker's idle CPU, per interval.

    .venv/bin/python bench/poll.py [--runs 20] [--idle 10] [--intervals 0.05,0.1,0.25,1.0]
    .venv/bin/python bench/poll.py --smoke    # 2 runs, 0.5 s idle, 0.1 s: only that it runs

For each database and polling interval it starts a `remit worker` process on the example app
(fakes), measures the worker's CPU while idle (after `--settle` seconds), then starts runs one
after another from this process and times each from `start` to `done`. Prints `BENCH` lines;
`--write` updates the polling table in BENCHMARKS.md. `--smoke` changes the sizes not given to
the least that still goes through it all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

from common import (
    ROOT,
    Process,
    drop_database,
    fresh_database,
    parse_sized,
    wait_until,
    write_section,
)

from remit.app import load_app
from remit.core.database import Database
from remit.core.runs import RunStore

APP = ROOT / "examples" / "acme"
TICKS = os.sysconf("SC_CLK_TCK")
# The sizes the options take unless given: by default, and under --smoke.
SIZES = {"runs": 20, "idle": 10.0, "intervals": "0.05,0.1,0.25,1.0", "settle": 2.0}
SMOKE_SIZES = {"runs": 2, "idle": 0.5, "intervals": "0.1", "settle": 0.2}
SERVING_TIMEOUT = 120.0  # seconds, at most, for the worker to start serving
RUN_TIMEOUT = 60.0  # seconds, at most, for a run to finish


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _finished(store: RunStore, run_id: str) -> bool:
    """Whether run `run_id` has finished."""
    return store.get(run_id).finished


def measure(
    kind: str, interval: float, runs: int, idle: float, folder: Path, settle: float = 2.0
) -> tuple[float, float, float]:
    """(median and slowest milliseconds from start to done of `runs` runs, one at a time, and
    the worker's CPU over `idle` seconds, in % of a core) for a worker polling every `interval`
    seconds on a fresh `kind` database, its CPU read `settle` seconds after it serves."""
    url = fresh_database(kind, folder)
    db = Database(url)
    db.prepare()
    env = {
        **os.environ,
        "REMIT_DATABASE_URL": url,
        "REMIT_FAKES": "1",
        "REMIT_POLL_INTERVAL": str(interval),
    }
    worker = Process(
        f"`remit worker` polling every {interval} s on {kind}",
        [sys.executable, "-m", "remit", "--app", str(APP), "worker"],
        env=env,
    )
    try:
        worker.wait_for_line("serving", timeout=SERVING_TIMEOUT)
        time.sleep(settle)
        before = cpu_seconds(worker.pid)
        time.sleep(idle)
        idle_cpu = 100 * (cpu_seconds(worker.pid) - before) / idle
        app = load_app(APP)
        client = db.client(app.name)
        store = RunStore(db, app=app.name)
        wf = app.workflow("ar.chase-invoice")
        latencies = []
        for _ in range(runs):
            began = time.perf_counter()
            run = store.start(client, wf, {"invoice_id": "inv_1001"}, started_by="bench")
            wait_until(
                partial(_finished, store, run.run_id),
                timeout=RUN_TIMEOUT,
                what=f"run {run.run_id} to finish",
                state=lambda: f"{worker.name}'s last output:\n{worker.tail()}",
                every=0.002,
            )
            latencies.append(time.perf_counter() - began)
        client.destroy()
    finally:
        worker.stop(30)
        db.dispose()
        drop_database(url)
    return statistics.median(latencies) * 1000, max(latencies) * 1000, idle_cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, help=f"runs timed ({SIZES['runs']})")
    parser.add_argument("--idle", type=float, help=f"seconds of idle CPU ({SIZES['idle']})")
    parser.add_argument("--intervals", help=f"poll intervals ({SIZES['intervals']})")
    parser.add_argument(
        "--settle", type=float, help=f"seconds serving before the idle CPU ({SIZES['settle']})"
    )
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parse_sized(parser, SIZES, SMOKE_SIZES)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    rows = []
    for kind in args.databases.split(","):
        for interval in [float(i) for i in args.intervals.split(",")]:
            median, worst, cpu = measure(kind, interval, args.runs, args.idle, folder, args.settle)
            tag = f"{kind}_{str(interval).replace('.', '_')}s"
            print(f"BENCH poll_latency_median_{tag} {median:.0f} ms")
            print(f"BENCH poll_latency_max_{tag} {worst:.0f} ms")
            print(f"BENCH idle_cpu_pct_{tag} {cpu:.1f} %")
            rows.append(f"| {kind} | {interval} | {median:.0f} | {worst:.0f} | {cpu:.1f} |")
    if args.write:
        command = "python bench/poll.py " + " ".join(sys.argv[1:])
        write_section(
            "Queue polling: latency against idle CPU",
            "\n".join(
                [
                    f"`{command}` — {args.runs} runs of `ar.chase-invoice` (3 ops, 1 step, fakes), one "
                    f"after another, timed from `start` to `done`; a worker's CPU over {args.idle:.0f} s "
                    "idle. 2 cores.",
                    "",
                    "| database | poll interval (s) | median latency (ms) | max latency (ms) | idle CPU (% of a core) |",
                    "|---|---|---|---|---|",
                    *rows,
                ]
            ),
        )


if __name__ == "__main__":
    main()

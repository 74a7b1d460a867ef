"""Queue polling: start-to-finish latency of a run against a worker's idle CPU, per interval.

    .venv/bin/python bench/poll.py [--runs 20] [--idle 10] [--intervals 0.05,0.1,0.25,1.0]

For each database and polling interval it starts a `remit worker` process on the example app
(fakes), measures the worker's CPU while idle, then starts runs one after another from this
process and times each from `start` to `done`. Prints `BENCH` lines; `--write` updates the
polling table in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, drop_database, fresh_database, write_section

from remit.app import load_app
from remit.core.database import Database
from remit.core.runs import RunStore

APP = ROOT / "examples" / "acme"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(
    kind: str, interval: float, runs: int, idle: float, folder: Path
) -> tuple[float, float, float]:
    url = fresh_database(kind, folder)
    db = Database(url)
    db.prepare()
    env = {
        **os.environ,
        "REMIT_DATABASE_URL": url,
        "REMIT_FAKES": "1",
        "REMIT_POLL_INTERVAL": str(interval),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "remit", "--app", str(APP), "worker"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        while "serving" not in worker.stderr.readline():
            pass
        time.sleep(2)
        before = cpu_seconds(worker.pid)
        time.sleep(idle)
        idle_cpu = 100 * (cpu_seconds(worker.pid) - before) / idle
        app = load_app(APP)
        client = db.client(app.name)
        store = RunStore(db)
        wf = app.workflow("ar.chase-invoice")
        latencies = []
        for _ in range(runs):
            began = time.perf_counter()
            run = store.start(client, wf, {"invoice_id": "inv_1001"}, started_by="bench")
            while not store.get(run.run_id).finished:
                time.sleep(0.002)
            latencies.append(time.perf_counter() - began)
        client.destroy()
    finally:
        worker.terminate()
        worker.wait(30)
        db.dispose()
        drop_database(url)
    return statistics.median(latencies) * 1000, max(latencies) * 1000, idle_cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--intervals", default="0.05,0.1,0.25,1.0")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    rows = []
    for kind in args.databases.split(","):
        for interval in [float(i) for i in args.intervals.split(",")]:
            median, worst, cpu = measure(kind, interval, args.runs, args.idle, folder)
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

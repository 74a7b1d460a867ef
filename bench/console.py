"""The web console: how long the runs page and a run's page take to render on the server.

    .venv/bin/python bench/console.py [--runs 100000] [--steps 200] [--repeat 50] [--write]
    .venv/bin/python bench/console.py --smoke    # 1,000 runs, 5 steps, 2 GETs: only that it runs

On SQLite and then on Postgres, it seeds a database with `--runs` runs, written in bulk straight into the runs table
(the console itself only reads through the client), runs one real run of `--steps` steps on a
worker in this process, signs in, and times `GET /console/runs` and `GET /console/runs/<id>`
through starlette's TestClient (in process, so the figure is the server's time plus the
in-process transport), `--repeat` times each. Prints `BENCH console_runs_page_ms` and
`BENCH console_run_page_ms` (medians); `--write` updates its section of BENCHMARKS.md.
`--smoke` changes the sizes not given to the least that still renders every page.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import drop_database, fresh_database, parse_sized, write_section
from fastapi.testclient import TestClient
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.core.schema import runs
from remit.serve.api import create_api
from remit.testing import Harness

STATUSES = ("done", "done", "done", "failed", "waiting", "cancelled")
GOAL_MS = 100.0
# The sizes --runs, --steps and --repeat take unless given: full, and under --smoke.
SIZES = {"runs": 100_000, "steps": 200, "repeat": 50}
SMOKE_SIZES = {"runs": 1_000, "steps": 5, "repeat": 2}
RUN_TIMEOUT = 300.0  # seconds, at most, for the run of many steps


class Many(BaseModel):
    steps: int


@workflow(name="many-steps", input=Many)
def many_steps(ctx: Context, input: Many) -> int:
    total = 0
    for n in range(input.steps):
        total += ctx.step(f"step-{n}", lambda n=n: n, output=int)
    return total


APP = App(name="bench-console", workflows=[many_steps])


def seed(harness: Harness, count: int) -> None:
    """`count` finished runs of the app, a minute apart, in one bulk insert per 10,000."""
    began = datetime(2025, 1, 1, tzinfo=UTC)
    queue = f"{APP.name}:default"
    batch: list[dict[str, Any]] = []
    with harness.client.db.begin() as conn:
        for n in range(count):
            run_id = f"run_{uuid.uuid4().hex[:16]}"
            at = began + timedelta(minutes=n)
            batch.append(
                {
                    "run_id": run_id,
                    "workflow": "many-steps",
                    "queue": queue,
                    "input": {"steps": 1},
                    "status": STATUSES[n % len(STATUSES)],
                    "attempt": 1,
                    "workflow_id": f"{run_id}:1",
                    "version": "bench",
                    "started_by": f"user:u{n % 50}",
                    "created_at": at,
                    "updated_at": at,
                    "finished_at": at,
                    "output": 1,
                    "error": None,
                }
            )
            if len(batch) == 10_000:
                conn.execute(runs.insert(), batch)
                batch = []
        if batch:
            conn.execute(runs.insert(), batch)


def sign_in(http: TestClient, harness: Harness) -> None:
    _, code = harness.client.services.signins.link("user:bench", by="user:bench")
    shown = http.get(f"/console/sign-in?code={code}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text)
    assert csrf is not None, shown.text
    done = http.post(
        "/console/sign-in", data={"code": code, "csrf": csrf.group(1)}, follow_redirects=False
    )
    assert done.status_code == 303, done.text


def timed(http: TestClient, path: str, repeat: int, check: str) -> float:
    """The median milliseconds of `repeat` GETs of `path` (after one to warm up)."""
    first = http.get(path)
    assert first.status_code == 200, (first.status_code, path)
    assert check in first.text, path
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        http.get(path)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def measure(url: str, args: argparse.Namespace) -> tuple[float, float, float, float, float]:
    """(runs page, filtered runs page, a filter nothing matches, run page) medians in ms, and
    the seconds seeding took."""
    with Harness(APP, database_url=url, actor="user:bench") as harness:
        began = time.perf_counter()
        seed(harness, args.runs)
        seeded = time.perf_counter() - began
        run = harness.run("many-steps", {"steps": args.steps}, timeout=RUN_TIMEOUT)
        assert run.status == "done", run.error
        with TestClient(create_api(harness.client, allowed_hosts=["testserver"])) as http:
            sign_in(http, harness)
            runs_ms = timed(http, "/console/runs", args.repeat, 'table id="runs"')
            filtered = "/console/runs?status=failed&started_by=user:u7"
            filtered_ms = timed(http, filtered, args.repeat, 'table id="runs"')
            unmatched = "/console/runs?started_by=user:nobody"
            unmatched_ms = timed(http, unmatched, args.repeat, "No runs match these filters.")
            run_ms = timed(http, f"/console/runs/{run.run_id}", args.repeat, "svg id")
    return runs_ms, filtered_ms, unmatched_ms, run_ms, seeded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, help=f"runs seeded (default {SIZES['runs']:,})")
    parser.add_argument("--steps", type=int, help=f"steps of the run shown ({SIZES['steps']})")
    parser.add_argument("--repeat", type=int, help=f"GETs of each page ({SIZES['repeat']})")
    args = parse_sized(parser, SIZES, SMOKE_SIZES)
    figures: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        for kind, suffix, label in (("sqlite", "", "SQLite"), ("postgres", "_pg", "Postgres")):
            url = fresh_database(kind, Path(folder))
            try:
                runs_ms, filtered_ms, unmatched_ms, run_ms, seeded = measure(url, args)
            finally:
                drop_database(url)
            print(f"({label}: seeded {args.runs:,} runs in {seeded:.1f} s)", flush=True)
            figures += [
                (
                    f"console_runs_page_ms{suffix}",
                    runs_ms,
                    f"GET /console/runs, {args.runs:,} runs in {label}",
                ),
                (
                    f"console_runs_filtered_ms{suffix}",
                    filtered_ms,
                    f"GET /console/runs?status=failed&started_by=user:u7, {args.runs:,} runs "
                    f"in {label}",
                ),
                (
                    f"console_runs_unmatched_ms{suffix}",
                    unmatched_ms,
                    f"GET /console/runs?started_by=user:nobody (no run matches), {args.runs:,} "
                    f"runs in {label}",
                ),
                (
                    f"console_run_page_ms{suffix}",
                    run_ms,
                    f"GET /console/runs/<id>, a run of {args.steps} steps, in {label}",
                ),
            ]
    for name, value, _ in figures:
        print(f"BENCH {name} {value:.3f} ms", flush=True)
    if args.write:
        rows = "\n".join(
            f"| `{name}` | {value:.1f} | {GOAL_MS:.0f} | {what} |" for name, value, what in figures
        )
        write_section(
            "Web console: server time of a page",
            f"`python bench/console.py --write` (`make bench-console`) — median of {args.repeat} "
            "GETs through starlette's TestClient (in process), signed in; the runs are seeded "
            "in bulk straight into the runs table. 2 cores.\n\n"
            "| figure | median (ms) | goal (ms) | what |\n|---|---|---|---|\n"
            f"{rows}\n\n"
            "The runs page reads one page of 51 rows by key (created time, run id), never by "
            "offset. A filter by workflow or by starter reads its index (`remit_runs_workflow`, "
            "`remit_runs_started_by`), so one that nothing matches does not read every run. "
            "A run's page reads its steps from DBOS once per attempt and draws the "
            "timeline in one pass over them.",
        )


if __name__ == "__main__":
    main()

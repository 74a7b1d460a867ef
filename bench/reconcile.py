"""The reconciler on Postgres: one pass against 10,000 and 100,000 runs, 1 % of which need moving.

    .venv/bin/python bench/reconcile.py [--quick | --smoke] [--write]    # `make bench` runs it too

The runs that need moving are real: runs of the bench app's `bump` workflow (3 ops, fakes) are
started and served to the end by a `remit worker` process, which is then stopped, so each has a
DBOS workflow that ended SUCCESS and its run row and ledger rows as an attempt leaves them. Then
the crash window is opened on each: its row is set back to `running` with no outcome, as if the
worker had died between the attempt's end and its status write (what
tests/integration/test_reconciler.py's `lose_conclusion` does). A pass must conclude them `done`
from DBOS's record.

The other 99 % are finished runs, copied from the real ones under new run ids: their run rows
(status `done`) and their 3 ledger rows each (`ok`) are bulk-inserted with executemany in
batches, and their DBOS rows (workflow status, input, output and the 3 step checkpoints) are
copied from a real run's inside Postgres, so every table a pass may touch holds all N runs.
Then the database is vacuumed and analysed, as autovacuum would have done over the days these
runs took to exist.

This process then runs passes as a worker runs them (`Reconciler.run_pass()` with the app's
task opener, every live worker on this version), timed wall-clock around the call. One untimed
pass warms the connection pools first. A moving pass runs on a freshly opened window each time
(a pass fixes what it finds) and must report exactly the runs of the window concluded `done`; an
idle pass runs on the same N runs with the window closed and must report nothing. Prints
`BENCH reconcile_<size>_ms` (median of the moving passes) and `BENCH reconcile_<size>_idle_ms`,
then where one more moving pass spends its time, by part, under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from approvals import WorkerProcess, database  # bench/approvals.py, beside this file
from common import ROOT, Size, figure_table, run_store, wait_until, write_section
from sqlalchemy.dialects.postgresql import ARRAY

from remit.app import App, load_app
from remit.core.database import Database
from remit.core.runs import new_run_id
from remit.core.schema import ledger, runs
from remit.ops.concluding import Report
from remit.ops.reconciler import Reconciler
from remit.people.tasks import TaskOpener

APP = ROOT / "bench" / "apps" / "bench_app"
WORKFLOW = "bump"
MOVING = 0.01  # the share of runs a pass must move
PASSES = 5  # timed passes of each kind per size
BATCH = 5000  # finished runs per batch of inserts
# DBOS's tables that hold a finished workflow's rows, keyed by `workflow_uuid`.
DBOS_TABLES = ("workflow_status", "workflow_input", "workflow_output", "operation_outputs")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # `remit worker`'s

Figure = tuple[str, float, str, str]


def count(db: Database, status: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(runs).where(runs.c.status == status)
            ).scalar_one()
        )


def real_runs(db: Database, url: str, app: App, how_many: int) -> list[str]:
    """Start `how_many` runs of `bump` and let a worker process finish them; its run ids."""
    client = db.client(app.name)
    store = run_store(db, app.name)
    try:
        run_ids = [
            store.start(
                client, app.workflow(WORKFLOW), {"item": f"item-{i}"}, started_by="bench"
            ).run_id
            for i in range(how_many)
        ]
    finally:
        client.destroy()
    worker = WorkerProcess(url)
    try:
        wait_until(
            lambda: count(db, "done") == how_many,
            timeout=60 + how_many / 2,
            what=f"{how_many} runs of `{WORKFLOW}` done",
            state=lambda: (
                f"{count(db, 'done')} done; {worker.name}'s last output:\n" + worker.tail()
            ),
        )
    finally:
        worker.stop()
    return run_ids


def fill(db: Database, templates: list[str], how_many: int) -> None:
    """Add `how_many` finished runs, each a copy of one of the real runs `templates` (in turn)
    under a new run id: its run row, its ledger rows and its DBOS rows."""
    with db.engine.connect() as conn:
        run_rows = {
            row["run_id"]: dict(row)
            for row in conn.execute(sa.select(runs).where(runs.c.run_id.in_(templates))).mappings()
        }
        ledger_rows: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in templates}
        for row in conn.execute(
            sa.select(ledger).where(ledger.c.run_id.in_(templates)).order_by(ledger.c.id)
        ).mappings():
            ledger_rows[row["run_id"]].append({k: v for k, v in row.items() if k != "id"})
        dbos = [
            sa.Table(name, sa.MetaData(), schema="dbos", autoload_with=conn) for name in DBOS_TABLES
        ]
    oldest = min(row["created_at"] for row in run_rows.values())
    for start in range(0, how_many, BATCH):
        new_runs: list[dict[str, Any]] = []
        new_ledger: list[dict[str, Any]] = []
        workflow_ids: list[tuple[str, str]] = []
        for i in range(start, min(start + BATCH, how_many)):
            template = templates[i % len(templates)]
            run_id = new_run_id()
            row = run_rows[template]
            # Started in the days before the real runs, ten seconds apart.
            shift = row["created_at"] - oldest + timedelta(seconds=10 * (how_many - i))
            new_runs.append(
                {
                    **row,
                    "run_id": run_id,
                    "workflow_id": row["workflow_id"].replace(template, run_id),
                    **{k: row[k] - shift for k in ("created_at", "updated_at", "finished_at")},
                }
            )
            new_ledger.extend(
                {
                    **entry,
                    "run_id": run_id,
                    "idempotency_key": entry["idempotency_key"].replace(template, run_id),
                }
                for entry in ledger_rows[template]
            )
            workflow_ids.append((row["workflow_id"], new_runs[-1]["workflow_id"]))
        with db.begin() as conn:
            conn.execute(runs.insert(), new_runs)
            conn.execute(ledger.insert(), new_ledger)
            _copy_dbos_rows(conn, dbos, workflow_ids)


def _copy_dbos_rows(
    conn: sa.Connection, tables: list[sa.Table], workflow_ids: list[tuple[str, str]]
) -> None:
    """Copy each DBOS row of workflow `old` as workflow `new`, for every (old, new) pair."""
    pairs = (
        sa.func.unnest(
            sa.cast(sa.literal([old for old, _ in workflow_ids]), ARRAY(sa.Text)),
            sa.cast(sa.literal([new for _, new in workflow_ids]), ARRAY(sa.Text)),
        )
        .table_valued("old", "new")
        .render_derived(name="pairs")
    )
    for table in tables:
        columns = [pairs.c.new if c.name == "workflow_uuid" else c for c in table.c]
        conn.execute(
            table.insert().from_select(
                [c.name for c in table.c],
                sa.select(*columns).join_from(table, pairs, table.c.workflow_uuid == pairs.c.old),
            )
        )


def open_window(db: Database, run_ids: list[str]) -> None:
    """The crash window on each run: its attempt ended in DBOS, its status write never landed."""
    with db.begin() as conn:
        conn.execute(
            runs.update()
            .where(runs.c.run_id.in_(run_ids))
            .values(status="running", output=None, error=None, finished_at=None)
        )


def vacuum(db: Database) -> None:
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


@contextmanager
def logs_discarded() -> Iterator[None]:
    """remit's log lines formatted as a worker formats them, and written to /dev/null: a pass
    logs every run it moves, and that belongs in its time, but not on the benchmark's output."""
    remit_log = logging.getLogger("remit")
    with open(os.devnull, "w") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        remit_log.addHandler(handler)
        remit_log.propagate = False
        try:
            yield
        finally:
            remit_log.removeHandler(handler)
            remit_log.propagate = True


def timed(reconciler: Reconciler) -> tuple[float, Report]:
    began = time.perf_counter()
    report = reconciler.run_pass()
    return time.perf_counter() - began, report


@dataclass
class Passes:
    """Seconds per moving and per idle pass at one size, and what the database took to build."""

    size: int
    moving: int
    moved: list[float] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)
    built: dict[str, float] = field(default_factory=dict)
    # Seconds of one moving pass under cProfile, per part (see PARTS).
    parts: dict[str, float] = field(default_factory=dict)


# Where a pass spends its time: (module under src/remit, function) → what it does there.
PARTS = {
    ("core/runs.py", "in_flight"): "read the runs in flight (`status IN ('queued', 'running')`)",
    (
        "ops/concluding.py",
        "attempts_of",
    ): "ask DBOS for their current attempts (`list_workflows`, 250 ids a call)",
    (
        "ops/concluding.py",
        "conclude_together",
    ): "conclude them: one fenced UPDATE for them all (up to 500 a statement)",
    ("ops/reconciler.py", "_uncertain"): "find `started` writes whose attempt ended in the ledger",
}


def profiled(reconciler: Reconciler) -> tuple[float, dict[str, float]]:
    """One pass under cProfile: its seconds, and the seconds spent in each of PARTS. Raises if
    the pass made no call of one of them: it has moved or been renamed, and PARTS must follow."""
    profile = cProfile.Profile()
    began = time.perf_counter()
    profile.runcall(reconciler.run_pass)
    took = time.perf_counter() - began
    spent: dict[tuple[str, str], float] = {}
    for (filename, _, function), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items():
        for module, name in PARTS:
            if function == name and filename.endswith(f"remit/{module}"):
                spent[module, name] = spent.get((module, name), 0.0) + cumulative
    unseen = [f"remit/{module}:{name}" for module, name in PARTS if (module, name) not in spent]
    if unseen:
        raise RuntimeError(
            f"the profiled pass called no {', '.join(unseen)}: update PARTS in "
            "bench/reconcile.py to where a pass spends its time now"
        )
    return took, {PARTS[key]: spent[key] for key in PARTS}


def timed_passes(
    db: Database,
    app: App,
    window: list[str],
    result: Passes,
    repeats: int = PASSES,
    profile: bool = True,
) -> None:
    """`repeats` moving passes, each on a freshly opened window, alternating with idle passes;
    then, if `profile`, one moving pass under cProfile."""
    client = db.client(app.name)
    reconciler = Reconciler(
        run_store(db, app.name),
        client,
        version=app.version,
        live_versions=lambda: {app.version},
        tasks=TaskOpener(db, app.name),
    )

    def check(report: Report, expect: int) -> None:
        assert not report.errors, report.errors
        assert len(report.actions) == expect, f"{len(report.actions)} actions, not {expect}"
        assert all((a.kind, a.status) == ("conclude", "done") for a in report.actions)
        assert count(db, "done") == result.size, "a run was left unconcluded"

    with logs_discarded():
        try:
            check(reconciler.run_pass(), 0)  # warms the pools; not counted
            for _ in range(repeats):
                open_window(db, window)
                assert count(db, "running") == len(window)
                took, report = timed(reconciler)
                check(report, len(window))
                result.moved.append(took)
                took, report = timed(reconciler)
                check(report, 0)
                result.idle.append(took)
            if profile:
                open_window(db, window)
                took, result.parts = profiled(reconciler)
                assert count(db, "done") == result.size
                result.parts["the whole pass, under cProfile"] = took
        finally:
            client.destroy()


def passes(size: int, folder: Path, repeats: int = PASSES, profile: bool = True) -> Passes:
    """Build a database of `size` runs, 1 % of them to move, and time `repeats` passes of each
    kind over it (and, if `profile`, one more moving pass under cProfile)."""
    result = Passes(size=size, moving=max(1, round(size * MOVING)))
    with database(folder) as (db, url):
        app = load_app(APP)
        began = time.perf_counter()
        window = real_runs(db, url, app, result.moving)
        result.built["real"] = time.perf_counter() - began
        began = time.perf_counter()
        fill(db, window, size - result.moving)
        vacuum(db)
        result.built["fill"] = time.perf_counter() - began
        with db.engine.connect() as conn:
            exist = conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one()
        assert exist == size == count(db, "done"), f"{exist} runs exist, {size} wanted, all done"
        timed_passes(db, app, window, result, repeats, profile)
    return result


def measure(
    *, size: Size, folder: Path, sizes: tuple[int, ...] = (), profile: bool = True
) -> tuple[list[Figure], list[Passes]]:
    """Run the passes at each of `sizes` (by default, `size`'s); print `BENCH` lines and return
    the figures. Without `profile`, no pass runs under cProfile (bench/compare.py: an older
    version's parts lie elsewhere)."""
    sizes = sizes or size.pick(smoke=(1_000,), quick=(10_000,), full=(10_000, 100_000))
    repeats = size.pick(smoke=1, quick=PASSES, full=PASSES)
    figures: list[Figure] = []
    results: list[Passes] = []

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    for runs_made in sizes:
        result = passes(runs_made, folder, repeats, profile)
        results.append(result)
        label = f"{runs_made // 1000}k"
        moved, idle = result.moved, result.idle
        goal = " (goal ≤ 200)" if runs_made == 10_000 else ""
        report(
            f"reconcile_{label}_ms",
            statistics.median(moved) * 1000,
            "ms",
            f"one pass, {runs_made:,} runs of which {result.moving:,} to conclude: median of "
            f"{repeats} (min {min(moved) * 1000:.0f}, max {max(moved) * 1000:.0f}){goal}",
        )
        report(
            f"reconcile_{label}_idle_ms",
            statistics.median(idle) * 1000,
            "ms",
            f"one pass, the same {runs_made:,} runs with none to move: median of {repeats} "
            f"(min {min(idle) * 1000:.1f}, max {max(idle) * 1000:.1f})",
        )
        for part, seconds in result.parts.items():
            print(f"  {seconds * 1000:8.1f} ms  {part}", flush=True)
        print(
            f"  ({runs_made:,} runs built in {result.built['real']:.0f} s for the "
            f"{result.moving:,} real ones and {result.built['fill']:.0f} s for the rest)",
            flush=True,
        )
    return figures, results


def verdict(results: list[Passes]) -> list[str]:
    """The goal at 10,000 runs, and how each kind of pass grows from the smallest size to the
    largest, as sentences (each followed by a blank line)."""
    first, last = results[0], results[-1]
    moving = statistics.median(first.moved) * 1000
    lines = [
        f"Goal ≤ 200 ms for a pass over {first.size:,} runs: "
        + ("met" if moving <= 200 else "**missed**")
        + f" ({moving:.0f} ms, median).",
        "",
    ]
    if last is not first:
        lines += [
            f"From {first.size:,} to {last.size:,} runs, with {last.moving / first.moving:.0f} "
            "times as many to move, the moving pass takes "
            f"{statistics.median(last.moved) / statistics.median(first.moved):.1f} times as "
            "long and the idle pass "
            f"{statistics.median(last.idle) / statistics.median(first.idle):.1f} times as long.",
            "",
        ]
    return lines


def write(figures: list[Figure], results: list[Passes], *, command: str) -> None:
    sizes = [f"{r.size:,} runs ({r.moving:,} to move)" for r in results]
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres on the same machine, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        f"Each size is its own fresh database. {MOVING:.0%} of the runs need moving and are "
        "real: runs of the bench app's `bump` workflow (3 ops, fakes) served to the end by a "
        "`remit worker` process, which is then stopped; then each run's row is set back to "
        "`running` with no outcome, the window a worker dying between an attempt's end and its "
        "status write leaves (its DBOS workflow ended SUCCESS). The rest are finished runs "
        "copied from the real ones under new ids: a `done` run row and 3 `ok` ledger rows each, "
        f"bulk-inserted in batches of {BATCH:,} runs (one executemany for their run rows, one "
        "for their ledger rows), and their DBOS rows (status, input, "
        "output, 3 step checkpoints) copied inside Postgres, so every table a pass may read "
        "holds all N runs; then `VACUUM ANALYZE`. The benchmark's own process runs "
        "`Reconciler.run_pass()` as a worker does (the app's task opener, every live worker on "
        "its version, log lines formatted and written to /dev/null), timed wall-clock around "
        "the call, after one untimed pass that warms the connection pools. "
        f"{PASSES} moving passes, each on a freshly opened window and each checked to have "
        f"concluded exactly the window's runs `done`, alternate with {PASSES} idle passes over "
        "the same runs with the window closed, checked to have done nothing.",
        "",
        *figure_table(figures),
        "",
        *verdict(results),
        "Where a moving pass spends its time: one more moving pass at each size, under cProfile, "
        "cumulative milliseconds in each part. cProfile slows the Python side of every call "
        "(compare its whole pass with the median above): read the shares, not the sums.",
        "",
        "| part | " + " | ".join(sizes) + " |",
        "|---|" + "---|" * len(results),
        *[
            f"| {part} | " + " | ".join(f"{r.parts[part] * 1000:.1f}" for r in results) + " |"
            for part in results[0].parts
        ],
    ]
    write_section("Reconciler: one pass against the runs that exist", "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    Size.add_options(
        parser,
        quick="10,000 runs only (not 100,000)",
        smoke="1,000 runs, one pass of each kind: only that it runs",
    )
    args = parser.parse_args()
    size = Size.of(parser, args)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    figures, results = measure(size=size, folder=folder)
    if args.write:
        write(figures, results, command=f"python bench/reconcile.py{size.flag}")


if __name__ == "__main__":
    main()

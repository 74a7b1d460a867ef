"""Commits and statements per run: bare DBOS's 3-step workflow against remit's 3-op workflow.

    .venv/bin/python bench/commits.py [--quick | --smoke] [--only postgres|sqlite]

One process serves both workflows (as the sequential benchmark does, bench/bench.py), and runs
them one at a time, each started through its queue and waited for. Every statement and commit
SQLAlchemy sends is counted, by the thread that sends it: the thread that starts the run and
DBOS's executor threads, which run attempts. The queue's own threads (their polls, which come
as often on an idle queue as on a busy one, and the dequeue) are left out of both sides.

Prints `BENCH commits_<side>_<db>` and `BENCH statements_<side>_<db>` (per run), and the
statements of remit's run that neither side shares, with where in remit each is sent from. Run
against another version of remit with `PYTHONPATH=<its checkout>/src` (bench/compare.py does).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa
from common import ROOT, Size, deadline, drop_database, fresh_database

from remit.app import load_app
from remit.core.settings import Settings
from remit.serve.worker import Worker

APP = ROOT / "bench" / "apps" / "bench_app"
POLL = 0.01
WARMUP = 3
RESULT_TIMEOUT = 60.0  # seconds, at most, for one run's result


class Counter:
    """Statements and commits sent while `counting` is set, by the threads that do a run's
    work (not the queue's)."""

    def __init__(self) -> None:
        self.counting = threading.Event()
        # Set while the main thread starts a run (what it sends while waiting is not the run's).
        self.starting = threading.Event()
        self.lock = threading.Lock()
        self.statements: collections.Counter[str] = collections.Counter()
        self.commits = 0

    def install(self) -> None:
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._statement)
        sa.event.listen(sa.engine.Engine, "commit", self._commit)

    def remove(self) -> None:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", self._statement)
        sa.event.remove(sa.engine.Engine, "commit", self._commit)

    def clear(self) -> None:
        with self.lock:
            self.statements.clear()
            self.commits = 0

    def _ours(self) -> bool:
        name = threading.current_thread().name
        if name == "MainThread":
            return self.starting.is_set()
        return name.startswith(("dbos-executor", "remit-call"))

    def _statement(self, conn: object, cursor: object, statement: str, *rest: object) -> None:
        if not self.counting.is_set() or not self._ours():
            return
        what = re.sub(r"\s+", " ", statement).strip()[:70]
        if "remit_" in statement:
            frames = [f for f in traceback.extract_stack() if "/remit/" in f.filename]
            if frames:
                what += f"  ({Path(frames[-1].filename).name}:{frames[-1].name})"
        with self.lock:
            self.statements[what] += 1

    def _commit(self, conn: object) -> None:
        if self.counting.is_set() and self._ours():
            with self.lock:
                self.commits += 1


def count(kind: str, runs: int, folder: Path) -> dict[str, tuple[float, float, list[str]]]:
    """Per side (bare, remit): commits per run, statements per run, and the statements."""
    # Imported once `common` has made an older remit's modules answer under today's names.
    import bare  # bench/bare.py, beside this file

    url = fresh_database(kind, folder)
    app = load_app(APP)
    settings = replace(
        Settings.from_env(APP, environ={"REMIT_DATABASE_URL": url}), fakes=True, poll_interval=POLL
    )
    worker = Worker(app, settings)
    worker.start(before_launch=bare.register)
    bare_client = bare.client(worker.db, app.name)
    bare.register_queue(bare_client, poll=POLL, worker_concurrency=16)
    wf = app.workflow("bump")
    counter = Counter()
    counter.install()
    found: dict[str, tuple[float, float, list[str]]] = {}
    try:
        for side in ("bare", "remit"):
            for i in range(WARMUP + runs):
                if i == WARMUP:
                    counter.clear()
                    counter.counting.set()
                counter.starting.set()
                if side == "bare":
                    handle = bare_client.enqueue(
                        {"workflow_name": bare.WORKFLOW, "queue_name": bare.QUEUE}, f"b-{i}"
                    )
                    counter.starting.clear()
                else:
                    run = worker.runtime.runs.start(
                        worker.client, wf, {"item": f"r-{i}"}, started_by="bench"
                    )
                    counter.starting.clear()
                    handle = worker.client.retrieve_workflow(run.workflow_id)
                with deadline(RESULT_TIMEOUT, f"commits on {kind}: {side} run {i}'s result"):
                    while handle.get_status().status not in ("SUCCESS", "ERROR"):
                        time.sleep(0.002)
            counter.counting.clear()
            listed = [f"{n / runs:5.1f}  {what}" for what, n in counter.statements.most_common()]
            total = sum(counter.statements.values())
            found[side] = (counter.commits / runs, total / runs, listed)
    finally:
        counter.remove()
        bare_client.destroy()
        worker.stop(timeout=0)
        drop_database(url)
    return found


def measure(*, size: Size, folder: Path, kinds: tuple[str, ...] = ("postgres", "sqlite")) -> None:
    runs = size.pick(smoke=2, quick=20, full=50)
    for kind in kinds:
        short = "pg" if kind == "postgres" else kind
        found = count(kind, runs, folder)
        for side, (commits, statements, _) in found.items():
            print(f"BENCH commits_{side}_{short} {commits:.2f} per-run", flush=True)
            print(f"BENCH statements_{side}_{short} {statements:.2f} per-run", flush=True)
        print(f"# remit's statements per run on {kind}:")
        for line in found["remit"][2]:
            print(f"#   {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    Size.add_options(parser, quick="20 runs of each", smoke="2 runs of each")
    parser.add_argument("--only", choices=("postgres", "sqlite"))
    args = parser.parse_args()
    if args.write:
        sys.exit("bench/commits.py writes nothing: BENCHMARKS.md quotes what it prints")
    folder = Path("/tmp") / "remit-bench"
    folder.mkdir(exist_ok=True)
    kinds = (args.only,) if args.only else ("postgres", "sqlite")
    measure(size=Size.of(parser, args), folder=folder, kinds=kinds)


if __name__ == "__main__":
    main()

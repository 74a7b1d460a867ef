"""What an op call costs since every call got a `started` row and a thread per try, measured
against the version before, in the same run.

    .venv/bin/python bench/calls.py [--quick | --smoke] [--write] [--before REV]
    .venv/bin/python bench/bench.py --only calls [--quick | --smoke] [--write]    # `make bench` runs it too

Every try of a driver runs on a thread of its own, so that remit can stop waiting for it at the
op's timeout (`invoke_within` in `execution/tries.py`). For a while every op call, reads
included, also wrote its durable `started` ledger row before its driver was called; since op
calls write the ledger in DBOS's own step transactions (`execution/checkpoint.py`), a read in a
run that costs nothing writes its one row again, in its step's checkpoint, unless it runs past a
second. Both sides are measured here against `BEFORE`, the version before threads per try, when
a read with no cost got its only row when it answered, checked out into a temporary git
worktree beside this one.

One child process per side, database and round serves a workflow of `READS` reads of a fake
connector in a `Harness` (a worker in that process), on a fresh database, and runs it one run
at a time from start to result, after a few runs that warm up and are not counted. The sides
take turns, round by round (before first, then after first), so that what else the machine
does falls on both alike. The child imports only what both versions have (`remit.op`,
`remit.workflow`, `remit.testing.Harness`, the worker's run store and DBOS client), from the
side's own `src`.

Each run gives two times: the run's, from its start to its result (the queue's poll
included), and the reads' alone, as the workflow measures them around its `ctx.call`s. The
after side also times a fake's call through `invoke_within` against the same call made
directly, one after the other, many times: what a thread per try adds to a call by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    Figure,
    Size,
    deadline,
    drop_database,
    figure_table,
    fresh_database,
    write_section,
)
from pydantic import BaseModel

from remit import (
    App,
    CallContext,
    Connector,
    Context,
    Driver,
    DriverError,
    Fake,
    Queue,
    implements,
    op,
    workflow,
)

# The version before reads got a `started` row and tries a thread each.
BEFORE = "9ecb691"
READS = 5
POLL = 0.01
RESULT_POLL = 0.002
WARMUP = 10
INVOKES = 2000
RESULT = "CALLS-RESULT "
RESULT_TIMEOUT = 60.0  # seconds, at most, for one run's result
CHILD_TIMEOUT = 600.0  # seconds, at most, for one child
GIT_TIMEOUT = 120.0  # seconds, at most, for git to add or remove the worktree


class ItemRef(BaseModel):
    item: str


class Item(BaseModel):
    item: str
    count: int


get_item = op("shelf.items.get", effect="read", input=ItemRef, output=Item)


class ShelfDriver(Driver):
    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        raise DriverError("the benchmark runs on the fake", retryable=False)


class FakeShelf(Fake):
    @implements(get_item)
    def get(self, input: ItemRef, call: CallContext) -> Item:
        return Item(item=input.item, count=len(input.item))


shelf = Connector("shelf", ops=[get_item], driver=ShelfDriver, fake=FakeShelf)


@workflow(name="reads", input=ItemRef, uses=[get_item], queue="work")
def reads(ctx: Context, input: ItemRef) -> float:
    """`READS` reads, one after another; returns the seconds they took."""
    began = time.perf_counter()
    for _ in range(READS):
        ctx.call(get_item, item=input.item)
    return time.perf_counter() - began


bench_app = App(
    name="calls-bench",
    workflows=[reads],
    connectors=[shelf],
    queues=[Queue("work", worker_concurrency=16)],
)


# The child: one side, one database, one round.


def child(url: str, runs: int, warmup: int = WARMUP, invokes: int = INVOKES) -> dict[str, Any]:
    """Time `runs` sequential runs of `reads` in a harness on `url` (after `warmup` more), with
    where their op calls' time goes, and, where the version has `invoke_within`, a fake's call
    through it against the same call made directly, `invokes` times."""
    import remit.execution.calls
    from remit.testing import Harness

    wall: list[float] = []
    counted: list[str] = []
    parts: dict[str, list[float]] = {
        "op_call": [],
        "ledger_begin": [],
        "ledger_finish": [],
        "tries": [],
    }
    with Harness(bench_app, database_url=url, poll_interval=POLL) as harness:
        worker = harness.worker
        caller = worker.runtime.caller
        statements = _statements(caller.ledger.db.engine)
        _timed(caller, "call", parts["op_call"], statements)
        # A read's `started` row: `begin_read` since it takes one statement, `begin` before
        # that; the version before wrote none.
        for begin in ("begin", "begin_read"):
            if hasattr(caller.ledger, begin):
                _timed(caller.ledger, begin, parts["ledger_begin"])
        # Its outcome's row: `finish`, or since op calls write with their step's checkpoint, a
        # free read's whole row (`settle_read_in`, on DBOS's thread, outside the op call).
        for finish in ("finish", "settle_read_in"):
            if hasattr(caller.ledger, finish):
                _timed(caller.ledger, finish, parts["ledger_finish"])
        _timed(remit.execution.calls, "make_tries", parts["tries"])
        wf = bench_app.workflow("reads")
        for i in range(warmup + runs):
            if i == warmup:
                for timings in parts.values():
                    timings.clear()
                statements.kinds.clear()
            began = time.perf_counter()
            run = worker.runtime.runs.start(
                worker.client, wf, {"item": f"item-{i}"}, started_by="bench"
            )
            with deadline(RESULT_TIMEOUT, f"run {run.run_id}'s result"):
                worker.client.retrieve_workflow(run.workflow_id).get_result(
                    polling_interval_sec=RESULT_POLL
                )
            took = time.perf_counter() - began
            if i >= warmup:
                wall.append(took)
                counted.append(run.run_id)
        # What each run's reads took, as its workflow measured them: its output.
        finished = [harness.runs.get(run_id) for run_id in counted]
        assert all(r.status == "done" for r in finished), "every run is done"
        spans = [float(r.output) for r in finished]
        fake = harness.fake("shelf")
    per_read = {k: n / (runs * READS) for k, n in statements.kinds.items()}
    return {
        "src": remit.__file__,
        "wall": wall,
        "reads": spans,
        **parts,
        **_invokes(fake, invokes),
        "statements": per_read,
    }


class _Statements(threading.local):
    """What remit's engine runs on the thread of an op call while it is counted."""

    def __init__(self) -> None:
        self.on = False


@dataclass
class Statements:
    """The statements (by first word) and commits of remit's engine made inside op calls."""

    kinds: dict[str, int]
    thread: _Statements


def _statements(engine: Any) -> Statements:
    import sqlalchemy as sa

    counted = Statements(kinds={}, thread=_Statements())

    def note(kind: str) -> None:
        if counted.thread.on:
            counted.kinds[kind] = counted.kinds.get(kind, 0) + 1

    def statement(conn: Any, cursor: Any, text: str, *rest: Any) -> None:
        note(text.split(None, 1)[0].upper())

    sa.event.listen(engine, "before_cursor_execute", statement)
    sa.event.listen(engine, "commit", lambda conn: note("COMMIT"))
    return counted


def _timed(owner: Any, name: str, into: list[float], counting: Statements | None = None) -> None:
    """Time every call of `owner.name` into `into` (the method itself still runs), counting
    the statements made meanwhile on its thread into `counting`."""
    inner = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        if counting is not None:
            counting.thread.on = True
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - began)
            if counting is not None:
                counting.thread.on = False

    setattr(owner, name, timed)


def _invokes(fake: Fake, invokes: int = INVOKES) -> dict[str, list[float]]:
    """A fake's read through `invoke_within` and made directly, in turn, `invokes` times (after
    a hundred, or a tenth as many, that warm up)."""
    try:
        from remit.execution.tries import invoke_within
    except ImportError:
        return {}
    request = ItemRef(item="item-0")
    call = CallContext(
        op=get_item, idempotency_key="bench", run_id="run_bench", attempt=1, actor="bench"
    )
    threaded: list[float] = []
    direct: list[float] = []
    warmup = min(100, invokes // 10)
    for i in range(warmup + invokes):
        began = time.perf_counter()
        fake.invoke(get_item, request, call)
        between = time.perf_counter()
        invoke_within(fake, get_item, request, call, 120.0)
        took = time.perf_counter() - between
        if i >= warmup:
            direct.append(between - began)
            threaded.append(took)
    return {"invoke_direct": direct, "invoke_within": threaded}


# The parent: the rounds, the sides, the figures.


@dataclass(frozen=True)
class Side:
    name: str
    src: Path


@contextmanager
def before_tree(rev: str, folder: Path) -> Any:
    """`rev` checked out into a temporary worktree of this repository, removed after."""
    tree = folder / f"remit-before-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
        timeout=GIT_TIMEOUT,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=True,
            capture_output=True,
            timeout=GIT_TIMEOUT,
        )


def one(
    side: Side, kind: str, runs: int, folder: Path, warmup: int = WARMUP, invokes: int = INVOKES
) -> dict[str, Any]:
    """One child's figures: `runs` runs of `side` on a fresh `kind` database, after `warmup`
    more, and `invokes` calls each way of a fake's read."""
    url = fresh_database(kind, folder)
    env = {**os.environ, "PYTHONPATH": str(side.src)}
    command = [sys.executable, __file__, "child", url, str(runs), str(warmup), str(invokes)]
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT
        )
    except subprocess.TimeoutExpired as stuck:
        said = stuck.stderr.decode() if isinstance(stuck.stderr, bytes) else stuck.stderr or ""
        raise RuntimeError(
            f"the {side.name} side on {kind} was still running after {CHILD_TIMEOUT:g} s, and "
            f"was killed; the end of its output:\n{said[-3000:]}"
        )
    finally:
        drop_database(url)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"the {side.name} side on {kind} exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    figures: dict[str, Any] = json.loads(lines[-1][len(RESULT) :])
    if not Path(figures["src"]).resolve().is_relative_to(side.src.resolve()):
        raise RuntimeError(f"the {side.name} side imported remit from {figures['src']}")
    return figures


def measure(*, size: Size, folder: Path, before: str = BEFORE) -> list[Figure]:
    rounds, runs = size.pick(smoke=(1, 2), quick=(2, 40), full=(6, 50))
    warmup, calls_made = size.pick(smoke=(1, 20), quick=(WARMUP, INVOKES), full=(WARMUP, INVOKES))
    after = Side("after", ROOT / "src")
    figures: list[Figure] = []
    invokes: dict[str, list[float]] = {}
    parts: list[Figure] = []
    with before_tree(before, folder) as tree:
        sides = (Side("before", tree / "src"), after)
        for kind, short in (("sqlite", "sqlite"), ("postgres", "pg")):
            got: dict[str, dict[str, list[float]]] = {s.name: {} for s in sides}
            statements: dict[str, dict[str, float]] = {}
            for n in range(rounds):
                for side in sides if n % 2 == 0 else sides[::-1]:
                    print(f"# calls: {kind} round {n + 1}/{rounds}, {side.name}", flush=True)
                    made = one(side, kind, runs, folder, warmup, calls_made)
                    statements[side.name] = made.pop("statements")
                    for name, values in made.items():
                        if name.startswith("invoke"):
                            invokes.setdefault(name, []).extend(values)
                        elif isinstance(values, list):
                            got[side.name].setdefault(name, []).extend(values)
            figures += _figures(short, got)
            parts += _parts(short, got) + _statement_figures(short, statements)
    figures += parts + _invoke_figures(invokes)
    for name, value, unit, note in figures:
        print(f"BENCH {name} {value:.3f} {unit}  # {note}", flush=True)
    return figures


def _figures(db: str, got: dict[str, dict[str, list[float]]]) -> list[Figure]:
    """The runs' and the reads' times on one database, each side's and after ÷ before."""
    b, a = got["before"], got["after"]
    rows: list[Figure] = []
    for what, label in (("wall", "run, start to result"), ("reads", f"{READS} reads")):
        for side, values in (("before", b[what]), ("after", a[what])):
            rows.append(
                (
                    f"calls_{what}_{side}_mean_ms_{db}",
                    statistics.mean(values) * 1000,
                    "ms",
                    f"{side}: the {label}, mean of {len(values)} runs",
                )
            )
            rows.append(
                (
                    f"calls_{what}_{side}_p50_ms_{db}",
                    statistics.median(values) * 1000,
                    "ms",
                    f"{side}: the {label}, median",
                )
            )
        rows.append(
            (
                f"calls_{what}_ratio_{db}",
                statistics.mean(a[what]) / statistics.mean(b[what]),
                "x",
                f"after ÷ before, the {label} (means)",
            )
        )
        rows.append(
            (
                f"calls_{what}_ratio_p50_{db}",
                statistics.median(a[what]) / statistics.median(b[what]),
                "x",
                f"after ÷ before, the {label} (medians)",
            )
        )
    added, margin = _difference(a["reads"], b["reads"])
    rows.append(
        (
            f"calls_per_read_added_ms_{db}",
            added / READS * 1000,
            "ms",
            f"what a read costs more: the reads' means' difference ÷ {READS} "
            f"(± {margin / READS * 1000:.2f} ms, 95 %)",
        )
    )
    return rows


def _difference(after: list[float], before: list[float]) -> tuple[float, float]:
    """The difference of two samples' means, and its 95 % margin (normal approximation)."""
    error = (
        statistics.variance(after) / len(after) + statistics.variance(before) / len(before)
    ) ** 0.5
    return statistics.mean(after) - statistics.mean(before), 1.96 * error


def _parts(db: str, got: dict[str, dict[str, list[float]]]) -> list[Figure]:
    """Where a read's time goes on one database: its op call, and its ledger writes in it."""
    rows: list[Figure] = []
    for side in ("before", "after"):
        taken = got[side]
        for part, what in (
            ("op_call", "the op call (`OpCaller.call`: ledger writes, tries, outcome)"),
            ("ledger_begin", "its `started` row (`LedgerStore.begin_read`)"),
            (
                "ledger_finish",
                "its outcome's row (`LedgerStore.finish`; now `settle_read_in`, in its step's "
                "checkpoint)",
            ),
            ("tries", "its tries (`make_tries`: the driver's call; after, on a thread of its own)"),
        ):
            values = taken.get(part, [])
            if not values:  # a read wrote no `started` row before, nor does now
                continue
            rows.append(
                (
                    f"calls_{part}_{side}_ms_{db}",
                    statistics.mean(values) * 1000,
                    "ms",
                    f"{side}: {what}, mean of {len(values)} reads (median "
                    f"{statistics.median(values) * 1000:.2f} ms)",
                )
            )
    return rows


def _statement_figures(db: str, statements: dict[str, dict[str, float]]) -> list[Figure]:
    """The statements and commits remit's engine makes for one read, on each side."""
    rows: list[Figure] = []
    for side in ("before", "after"):
        kinds = statements[side]
        made = ", ".join(f"{kind} {n:g}" for kind, n in kinds.items())
        rows.append(
            (
                f"calls_commits_per_read_{side}_{db}",
                kinds.get("COMMIT", 0.0),
                "commits",
                f"{side}: transactions a read commits in its op call on remit's engine "
                f"({made or 'none'}; now its row commits with its step's checkpoint)",
            )
        )
    return rows


def _invoke_figures(got: dict[str, list[float]]) -> list[Figure]:
    """A fake's read through `invoke_within` against the same read made directly."""
    direct, threaded = got["invoke_direct"], got["invoke_within"]
    return [
        (
            "calls_invoke_direct_us",
            statistics.median(direct) * 1e6,
            "µs",
            f"median of {len(direct)} direct calls of a fake's read (mean "
            f"{statistics.mean(direct) * 1e6:.1f} µs)",
        ),
        (
            "calls_invoke_within_us",
            statistics.median(threaded) * 1e6,
            "µs",
            "median of the same call through `invoke_within` (a thread started, waited for, "
            f"ended; mean {statistics.mean(threaded) * 1e6:.1f} µs)",
        ),
        (
            "calls_invoke_added_us",
            (statistics.median(threaded) - statistics.median(direct)) * 1e6,
            "µs",
            "what a thread per try adds to a try by itself (the medians' difference)",
        ),
    ]


def write(figures: list[Figure], *, command: str, before: str = BEFORE) -> None:
    runs = [f for f in figures if f[0].startswith(("calls_wall", "calls_reads", "calls_per"))]
    parts = [f for f in figures if f not in runs]
    lines = [
        f"`{command}` on a shared machine of {os.cpu_count()} cores (other work ran beside "
        f"it), {time.strftime('%Y-%m-%d')}. After is this version; before is "
        f"`{before}`, the version before every call got a `started` row and every try a "
        "thread, checked out into a temporary worktree. Each side runs in child processes of "
        "its own, on a fresh database each, the sides taking turns round by round. A run is a "
        f"workflow of {READS} reads of a fake connector served by a `Harness` (its queue "
        f"polled every {POLL} s), timed one run at a time from its start to its result; its "
        f"reads alone are timed by the workflow around its `ctx.call`s; the first {WARMUP} "
        "runs of each child are not counted.",
        "",
        *figure_table(runs),
        "",
        "Where a read's time goes, timed around the worker's `OpCaller.call` and its "
        "`LedgerStore` and `make_tries` in the same runs, with the statements a read makes on "
        "remit's engine; and a fake's read made through `invoke_within` against the same read "
        f"made directly, in turn, {INVOKES} times in each after child once its harness has "
        "stopped:",
        "",
        *figure_table(parts),
        "",
        "A read that costs nothing now writes its `started` row in one statement (an insert "
        "that does nothing if the key is taken), then its outcome on it: on SQLite two commits "
        "where it made one; on Postgres two before as well, since the insert of its only row "
        "reported no row count (it returns the new row's id) and an update of the same row "
        "followed. Each try starts and joins a thread. What that buys: a read in flight is in the ledger, so "
        "`remit show` shows it while it runs and the reconciler marks it `abandoned` once its "
        "attempt has ended; and a driver that hangs is given up on at its op's timeout "
        "(`op(timeout=)`, `REMIT_OP_TIMEOUT`) instead of holding its run, and a worker's "
        "thread, for ever.",
    ]
    write_section("Op calls: a started row for every read, a thread per try", "\n".join(lines))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        url, runs, warmup, invokes = sys.argv[2:6]
        figures = child(url, int(runs), int(warmup), int(invokes))
        print(RESULT + json.dumps(figures), flush=True)
        return
    parser = argparse.ArgumentParser()
    Size.add_options(
        parser,
        quick="fewer rounds and runs",
        smoke="one round of 2 runs a side and database: only that it runs",
    )
    parser.add_argument(
        "--before", default=BEFORE, help=f"the version to compare (default {BEFORE})"
    )
    args = parser.parse_args()
    size = Size.of(parser, args)
    with tempfile.TemporaryDirectory() as folder:
        figures = measure(size=size, folder=Path(folder), before=args.before)
    if args.write:
        write(figures, command=f"python bench/calls.py{size.flag}", before=args.before)


if __name__ == "__main__":
    main()

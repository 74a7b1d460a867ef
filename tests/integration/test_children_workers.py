"""Child runs under failure: a parent of a hundred children on two workers, one of them
SIGKILLed mid-way, gets every child run once and resumes once; a parent cancelled while its
children run takes them with it (but those started detached, which finish)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.core.database import Database
from remit.core.runs import RunStore
from remit.core.schema import audit, children, resumes
from remit.execution.waits import ChildStart, WaitSweep
from remit.ops.messages import Child
from remit.ops.registry import WorkerRegistry
from remit.people.ending import ORPHANS_ACTOR, cancel_run
from remit.testing import Harness
from tests.processes import Workers
from tests.waits_app import Line, make_waits_app, refund_line
from tests.waits_workers import APP_NAME, WAITS_CRASH_APP, executor_of, start_run, until

ROOT = Path(__file__).resolve().parents[2]
CANCELLER = "tests.integration.test_children_workers"  # this module, run as a canceller that dies
FAST = {
    "REMIT_HEARTBEAT_INTERVAL": "0.25",
    "REMIT_DEAD_AFTER": "2",
    "REMIT_SWEEP_INTERVAL": "0.5",
    "CRASH_JITTER_MS": "400",
}


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    procs = Workers(database_url, tmp_path, app=WAITS_CRASH_APP, **FAST)
    yield procs
    procs.close()


@pytest.mark.crash
def test_a_hundred_children_on_two_workers_one_killed_each_run_once(workers: Workers) -> None:
    procs = {"wa": workers.start("wa"), "wb": workers.start("wb")}
    for proc in procs.values():
        workers.wait_serving(proc)
    parent = start_run(workers, "batch", {"lines": 100})

    # Mid-way: the worker running the parent is killed while it starts its children, with
    # children of its own in flight (each posts its entry after a pause of up to 0.4 s).
    until(lambda: len(workers_children(workers, parent)) >= 30, "30 children")
    victim = executor_of(workers, f"{parent}:1")
    procs[victim].send_signal(signal.SIGKILL)
    procs[victim].wait(10)
    survivor = ({"wa", "wb"} - {victim}).pop()
    assert len(workers_children(workers, parent)) < 100, "the kill came after every start"
    assert len(workers.effects()) < 100, "the kill came after every child had run"

    run = workers.wait_finished(parent, timeout=120)

    assert run.status == "done", f"{run.error}\n{workers.logs()}"
    assert run.output is not None
    assert run.output["lines"] == list(range(100))
    kids = workers_children(workers, parent)
    assert len(kids) == 100
    # Each child ran once: one run each, done on its first attempt, its post applied once.
    child_runs = [workers.runs.get(kid) for kid in kids]
    assert Counter(r.status for r in child_runs) == {"done": 100}
    assert run.output["entries"] == [f"en_{kid}:1" for kid in kids]
    posted = Counter(e["idempotency_key"] for e in workers.effects())
    assert posted == {f"{kid}:1": 1 for kid in kids}
    rows = workers.ledger.list(op_id="books.entries.post", limit=1000)
    assert Counter(r.run_id for r in rows if r.status == "ok") == dict.fromkeys(kids, 1)
    # The parent resumed once: attempt 1 started and waited, attempt 2 took the ends.
    assert (run.attempt, run.workflow_id) == (2, f"{parent}:2")
    client = workers.db.client(APP_NAME)
    try:
        attempts = client.list_workflows(
            workflow_id_prefix=f"{parent}:", load_input=False, load_output=False
        )
        assert sorted((s.workflow_id, s.status) for s in attempts) == [
            (f"{parent}:1", "SUCCESS"),
            (f"{parent}:2", "SUCCESS"),
        ]
    finally:
        client.destroy()
    with workers.db.engine.connect() as conn:
        assert conn.execute(sa.select(resumes)).all() == []
    registry = {row.executor_id: row for row in WorkerRegistry(workers.db).list()}
    assert registry[victim].taken_over_by == survivor
    assert executor_of(workers, f"{parent}:1") == survivor  # the parent was taken over too


def workers_children(workers: Workers, parent: str) -> list[str]:
    """The children of `parent`, in the order it started them."""
    with workers.db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(children.c.run_id)
                .where(children.c.parent_run_id == parent)
                .order_by(children.c.step_id)
            ).scalars()
        )


class StartTwice:
    """The worker's `start` (the body of a `ctx.start` step) run twice each time, as DBOS runs
    a step's body again when its worker died between the body's commit and the checkpoint."""

    def __init__(self, h: Harness) -> None:
        self.waits = h.worker.runtime.waits
        self.start = self.waits.start
        self.answers: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.waits.start = self  # type: ignore[method-assign,assignment]

    def __call__(self, start: ChildStart) -> dict[str, Any]:
        first = self.start(start)
        again = self.start(start)
        self.answers.append((first, again))
        return again


def test_a_start_whose_step_runs_again_finds_the_child_it_started(database_url: str) -> None:
    with Harness(make_waits_app(), database_url=database_url) as h:
        twice = StartTwice(h)
        done = h.run("credit-note", {"lines": 3})
        assert (done.status, done.output["total"]) == ("done", 6), done.error
        assert [first == again for first, again in twice.answers] == [True] * 3
        kids = h.client.runs.children(done.run_id)
        assert [k.key for k in kids] == ["line-0", "line-1", "line-2"]
        assert {r.run_id for r in h.client.runs.list(parent=done.run_id)} == {
            k.run_id for k in kids
        }
        assert [h.run_store.get(k.run_id).attempt for k in kids] == [1, 1, 1]


# -- a child's end that did not move its parent on ---------------------------------------------


class MissedWakes:
    """The worker's `ended` (what moves a parent on after its child's end commits) doing
    nothing, as when the child's worker died between the two, or the reconciler wrote the end."""

    def __init__(self, h: Harness) -> None:
        self.missed: list[str] = []
        h.worker.runtime.waits.ended = self.missed.append  # type: ignore[method-assign]


def test_parents_whose_wake_was_missed_are_each_moved_on_by_the_sweep(database_url: str) -> None:
    """However many parents wait for children still running, each parent whose children have
    all ended is found by a sweep before long (here, a sweep that looks at one parent at a
    time), and moved on once."""
    with Harness(make_waits_app(), database_url=database_url, sweep_interval=3600) as h:
        held = [h.start("credit-note", {"lines": 1, "hold": True}).run_id for _ in range(2)]
        for parent in held:
            h.wait(parent, until=("waiting",))
        ready = [h.start("credit-note", {"lines": 1, "hold": True}).run_id for _ in range(2)]
        missed = MissedWakes(h)
        kids = []
        for parent in ready:
            h.wait(parent, until=("waiting",))
            (kid,) = h.client.runs.children(parent)
            h.wait(kid.run_id, until=("waiting",))
            h.client.send(kid.run_id, "go", True)
            assert h.wait(kid.run_id).status == "done"
            kids.append(kid.run_id)
        until(lambda: set(kids) <= set(missed.missed), "the children's ends to be told")
        assert [h.run_store.get(p).status for p in ready] == ["waiting", "waiting"]

        sweep = WaitSweep(h.worker.db, h.worker.client, clock=h.worker.runtime.clock)
        moved = [m for _ in range(6) for m in sweep.due(limit=1)]
        assert sorted(m.run_id for m in moved) == sorted(ready)
        assert {m.why for m in moved} == {"children ended"}
        for parent in ready:
            done = h.wait(parent)
            assert (done.status, done.attempt, done.output["total"]) == ("done", 2, 0)
        assert [h.run_store.get(p).status for p in held] == ["waiting", "waiting"]


class HeldWaitCommit:
    """The worker's waits, whose first `ctx.wait` (a parent's wait for its children) is held
    before its transaction until `enter`, then again once written, before its commit, until
    `go`."""

    def __init__(self, h: Harness) -> None:
        self.waits = h.worker.runtime.waits
        self.db = self.waits.db
        self.wait_children = self.waits.wait_children
        self.inside = threading.local()
        self.enter = threading.Event()
        self.reached = threading.Event()
        self.go = threading.Event()
        self.waits.db = self  # type: ignore[assignment]
        self.waits.wait_children = self.children  # type: ignore[method-assign]

    def children(self, *args: Any) -> dict[str, Any]:
        assert self.enter.wait(30), "the test never let the wait begin"
        self.inside.on = True
        try:
            return self.wait_children(*args)
        finally:
            self.inside.on = False

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        with self.db.begin() as conn:
            yield conn
            if getattr(self.inside, "on", False) and not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(30), "the test never let the wait commit"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_child_ending_as_its_parent_commits_its_wait_moves_the_parent_on(
    database_url: str,
) -> None:
    """The parent's wait has read its child running and is about to commit when the child is
    told to end: the parent moves on once both have committed, without a sweep (a child's
    look for its waiting parent takes no lock, so the wait must not commit after it)."""
    with Harness(make_waits_app(), database_url=database_url, sweep_interval=3600) as h:
        held = HeldWaitCommit(h)
        parent = h.start("credit-note", {"lines": 1, "hold": True}).run_id
        (kid,) = [k.run_id for k in wait_for_children(h, parent, 1)]
        h.wait(kid, until=("waiting",))
        held.enter.set()
        assert held.reached.wait(30)
        with ThreadPoolExecutor(max_workers=1) as pool:
            sent = pool.submit(h.client.send, kid, "go", True)
            deadline = time.monotonic() + 1.5  # for the child to end, if anything lets it
            while not h.run_store.get(kid).finished and time.monotonic() < deadline:
                time.sleep(0.02)
            held.go.set()
            assert sent.result(30).resumed_workflow_id == f"{kid}:2"
        assert h.wait(kid).status == "done"
        done = h.wait(parent, timeout=15)
        assert (done.status, done.attempt, done.output["total"]) == ("done", 2, 0), done.error


def wait_for_children(h: Harness, parent: str, count: int) -> list[Child]:
    deadline = time.monotonic() + 30
    while len(kids := h.client.runs.children(parent)) < count:
        assert time.monotonic() < deadline, f"run {parent} did not start {count} children"
        time.sleep(0.02)
    return kids


# -- a parent cancelled while its children run -------------------------------------------------


class Mixed(BaseModel):
    lines: int = 6
    hold: bool = True


@workflow(name="mixed-note", input=Mixed)
def mixed_note(ctx: Context, input: Mixed) -> int:
    """Starts one child per line, every other one detached, then waits for them all."""
    handles = [
        ctx.start(refund_line, Line(n=n, hold=input.hold), key=f"line-{n}", detached=n % 2 == 1)
        for n in range(input.lines)
    ]
    return sum(r.doubled for r in ctx.wait_all(handles))


def mixed_app() -> App:
    app = make_waits_app()
    return App(
        name=app.name,
        workflows=[*app.workflows.values(), mixed_note],
        connectors=list(app.connectors.values()),
    )


def assert_cancelled_with_its_children(h: Harness, parent: str) -> None:
    """The parent is cancelled; each child it started is cancelled, but the detached ones,
    which go on to finish once told to; no child is left running."""
    assert h.run_store.get(parent).status == "cancelled"
    kids = h.client.runs.children(parent)
    for kid in kids:
        if kid.detached:
            h.wait(kid.run_id, until=("waiting",))
            h.client.send(kid.run_id, "go", True)
    for kid in kids:
        ended = h.wait(kid.run_id)
        assert ended.status == ("done" if kid.detached else "cancelled"), (kid, ended.error)
        h.wait_attempt_ended(kid.run_id, ended.attempt)


def test_a_parent_cancelled_while_its_children_run_takes_them_with_it(database_url: str) -> None:
    with Harness(mixed_app(), database_url=database_url) as h:
        parent = h.start("mixed-note", {"lines": 6}).run_id
        h.wait(parent, until=("waiting",))
        kids = h.client.runs.children(parent)
        assert [k.detached for k in kids] == [False, True] * 3
        for kid in kids[:3]:  # some wait for "go", some may still be starting
            h.wait(kid.run_id, until=("waiting",))
        h.client.runs.cancel(parent)
        assert_cancelled_with_its_children(h, parent)


class HeldStarts:
    """The worker's child starter, held before its `at`th start until the test lets it go."""

    def __init__(self, h: Harness, at: int) -> None:
        self.waits = h.worker.runtime.waits
        self.starter = self.waits.starter
        assert self.starter is not None
        self.at = at
        self.seen = 0
        self.reached = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.waits.starter = self

    def __call__(self, start: ChildStart) -> None:
        self.seen += 1
        if self.seen != self.at:
            assert self.starter is not None
            return self.starter(start)
        self.reached.set()
        assert self.go.wait(30), "the test never let the start go on"
        try:
            assert self.starter is not None
            self.starter(start)
        finally:
            self.done.set()


def test_a_parent_cancelled_while_it_starts_its_children_leaves_none_running(
    database_url: str,
) -> None:
    """The cancel lands inside the start of the third child: its start, after the cancel
    committed (and listed the children to cancel), is refused, and the parent starts no
    other."""
    with Harness(mixed_app(), database_url=database_url) as h:
        held = HeldStarts(h, at=3)
        parent = h.start("mixed-note", {"lines": 6}).run_id
        assert held.reached.wait(30)
        h.client.runs.cancel(parent)
        held.go.set()
        assert held.done.wait(30)
        kids = h.client.runs.children(parent)
        assert [k.key for k in kids] == ["line-0", "line-1"]
        assert_cancelled_with_its_children(h, parent)


class DiesAfterTheCommit:
    """A DBOS client whose process is SIGKILLed when asked to cancel an attempt: the cancel of
    the run has committed, and its children's cancels are not yet made."""

    def cancel_workflow(self, workflow_id: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def _cancel_then_die(url: str, run_id: str) -> None:
    db = Database(url, pool_size=2)
    cancel_run(RunStore(db), DiesAfterTheCommit(), run_id, by="user:ops")  # type: ignore[arg-type]
    sys.exit("the cancel returned: its process was meant to die after the commit")


def test_children_of_a_parent_whose_canceller_died_are_cancelled_by_the_sweep(
    database_url: str,
) -> None:
    with Harness(mixed_app(), database_url=database_url, sweep_interval=0.3) as h:
        parent = h.start("mixed-note", {"lines": 4}).run_id
        h.wait(parent, until=("waiting",))
        for kid in h.client.runs.children(parent):
            h.wait(kid.run_id, until=("waiting",))

        done = subprocess.run(
            [sys.executable, "-m", CANCELLER, database_url, parent],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()
        assert_cancelled_with_its_children(h, parent)
        # The parent's cancel is its canceller's; its children's, the sweep's.
        with h.worker.db.engine.connect() as conn:
            cancels = dict(
                conn.execute(
                    sa.select(audit.c.target, audit.c.actor).where(
                        audit.c.action == "run.cancelled"
                    )
                ).all()
            )
        kids = h.client.runs.children(parent)
        assert cancels == {
            parent: "user:ops",
            **{k.run_id: ORPHANS_ACTOR for k in kids if not k.detached},
        }


if __name__ == "__main__":
    _cancel_then_die(*sys.argv[1:])

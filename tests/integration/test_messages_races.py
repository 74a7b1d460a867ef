"""Messages racing what they move: many senders at once, a send racing the step that begins to
wait, a send while no worker runs, a sender killed between its commit and its fork, a timeout
that passes while no worker runs. Each message is taken once, in the order it was sent, and
each send moves its run on at most once: one attempt per resume, none lost.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.client import Client
from remit.core.errors import KeyReused
from remit.core.outbox import Resume, Resumer
from remit.core.runs import Run
from remit.core.schema import audit, resumes
from remit.core.settings import Settings
from remit.ops.messages import Sent
from remit.testing import Harness, ManualClock
from tests.processes import Workers
from tests.support import create_order, shop
from tests.waits_app import FakeShop, collect
from tests.waits_workers import WAITS_CRASH_APP, start_run

ROOT = Path(__file__).resolve().parents[2]
SENDER = "tests.integration.test_messages_races"  # this module, run as a sender that dies


class Gated(BaseModel):
    count: int = 3
    topic: str = "item"


@workflow(name="gated-collect", input=Gated, uses=[create_order])
def gated_collect(ctx: Context, input: Gated) -> list[Any]:
    """Orders (an op a test can hold), then takes `count` messages on one topic."""
    ctx.call(create_order, sku="sku-1", quantity=1)
    return [ctx.wait_for(input.topic) for _ in range(input.count)]


class Deadline(BaseModel):
    timeout: float
    topic: str = "item"


@workflow(name="await-or-not", input=Deadline)
def await_or_not(ctx: Context, input: Deadline) -> dict[str, Any]:
    return {"got": ctx.wait_for(input.topic, timeout=input.timeout)}


def races_app() -> App:
    return App(name="ledger", workflows=[collect, gated_collect, await_or_not], connectors=[shop])


# -- what every test checks: each message once, in order, and one attempt per resume ---------


def assert_taken_once_in_order(h: Harness, run_id: str, sents: list[Sent]) -> list[Any]:
    """`taken_once` of the run, once it finished (waited for on the harness)."""
    run = h.wait(run_id, timeout=60)
    return taken_once(h.client, run, sents)


def taken_once(client: Client, run: Run, sents: list[Sent]) -> list[Any]:
    """The run finished having taken each distinct message once, at its own step, in the order
    they were sent (seq), with one `run.message` audit row each; every resume a send made is
    an attempt of its own, none made twice and none left unforked. Returns the payloads."""
    run_id = run.run_id
    assert run.status == "done", run.error
    kept = client.runs.messages(run_id)
    assert [m.seq for m in kept] == sorted({s.seq for s in sents})
    assert [m.status for m in kept] == ["taken"] * len(kept)
    steps = [m.step_id for m in kept]
    assert steps == sorted(set(steps)), steps  # each at its own step, in order
    assert run.output == [m.payload for m in kept]

    # One resume per send that made one (a replay answers with its first send's), each a
    # distinct attempt, and no attempt besides.
    resumed = [
        s.resumed_workflow_id for s in sents if s.resumed_workflow_id is not None and not s.replayed
    ]
    assert len(resumed) == len(set(resumed)), resumed
    assert set(resumed) == {f"{run_id}:{n}" for n in range(2, run.attempt + 1)}
    assert run.attempt - 1 <= len(kept)
    attempts = client.services.dbos.list_workflows(
        workflow_id_prefix=f"{run_id}:", load_input=False, load_output=False
    )
    assert sorted(a.workflow_id for a in attempts) == sorted(
        f"{run_id}:{n}" for n in range(1, run.attempt + 1)
    )
    with client.db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit.c.meta)
            .where(audit.c.target == run_id, audit.c.action == "run.message")
            .order_by(audit.c.id)
        ).scalars()
        assert [meta["seq"] for meta in rows] == [m.seq for m in kept]
        assert conn.execute(sa.select(resumes).where(resumes.c.run_id == run_id)).all() == []
    return [m.payload for m in kept]


# -- 1. many senders at once -----------------------------------------------------------------


@pytest.mark.parametrize(("sends", "distinct"), [(1, 1), (10, 4), (1000, 12)])
def test_concurrent_sends_take_each_message_once_in_order(
    database_url: str, sends: int, distinct: int
) -> None:
    """`sends` sends from up to 50 threads of `distinct` messages, each under its key, sent
    again and again; some sends reuse a key for another payload (refused, unless theirs
    committed first: then it is the message, and the others are refused)."""
    with Harness(races_app(), database_url=database_url) as h:
        run = h.start("collect", {"count": distinct})
        h.wait(run.run_id, until=("waiting",))
        h.client.runs.messages(run.run_id)  # the client's services, made before the threads

        def payload(i: int) -> dict[str, Any]:
            conflicting = i >= distinct and i % 7 == 3
            return {"n": i % distinct, "conflict": True} if conflicting else {"n": i % distinct}

        def send(i: int) -> tuple[int, Sent | KeyReused]:
            try:
                return i, h.client.send(run.run_id, "item", payload(i), key=f"k{i % distinct}")
            except KeyReused as refused:
                return i, refused

        order = list(range(sends))
        random.Random(sends).shuffle(order)
        with ThreadPoolExecutor(max_workers=min(50, sends)) as pool:
            answers = list(pool.map(send, order))

        kept = {m.key: m for m in h.client.runs.messages(run.run_id)}
        assert sorted(kept) == sorted(f"k{n}" for n in range(distinct))
        sents: list[Sent] = []
        for i, answer in answers:
            first = kept[f"k{i % distinct}"]
            if payload(i) == first.payload:
                assert isinstance(answer, Sent), (i, answer)
                assert answer.seq == first.seq
                sents.append(answer)
            else:
                assert isinstance(answer, KeyReused), (i, answer)
        assert sum(not s.replayed for s in sents) == distinct  # one first send per key
        # A replay answers with the first send's resume, and makes none of its own.
        resumed = {s.seq: s.resumed_workflow_id for s in sents if not s.replayed}
        assert all(s.resumed_workflow_id == resumed[s.seq] for s in sents if s.replayed)
        assert_taken_once_in_order(h, run.run_id, sents)


# -- 2. sent before the wait, racing the step that begins it, and while no worker runs --------


def orders_begun(fake: FakeShop) -> int:
    return sum(op == create_order.id for op, _ in list(fake.calls))


def held_runs(h: Harness, fake: FakeShop, runs: int, **input: Any) -> list[str]:
    """`runs` runs of gated-collect, each held inside its order (before its first wait)."""
    fake.gate = threading.Event()
    before = orders_begun(fake)
    run_ids = [h.start("gated-collect", input).run_id for _ in range(runs)]
    deadline = time.monotonic() + 30
    while orders_begun(fake) < before + runs:
        assert time.monotonic() < deadline, "the runs did not reach their order"
        time.sleep(0.01)
    return run_ids


def test_messages_sent_before_the_wait_are_taken_at_once_by_the_first_attempt(
    database_url: str,
) -> None:
    fake = FakeShop()
    with Harness(races_app(), database_url=database_url, implementations={"shop": fake}) as h:
        (run_id,) = held_runs(h, fake, 1)
        sents = [h.client.send(run_id, "item", {"n": n}) for n in range(3)]
        assert [s.resumed_workflow_id for s in sents] == [None] * 3
        assert fake.gate is not None
        fake.gate.set()
        assert assert_taken_once_in_order(h, run_id, sents) == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert h.run_store.get(run_id).attempt == 1


def test_sends_racing_the_step_that_begins_to_wait_each_move_the_run_once(
    database_url: str,
) -> None:
    """Each round releases held runs while threads send to them, each after its own short
    pause, so the sends land before the wait, inside its step, between the step and the run's
    `waiting`, and after it."""
    fake = FakeShop()
    rng = random.Random(7)
    with Harness(races_app(), database_url=database_url, implementations={"shop": fake}) as h:

        def send(run_id: str, n: int, pause: float, released: threading.Event) -> Sent:
            released.wait(10)
            time.sleep(pause)
            return h.client.send(run_id, "item", {"n": n}, key=f"m{n}")

        for _ in range(2):
            run_ids = held_runs(h, fake, 5, count=3)
            released = threading.Event()
            with ThreadPoolExecutor(max_workers=12) as pool:
                futures = {
                    run_id: [
                        pool.submit(send, run_id, n, rng.uniform(0, 0.08), released)
                        for n in range(3)
                    ]
                    for run_id in run_ids
                }
                assert fake.gate is not None
                fake.gate.set()
                released.set()
                sent = {run_id: [f.result() for f in fs] for run_id, fs in futures.items()}
            for run_id, sents in sent.items():
                taken = assert_taken_once_in_order(h, run_id, sents)
                assert sorted(p["n"] for p in taken) == [0, 1, 2]


class HeldTake:
    """The worker's `take` (the body of a `ctx.wait_for` step), held on its first call
    `before` its transaction, or `after` it committed (the step said pending, the run still
    `running`), until the test lets it go. A later call (the next attempt's) is held before
    its transaction too, so that it sees every message the test sends meanwhile."""

    def __init__(self, h: Harness, where: str) -> None:
        self.waits = h.worker.runtime.waits
        self.take = self.waits.take
        self.where = where
        self.reached = threading.Event()
        self.go = threading.Event()
        self.waits.take = self  # type: ignore[method-assign,assignment]

    def __call__(self, *args: Any) -> dict[str, Any]:
        first = not self.reached.is_set()
        if self.where == "before" or not first:
            self.hold()
        taken = self.take(*args)
        if first and self.where == "after":
            self.hold()
        return taken

    def hold(self) -> None:
        self.reached.set()
        assert self.go.wait(30), "the test never let the wait go on"


@pytest.mark.parametrize("where", ["before", "after"])
def test_sends_inside_the_window_of_the_step_that_begins_to_wait(
    database_url: str, where: str
) -> None:
    """Sent while the wait's step has not begun its transaction, the messages are kept and
    taken by the first attempt; sent once it committed `pending` but before the run says
    `waiting`, the first of them moves the run on (its attempt's `waiting` is refused) and the
    next attempt takes both."""
    with Harness(races_app(), database_url=database_url) as h:
        held = HeldTake(h, where)
        run_id = h.start("collect", {"count": 2}).run_id
        assert held.reached.wait(30)
        assert h.run_store.get(run_id).status == "running"
        with ThreadPoolExecutor(max_workers=6) as pool:
            sents = list(
                pool.map(
                    lambda i: h.client.send(run_id, "item", {"n": i % 2}, key=f"k{i % 2}"),
                    range(6),
                )
            )
        held.go.set()
        taken = assert_taken_once_in_order(h, run_id, sents)
        assert sorted(p["n"] for p in taken) == [0, 1]
        resumed = [s.resumed_workflow_id for s in sents if s.resumed_workflow_id and not s.replayed]
        assert resumed == ([] if where == "before" else [f"{run_id}:2"])
        assert h.run_store.get(run_id).attempt == (1 if where == "before" else 2)


class TakeTwice:
    """The worker's `take`, run twice each time, as DBOS runs a step's body again when its
    worker died between the body's commit and the step's checkpoint."""

    def __init__(self, h: Harness) -> None:
        self.waits = h.worker.runtime.waits
        self.take = self.waits.take
        self.answers: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.waits.take = self  # type: ignore[method-assign,assignment]

    def __call__(self, *args: Any) -> dict[str, Any]:
        first = self.take(*args)
        again = self.take(*args)
        self.answers.append((first, again))
        return again


def test_a_wait_whose_step_runs_again_answers_with_the_message_it_took(
    database_url: str,
) -> None:
    with Harness(races_app(), database_url=database_url) as h:
        twice = TakeTwice(h)
        run_id = h.start("collect", {"count": 3}).run_id
        sents = [h.client.send(run_id, "item", {"n": n}) for n in range(2)]
        h.wait(run_id, until=("waiting",))
        sents.append(h.client.send(run_id, "item", {"n": 2}))
        assert assert_taken_once_in_order(h, run_id, sents) == [{"n": n} for n in range(3)]
        assert twice.answers
        assert all(first == again for first, again in twice.answers)
        assert [a["payload"] for a, _ in twice.answers if a["status"] == "taken"] == [
            {"n": n} for n in range(3)
        ]


def test_a_message_sent_while_no_worker_runs_is_taken_once_a_worker_starts(
    database_url: str,
) -> None:
    with Harness(races_app(), database_url=database_url) as h:
        waiting = h.start("collect", {"count": 2}).run_id
        h.wait(waiting, until=("waiting",))
        h.wait_attempt_ended(waiting, 1)

    # No worker: a plain client starts one run and sends to both, forking what it moves on.
    with Client.connect(races_app(), database_url, by="user:sender") as client:
        queued = client.runs.start("collect", {"count": 2}).run_id
        sents = {
            run_id: [client.send(run_id, "item", {"n": n}, key=f"k{n}") for n in range(2)]
            + [client.send(run_id, "item", {"n": 0}, key="k0")]
            for run_id in (waiting, queued)
        }
    assert sents[waiting][0].resumed_workflow_id == f"{waiting}:2"
    assert [s.resumed_workflow_id for s in sents[queued]] == [None] * 3

    with Harness(races_app(), database_url=database_url) as h:
        for run_id, sent in sents.items():
            assert assert_taken_once_in_order(h, run_id, sent) == [{"n": 0}, {"n": 1}]
        assert h.run_store.get(waiting).attempt == 2
        assert h.run_store.get(queued).attempt == 1


# -- 3. a sender killed between its commit and its fork ---------------------------------------


class DiesBeforeFork(Resumer):
    """The resumer of a sender whose process is SIGKILLed once its send committed, before the
    fork it moved the run on to."""

    def fork(self, resume: Resume) -> bool:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def _send_then_die(url: str, run_id: str, key: str) -> None:
    settings = Settings.from_env(".", environ={"REMIT_DATABASE_URL": url, "REMIT_ACTOR": "user:a"})
    client = Client(races_app(), settings, prepare=False)
    client.services.messages.resumer = DiesBeforeFork(client.db, client.services.dbos)
    client.send(run_id, "item", {"n": 1}, key=key)
    sys.exit("the send returned without forking: the sender was meant to die in the window")


def send_in_a_process_that_dies(url: str, run_id: str, key: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", SENDER, url, run_id, key],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def test_a_sender_killed_before_its_fork_leaves_the_resume_to_a_workers_sweep(
    database_url: str,
) -> None:
    """The sender dies while no worker runs (so no sweep races what the test reads): its send
    committed and its fork was never made. The next worker's sweep, at its start, makes it."""
    with Harness(races_app(), database_url=database_url) as h:
        run_id = h.start("collect", {"count": 2}).run_id
        h.wait(run_id, until=("waiting",))
        h.wait_attempt_ended(run_id, 1)

    send_in_a_process_that_dies(database_url, run_id, "pay-1")

    with Client.connect(races_app(), database_url) as client:
        # Committed: the message, its audit row, the run on attempt 2 and its outbox row.
        (message,) = client.runs.messages(run_id)
        assert (message.key, message.status, message.sent_by) == ("pay-1", "queued", "user:a")
        run = client.runs.get(run_id)
        assert (run.attempt, run.status) == (2, "queued")
        assert client.services.dbos.list_workflows(workflow_id_prefix=f"{run_id}:2") == []
        assert outbox_of(client) == [f"{run_id}:2"]

    with Harness(races_app(), database_url=database_url, sweep_interval=3600) as h:
        h.wait(run_id, until=("waiting",), timeout=30)
        last = h.client.send(run_id, "item", {"n": 2})
        first = Sent(message.seq, run_id, "item", f"{run_id}:2")
        assert assert_taken_once_in_order(h, run_id, [first, last]) == [{"n": 1}, {"n": 2}]
        assert h.run_store.get(run_id).attempt == 3


def test_a_killed_senders_send_again_under_its_key_makes_the_fork_it_did_not(
    database_url: str,
) -> None:
    """Sent again under its key, the message of a sender that died before its fork is not kept
    twice nor the run moved on again: the replay makes the fork the first send did not."""
    with Harness(races_app(), database_url=database_url) as h:
        run_id = h.start("collect", {"count": 2}).run_id
        h.wait(run_id, until=("waiting",))
        h.wait_attempt_ended(run_id, 1)

    send_in_a_process_that_dies(database_url, run_id, "pay-1")

    with Client.connect(races_app(), database_url) as client:
        (message,) = client.runs.messages(run_id)
        again = client.send(run_id, "item", {"n": 1}, key="pay-1")
        assert (again.seq, again.replayed) == (message.seq, True)
        assert again.resumed_workflow_id == f"{run_id}:2"
        assert outbox_of(client) == []
        (forked,) = client.services.dbos.list_workflows(workflow_id_prefix=f"{run_id}:2")
        assert forked.status == "ENQUEUED"
        assert client.runs.get(run_id).attempt == 2

    with Harness(races_app(), database_url=database_url, sweep_interval=3600) as h:
        h.wait(run_id, until=("waiting",), timeout=30)
        last = h.client.send(run_id, "item", {"n": 2})
        first = Sent(message.seq, run_id, "item", f"{run_id}:2")
        assert assert_taken_once_in_order(h, run_id, [first, again, last]) == [
            {"n": 1},
            {"n": 2},
        ]
        assert h.run_store.get(run_id).attempt == 3


def outbox_of(client: Client) -> list[str]:
    with client.db.engine.connect() as conn:
        return list(conn.execute(sa.select(resumes.c.workflow_id)).scalars())


@pytest.mark.crash
def test_a_worker_killed_while_the_run_waits_and_just_after_it_resumed(
    database_url: str, tmp_path: Path
) -> None:
    """A `remit worker` process SIGKILLed while its run waits: a message sent meanwhile moves
    the run on, and the next worker takes it. That worker is killed just after the take (the
    step after it in flight); a second message sent while none runs is kept, and the worker
    restarted recovers the attempt, which takes it. Each message once; one resume."""
    workers = Workers(database_url, tmp_path, app=WAITS_CRASH_APP)
    client = Client.connect(WAITS_CRASH_APP, database_url, by="user:test")
    try:
        first = workers.start("w1")
        run_id = start_run(workers, "collect", {"count": 2})
        workers.wait_waiting(run_id)
        first.kill()
        first.wait(10)

        sents = [client.send(run_id, "item", {"n": 1}, key="k1")]
        assert sents[0].resumed_workflow_id == f"{run_id}:2"
        workers.hold_at("after-take")
        workers.kill_when_reached(workers.start("w2"), "after-take")
        run = workers.runs.get(run_id)
        assert (run.attempt, run.status) == (2, "running")
        assert [m.status for m in client.runs.messages(run_id)] == ["taken"]

        sents.append(client.send(run_id, "item", {"n": 2}, key="k2"))
        sents.append(client.send(run_id, "item", {"n": 1}, key="k1"))
        # The replay answers with the first send's resume (made long since), and makes none.
        assert [s.resumed_workflow_id for s in sents[1:]] == [None, f"{run_id}:2"]
        workers.start("w2")  # the same executor: it recovers the attempt it was running
        run = workers.wait_finished(run_id)
        assert taken_once(client, run, sents) == [{"n": 1}, {"n": 2}], workers.logs()
        assert run.attempt == 2
    finally:
        client.close()
        workers.close()


# -- 4. a timeout that passes while no worker runs ---------------------------------------------


def test_a_timeout_that_passed_while_no_worker_ran_wakes_the_run_once_one_starts(
    database_url: str,
) -> None:
    """Scaled to zero past two runs' deadlines: one is woken by its timeout when a worker
    starts again; the other was sent a message meanwhile, past its deadline, which moved it on
    first: it takes the message, and its timeout moves nothing."""
    clock = ManualClock()
    with Harness(races_app(), database_url=database_url, clock=clock) as h:
        quiet, sent_to = (h.start("await-or-not", {"timeout": 3600}).run_id for _ in range(2))
        for run_id in (quiet, sent_to):
            h.wait(run_id, until=("waiting",))
            h.wait_attempt_ended(run_id, 1)

    clock.advance(hours=2)
    with Client.connect(races_app(), database_url, clock=clock) as client:
        late = client.send(sent_to, "item", {"n": 1})
    assert late.resumed_workflow_id == f"{sent_to}:2"

    with Harness(races_app(), database_url=database_url, clock=clock, sweep_interval=0.05) as h:
        woken = h.wait(quiet)
        assert (woken.status, woken.output, woken.attempt) == ("done", {"got": None}, 2)
        got = h.wait(sent_to)
        assert (got.status, got.output, got.attempt) == ("done", {"got": {"n": 1}}, 2)
        time.sleep(0.3)  # sweeps
        assert [h.run_store.get(r).attempt for r in (quiet, sent_to)] == [2, 2]
        for run_id in (quiet, sent_to):
            assert h.attempt_status(run_id, 3) is None


if __name__ == "__main__":
    _send_then_die(*sys.argv[1:])

"""The crash matrix: workers SIGKILLed at random moments (inside ops too) under load.

Postgres runs two workers, SQLite one. Killed workers are restarted, at once or after a
while (then, on Postgres, the other takes their work over). Every non-idempotent write that was
cut waits at one task, never repeated on its own; once the killing stops, a person answers each
task from the vendor's record (done, with what it returned, or not done, and the op is posted
again). In the end no run is lost, every run is done, and every write is applied exactly once.
`REMIT_CRASH_SCALE=full` (`make crash`) runs the full size; the default is the size CI runs. A
failure prints the seed; `REMIT_CRASH_SEED` replays it.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from remit.app import load_app
from tests.processes import CRASH_APP, Workers

# Serial (`make test` runs it alone, before the rest): for half a minute it loads the machine
# with runs, kills and restarts of its own, which beside other tests would slow them and it.
pytestmark = [pytest.mark.crash, pytest.mark.serial]

SIZES = {"ci": (100, 35.0), "full": (600, 180.0)}  # runs, seconds of killing


def test_no_run_is_lost_and_no_write_is_doubled(database_url: str, tmp_path: Path) -> None:
    runs_wanted, chaos_seconds = SIZES[os.environ.get("REMIT_CRASH_SCALE", "ci")]
    seed = int(os.environ.get("REMIT_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    count = 1 if database_url.startswith("sqlite") else 2
    workers = Workers(
        database_url,
        tmp_path,
        CRASH_JITTER_MS="40",
        REMIT_HEARTBEAT_INTERVAL="0.25",
        REMIT_DEAD_AFTER="2",
        REMIT_LOG_LEVEL="WARNING",
        # The matrix kills a worker every second or so: an attempt may well be cut more often
        # than a real one ever is. The bound on recoveries is tested on its own
        # (test_recoveries.py); here every run must get through.
        REMIT_MAX_RECOVERIES="1000",
    )
    try:
        ids = [f"m{i}" for i in range(count)]
        procs: dict[str, subprocess.Popen[bytes]] = {name: workers.start(name) for name in ids}
        app = load_app(CRASH_APP)
        client = workers.db.client(app.name)
        starts = workers.runs.naming(None, app=app.name)  # on the app's queues
        run_ids: list[str] = []

        def feed(n: int) -> None:
            for _ in range(min(n, runs_wanted - len(run_ids))):
                payload = {"account": f"acc-{len(run_ids)}", "amount": 100 + len(run_ids)}
                run = starts.start(client, app.workflow("settle"), payload, started_by="chaos")
                run_ids.append(run.run_id)

        # Runs arrive while workers die, spread over the whole time of killing.
        per_round = max(1, round(runs_wanted / chaos_seconds * 0.9))
        kills = 0
        stop_at = time.monotonic() + chaos_seconds
        try:
            while time.monotonic() < stop_at:
                feed(rng.randint(1, 2 * per_round))
                time.sleep(rng.uniform(0.3, 1.5))
                victim = rng.choice(ids)
                procs[victim].kill()
                procs[victim].wait(10)
                kills += 1
                if count > 1 and rng.random() < 0.3:
                    time.sleep(3)  # long enough to be declared dead and taken over
                procs[victim] = workers.start(victim)
            feed(runs_wanted)
        finally:
            client.destroy()
        deadline = time.monotonic() + 120
        answered: list[str] = []
        while not all_finished(workers, run_ids):
            assert time.monotonic() < deadline, (
                f"seed {seed}: runs left unfinished\n{workers.logs()}"
            )
            answered += answer_open_tasks(workers)
            time.sleep(0.5)
        check_invariants(workers, run_ids, answered, seed)
    finally:
        workers.close()
    assert kills >= 5, f"seed {seed}: only {kills} kills; the matrix proved little"


def all_finished(workers: Workers, run_ids: list[str]) -> bool:
    finished = {run.run_id for run in workers.runs.list(limit=100_000) if run.finished}
    return finished >= set(run_ids)


def answer_open_tasks(workers: Workers) -> list[str]:
    """What a person does for each open task: look the call up in the vendor's record (the
    journal) and say it happened, with what it returned, or that it did not. No process is
    making a call whose task is open, so the record is final for its key."""
    applied = {effect["idempotency_key"]: effect["output"] for effect in workers.effects()}
    tasks = workers.tasks()
    answered = []
    for task in tasks.list(status="open", limit=100_000):
        output = applied.get(task.idempotency_key)
        tasks.resolve(task.id, done=output is not None, output=output, by="user:chaos")
        answered.append(task.idempotency_key)
    return answered


def check_invariants(workers: Workers, run_ids: list[str], answered: list[str], seed: int) -> None:
    effects = workers.effects()
    applied = Counter(effect["idempotency_key"] for effect in effects)
    doubled = [key for key, times in applied.items() if times > 1]
    assert not doubled, f"seed {seed}: writes applied twice: {doubled}"
    tasks = workers.tasks().list(limit=100_000)
    left = [
        (
            t.id,
            t.workflow_id,
            workers.runs.get(t.run_id).status,
            workers.ledger.get(t.idempotency_key),
        )
        for t in tasks
        if t.status == "open"
    ]
    assert left == [], f"seed {seed}: tasks left open: {left}\n{workers.logs()}"
    # Only the non-idempotent post waits for a person, and one task asks about each cut post.
    assert all(t.op_id == "bank.letters.post" for t in tasks), f"seed {seed}"
    assert sorted(t.idempotency_key for t in tasks) == sorted(set(answered)), f"seed {seed}"
    for run_id in run_ids:
        run = workers.runs.get(run_id)
        assert run.status == "done", f"seed {seed}: {run_id} is {run.status}: {run.error}"
        rows = {row.step_id: row for row in workers.ledger.list(run_id=run_id)}
        assert [rows[step].status for step in (1, 2, 3, 4, 5)] == ["ok"] * 5, (
            f"seed {seed}: {run_id}"
        )
        for key in (f"{run_id}:2", f"{run_id}:3", f"{run_id}:4"):
            assert applied[key] == 1, f"seed {seed}: {key} applied {applied[key]} times"
        assert run.output is not None
        # The post's output the run carried on with is the one the vendor gave.
        letter = next(e for e in effects if e["idempotency_key"] == f"{run_id}:3")
        assert run.output["letter"] == letter["output"]["letter_id"], f"seed {seed}: {run_id}"

"""SIGKILL a worker process between two ops and inside write ops, then restart it.

The run completes (or, for a non-idempotent write cut mid-call, fails as uncertain); each
idempotent write is applied once; the cut non-idempotent write is never repeated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from remit.ledger import LedgerStore
from remit.runs import Run, RunStore
from remit.store.database import Database

pytestmark = pytest.mark.crash

APP = Path(__file__).parent.parent / "apps" / "crash_app"


class Crashable:
    """Starts and kills `remit worker` processes for one database and journal."""

    def __init__(self, database_url: str, tmp: Path) -> None:
        self.tmp = tmp
        self.hold_dir = tmp / "hold"
        self.hold_dir.mkdir()
        self.journal = tmp / "journal.jsonl"
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_POLL_INTERVAL": "0.05",
            "REMIT_LOG_LEVEL": "INFO",
            "CRASH_JOURNAL": str(self.journal),
            "CRASH_HOLD_DIR": str(self.hold_dir),
        }
        self.db = Database(database_url)
        self.runs = RunStore(self.db)
        self.ledger = LedgerStore(self.db)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs_open: list[IO[bytes]] = []

    def remit(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "remit", "--app", str(APP), *args],
            env=self.env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    def start_worker(self) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"worker-{len(self.workers)}.log").open("wb")
        self.logs_open.append(log)
        worker = subprocess.Popen(
            [sys.executable, "-m", "remit", "--app", str(APP), "worker"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.workers.append(worker)
        return worker

    def hold_at(self, point: str) -> None:
        (self.hold_dir / f"hold-{point}").touch()

    def kill_when_reached(self, worker: subprocess.Popen[bytes], point: str) -> None:
        reached = self.hold_dir / f"reached-{point}"
        deadline = time.monotonic() + 60
        while not reached.exists():
            assert worker.poll() is None, self.logs()
            assert time.monotonic() < deadline, f"the worker never reached {point}\n{self.logs()}"
            time.sleep(0.02)
        worker.kill()
        worker.wait(10)
        (self.hold_dir / f"hold-{point}").unlink()

    def wait_finished(self, run_id: str, timeout: float = 60) -> Run:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.runs.get(run_id)
            if run.finished:
                return run
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} did not finish\n{self.logs()}")

    def effects(self) -> list[dict[str, str]]:
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line]

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp.glob("worker-*.log"))
        )

    def close(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.terminate()
                try:
                    worker.wait(20)
                except subprocess.TimeoutExpired:
                    worker.kill()
        for log in self.logs_open:
            log.close()
        self.db.dispose()


@pytest.fixture
def crash(database_url: str, tmp_path: Path) -> Iterator[Crashable]:
    harness = Crashable(database_url, tmp_path)
    yield harness
    harness.close()


def _start(crash: Crashable) -> str:
    run_id = crash.remit(
        "start", "payout", "--input", '{"account": "acc-7", "amount": 900}', "--as", "user:ops"
    )
    assert run_id.startswith("run_")
    return run_id


def test_killed_between_two_ops_the_run_completes_with_each_write_once(crash: Crashable) -> None:
    crash.hold_at("between")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start_worker(), "between")
    assert crash.runs.get(run_id).status == "running"

    crash.start_worker()
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    transfers = [e for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert sorted(e["idempotency_key"] for e in transfers) == [f"{run_id}:2", f"{run_id}:4"]
    assert [e["op"] for e in crash.effects()].count("bank.letters.post") == 1
    assert [r.status for r in crash.ledger.list(run_id=run_id)] == ["ok"] * 4


def test_killed_inside_an_idempotent_write_it_is_called_again_with_the_same_key(
    crash: Crashable,
) -> None:
    crash.hold_at("bank.transfers.create")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start_worker(), "bank.transfers.create")
    cut = [r for r in crash.ledger.list(run_id=run_id) if r.op_id == "bank.transfers.create"]
    assert [(r.status, r.idempotency_key) for r in cut] == [("started", f"{run_id}:2")]

    crash.start_worker()
    run = crash.wait_finished(run_id)

    assert run.status == "done", run.error
    assert run.output is not None
    assert run.output["transfers"] == [f"tr_{run_id}:2", f"tr_{run_id}:4"]
    keys = [e["idempotency_key"] for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert sorted(keys) == [f"{run_id}:2", f"{run_id}:4"]
    assert [r.status for r in crash.ledger.list(run_id=run_id)] == ["ok"] * 4


def test_killed_inside_a_non_idempotent_write_it_becomes_uncertain_and_is_not_repeated(
    crash: Crashable,
) -> None:
    crash.hold_at("bank.letters.post")
    run_id = _start(crash)
    crash.kill_when_reached(crash.start_worker(), "bank.letters.post")

    crash.start_worker()
    run = crash.wait_finished(run_id)

    assert run.status == "failed"
    assert "OpUncertain" in (run.error or "")
    assert "outcome is unknown" in (run.error or "")
    letters = [e for e in crash.effects() if e["op"] == "bank.letters.post"]
    assert [e["idempotency_key"] for e in letters] == [f"{run_id}:5"]
    rows = crash.ledger.list(run_id=run_id)
    assert [(r.op_id, r.status) for r in rows] == [
        ("bank.accounts.read", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.transfers.create", "ok"),
        ("bank.letters.post", "uncertain"),
    ]
    transfers = [e for e in crash.effects() if e["op"] == "bank.transfers.create"]
    assert len(transfers) == 2

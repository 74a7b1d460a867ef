"""The `remit` command run as a user runs it, in subprocesses, against an app folder."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import IO

import sqlalchemy as sa

from remit.core.database import Database
from remit.core.runs import RunStore
from remit.core.schema import approvals
from tests.forked import ForkedProcess, run_remit, spawn_remit

ROOT = Path(__file__).parent.parent.parent
ACME = ROOT / "examples" / "acme"
CRASH_APP = ROOT / "tests" / "apps" / "crash_app"


class Cli:
    def __init__(self, database_url: str, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_POLL_INTERVAL": "0.1",
            "REMIT_ACTOR": "user:ann",
            "CRASH_HOLD_DIR": str(tmp),
            "CRASH_JOURNAL": str(tmp / "journal.jsonl"),
            "COLUMNS": "200",
        }
        self.db = Database(database_url)
        self.procs: list[ForkedProcess] = []
        self.logs: list[IO[str]] = []

    def __call__(
        self, *args: str, app: Path = ACME, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = run_remit(["--app", str(app), *args], env=self.env, input=stdin)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def worker(self, app: Path = ACME, *extra: str) -> ForkedProcess:
        return self.spawn("worker", *extra, app=app)

    def spawn(self, *args: str, app: Path = ACME) -> ForkedProcess:
        """`remit ARGS` left running (a worker, a server), its output in `log(index)`."""
        log = (self.tmp / f"worker-{len(self.procs)}.log").open("w")
        self.logs.append(log)
        proc = spawn_remit(["--app", str(app), *args], env=self.env, output=log)
        self.procs.append(proc)
        return proc

    def start_payout_and_wait_between(self) -> str:
        """Start a crash-app payout and wait until a worker holds it at its `between` step."""
        run_id = self(
            "start", "payout", "--input", '{"account": "a", "amount": 10}', app=CRASH_APP
        ).stdout.strip()
        deadline = time.monotonic() + 60
        while not (self.tmp / "reached-between").exists():
            assert time.monotonic() < deadline, self.log(0)
            time.sleep(0.02)
        return run_id

    def log(self, index: int) -> str:
        return (self.tmp / f"worker-{index}.log").read_text()

    def wait_in_log(self, index: int, text: str, timeout: float = 60) -> None:
        """Wait until process `index` (a worker or a spawned command) has logged `text`."""
        deadline = time.monotonic() + timeout
        while text not in self.log(index):
            assert time.monotonic() < deadline, f"never logged {text!r}:\n{self.log(index)}"
            time.sleep(0.05)

    def wait_for(self, run_id: str, status: str, timeout: float = 60) -> None:
        runs = RunStore(self.db)
        deadline = time.monotonic() + timeout
        while runs.get(run_id).status != status:
            assert time.monotonic() < deadline, (
                f"{run_id} is {runs.get(run_id).status}, not {status}"
            )
            time.sleep(0.05)

    def pending_approvals(self, run_id: str | None = None, timeout: float = 60) -> list[str]:
        """The ids of the pending approvals (of `run_id`), newest first, as `remit approvals
        --pending --quiet` lists them, once there is one. Read from the database: a `remit`
        process per poll would spend a CPU second at each."""
        query = sa.select(approvals.c.id).where(approvals.c.status == "pending")
        if run_id is not None:
            query = query.where(approvals.c.run_id == run_id)
        query = query.order_by(approvals.c.created_at.desc(), approvals.c.id.desc())
        deadline = time.monotonic() + timeout
        while True:
            with self.db.engine.connect() as conn:
                ids = list(conn.scalars(query))
            if ids:
                return ids
            log = self.log(0) if self.procs else "(no process started)"
            assert time.monotonic() < deadline, f"no approval pending after {timeout} s:\n{log}"
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for log in self.logs:
            log.close()
        self.db.dispose()

"""Worker processes for tests that kill, stop and restart them: `remit worker` subprocesses on
one database, with the crash app's hold points and effect journal (see tests/apps/crash_app)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from dbos import DBOSClient

from remit.app import load_app
from remit.core.database import Database
from remit.core.ledger import LedgerStore
from remit.core.runs import Run, RunStore
from remit.people.tasks import Tasks
from tests.forked import ForkedProcess, run_remit, spawn_remit

CRASH_APP = Path(__file__).parent / "apps" / "crash_app"


def _wait_stopped(proc: ForkedProcess, timeout: float = 10) -> None:
    """Wait until every thread of `proc` has stopped. A signal is delivered after `kill()`
    returns: until the threads stop, one may still begin a transaction."""
    deadline = time.monotonic() + timeout
    tasks = Path(f"/proc/{proc.pid}/task")
    while True:
        states = {_state(task) for task in tasks.iterdir()} - {""}
        if states <= {"T", "t"}:
            return
        assert time.monotonic() < deadline, f"worker {proc.pid} did not stop: {states}"
        time.sleep(0.005)


def _state(task: Path) -> str:
    """A thread's state letter from /proc (`T`: stopped), or "" for one that has ended."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""


class Workers:
    """Starts, kills and restarts `remit worker` processes for one database and journal."""

    def __init__(self, database_url: str, tmp: Path, *, app: Path = CRASH_APP, **env: str) -> None:
        self.tmp = tmp
        self.app = app
        self.hold_dir = tmp / "hold"
        self.hold_dir.mkdir(exist_ok=True)
        self.journal = tmp / "journal.jsonl"
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_POLL_INTERVAL": "0.1",
            "REMIT_LOG_LEVEL": "INFO",
            "CRASH_JOURNAL": str(self.journal),
            "CRASH_HOLD_DIR": str(self.hold_dir),
            **env,
        }
        self.db = Database(database_url)
        self.db.prepare()
        self.runs = RunStore(self.db)
        self.ledger = LedgerStore(self.db)
        self.procs: list[ForkedProcess] = []
        self._logs: list[IO[bytes]] = []
        self._client: DBOSClient | None = None

    def remit(self, *args: str, input: str | None = None) -> str:
        """Run a `remit` command to completion (given `input` on stdin) and return what it
        printed."""
        done = run_remit(["--app", str(self.app), *args], env=self.env, input=input)
        assert done.returncode == 0, done.stderr
        return str(done.stdout).strip()

    def start(self, executor_id: str | None = None, **env: str) -> ForkedProcess:
        """Start a worker (with its own executor id if given) and return its process."""
        log = (self.tmp / f"worker-{len(self.procs)}.log").open("wb")
        self._logs.append(log)
        extra = {"REMIT_EXECUTOR_ID": executor_id} if executor_id else {}
        proc = spawn_remit(
            ["--app", str(self.app), "worker"], env={**self.env, **extra, **env}, output=log
        )
        self.procs.append(proc)
        return proc

    def start_settles(self, count: int) -> list[str]:
        """Start `count` runs of the crash app's `settle` (five calls each) and return their ids."""
        app = load_app(self.app)
        client = self.db.client(app.name)
        try:
            return [
                self.runs.naming(None, app=app.name)
                .start(
                    client,
                    app.workflow("settle"),
                    {"account": f"a{n}", "amount": 10 + n},
                    started_by="t",
                )
                .run_id
                for n in range(count)
            ]
        finally:
            client.destroy()

    def wait_serving(self, proc: ForkedProcess, timeout: float = 60) -> None:
        index = self.procs.index(proc)
        self._wait(lambda: "serving" in self.log(index), f"worker {index} to serve", proc)

    def hold_at(self, point: str) -> None:
        (self.hold_dir / f"hold-{point}").touch()

    def release(self, point: str) -> None:
        (self.hold_dir / f"hold-{point}").unlink(missing_ok=True)

    def release_slow(self, point: str) -> None:
        """Let a step held at `slow-<point>` go on (see the crash app's `hold`)."""
        (self.hold_dir / f"slow-{point}").unlink(missing_ok=True)

    def wait_reached(self, point: str, proc: ForkedProcess | None = None) -> None:
        reached = self.hold_dir / f"reached-{point}"
        self._wait(reached.exists, f"a worker to reach {point}", proc)

    def kill_when_reached(self, proc: ForkedProcess, point: str) -> None:
        self.wait_reached(point, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.release(point)

    def stall(self, proc: ForkedProcess) -> None:
        """Stop `proc` (SIGSTOP) at a moment it holds no SQLite write lock.

        One SQLite file has one writer: a process stopped inside a write transaction would
        lock out every other process, which is a property of SQLite, not of what the test
        checks. On Postgres a stopped process's row locks block only those rows.
        """
        for _ in range(200):
            proc.send_signal(signal.SIGSTOP)
            _wait_stopped(proc)
            if not self.db.is_sqlite or self._can_write():
                return
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        raise AssertionError("the worker held the SQLite write lock every time it was stopped")

    def _can_write(self) -> bool:
        assert self.db.url.database is not None
        conn = sqlite3.connect(self.db.url.database, timeout=0.2)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    def wait_finished(self, run_id: str, timeout: float = 90) -> Run:
        runs: list[Run] = []

        def finished() -> bool:
            runs.insert(0, self.runs.get(run_id))
            return runs[0].finished

        self._wait(finished, f"run {run_id} to finish", timeout=timeout)
        return runs[0]

    def wait_waiting(self, run_id: str, timeout: float = 90) -> Run:
        """Wait for the run to wait (at a gate or a task) and return it."""
        self._wait(
            lambda: self.runs.get(run_id).status == "waiting",
            f"run {run_id} to wait",
            None,
            timeout,
        )
        return self.runs.get(run_id)

    def tasks(self) -> Tasks:
        """The app's tasks, answered from the test's process as `remit task resolve` would."""
        app = load_app(self.app)
        if self._client is None:
            self._client = self.db.client(app.name)
        return Tasks(self.db, self._client, app.name, app.ops)

    def effects(self) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line]

    def log(self, index: int) -> str:
        return (self.tmp / f"worker-{index}.log").read_text(errors="replace")

    def wait_in_log(self, index: int, text: str, timeout: float = 30) -> None:
        """Wait until worker `index` has logged `text`: a line a worker writes once an act has
        returned may come a moment after the run the act let go on has finished."""
        self._wait(
            lambda: text in self.log(index), f"worker {index} to log {text!r}", None, timeout
        )

    def logs(self) -> str:
        return "\n".join(f"--- worker {i}\n{self.log(i)[-3000:]}" for i in range(len(self.procs)))

    def _wait(
        self,
        condition: object,
        what: str,
        proc: ForkedProcess | None = None,
        timeout: float = 60,
    ) -> None:
        assert callable(condition)
        deadline = time.monotonic() + timeout
        while not condition():
            if proc is not None:
                assert proc.poll() is None, f"the worker exited waiting for {what}\n{self.logs()}"
            assert time.monotonic() < deadline, f"gave up waiting for {what}\n{self.logs()}"
            time.sleep(0.02)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        for log in self._logs:
            log.close()
        if self._client is not None:
            self._client.destroy()
        self.db.dispose()

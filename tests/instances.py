"""Processes for the scale-to-zero tests: an instance (`remit serve --worker --stop-when-idle`
on the sleepy app) and a wakeup service (`remit wakeup serve`), each a process of its own
(forked: `tests/forked.py`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from remit.core.database import Database
from remit.ops.idle import WakeupRow, WakeupState
from tests.forked import ForkedProcess, run_remit, spawn_remit

SLEEPY_APP = Path(__file__).parent / "apps" / "sleepy_app"
SECRET_KEY = "c2NhbGUtdG8temVyby10ZXN0cy1rZXktMzItYnl0ZXM="


def _listening(log: Path, proc: ForkedProcess, pattern: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text() if log.exists() else "")
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before listening:\n{log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"not listening within {timeout}s:\n{log.read_text()}")


def _end(proc: ForkedProcess, timeout: float = 60) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class WakeupService:
    """`remit wakeup serve` on a SQLite file of its own (or `database`), allowing loopback."""

    def __init__(self, tmp: Path, *, database: str | None = None, **env: str) -> None:
        self.tmp = tmp
        self.database = database or f"sqlite:///{tmp / 'wakeup.sqlite'}"
        self.env = {**os.environ, **env}
        self.env.pop("REMIT_DATABASE_URL", None)
        self.procs: list[tuple[ForkedProcess, IO[bytes]]] = []
        self.url = ""

    def account(self, label: str = "test") -> str:
        made = run_remit(
            ["wakeup", "accounts", "create", label, "--database", self.database],
            env=self.env,
            timeout=60,
            script=True,
        )
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1]
        assert token.startswith("rwa_"), made.stdout
        return token

    def start(self) -> str:
        log = self.tmp / f"wakeup-{len(self.procs)}.log"
        handle = log.open("wb")
        proc = spawn_remit(
            ["wakeup", "serve", "--port", "0", "--allow-private", "--database", self.database],
            env=self.env,
            output=handle,
            script=True,
        )
        self.procs.append((proc, handle))
        self.url = _listening(log, proc, r"listening on (http://127\.0\.0\.1:\d+)", 60)
        return self.url

    def stop(self) -> None:
        for proc, handle in self.procs:
            _end(proc)
            handle.close()
        self.procs = []


class Instance:
    """The sleepy app served with its worker, which stops when idle, on `database_url`."""

    def __init__(self, database_url: str, tmp: Path, **env: str) -> None:
        self.database_url = database_url
        self.tmp = tmp
        self.moments_file = tmp / "moments.jsonl"
        self.env = {
            **os.environ,
            "REMIT_DATABASE_URL": database_url,
            "REMIT_FAKES": "1",
            "REMIT_SECRET_KEY": SECRET_KEY,
            "REMIT_AS": "user:test",
            "REMIT_POLL_INTERVAL": "0.1",
            "REMIT_SWEEP_INTERVAL": "0.5",
            "REMIT_SUSPEND_AFTER": "0",
            "REMIT_IDLE_CHECK_INTERVAL": "0.3",
            "REMIT_IDLE_HORIZON": "1",
            "MOMENTS_FILE": str(self.moments_file),
            **env,
        }
        for unset in ("REMIT_URL", "REMIT_TOKEN"):
            self.env.pop(unset, None)
        self.proc: ForkedProcess | None = None
        self._log: IO[bytes] | None = None
        self.url = ""
        self.db = Database(database_url, pool_size=1)

    def serve(self, *extra: str) -> str:
        path = self.tmp / "instance.log"
        self._log = path.open("wb")
        self.proc = spawn_remit(
            [
                "--app",
                str(SLEEPY_APP),
                "serve",
                "--worker",
                "--stop-when-idle",
                "--port",
                "0",
                *extra,
            ],
            env=self.env,
            output=self._log,
            script=True,
        )
        self.url = _listening(path, self.proc, r"on (http://127\.0\.0\.1:\d+)", 90)
        return self.url

    def remit(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        done = run_remit(["--app", str(SLEEPY_APP), *args], env={**self.env, **env}, script=True)
        if check:
            assert done.returncode == 0, f"remit {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def start(self, workflow: str, given: dict[str, Any], **env: str) -> str:
        done = self.remit("start", workflow, "--input", json.dumps(given), **env)
        found = re.search(r"run_[0-9a-f]+", done.stdout)
        assert found is not None, done.stdout
        return found.group(0)

    def start_unwoken(
        self, workflow: str, given: dict[str, Any], *, why: str = "", **env: str
    ) -> str:
        """Start a run from the command line while the worker is stopped and cannot be woken:
        the command prints the run, then fails saying the worker was not woken, and `why`. The
        run id."""
        done = self.remit("start", workflow, "--input", json.dumps(given), check=False, **env)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "error: the write is stored, but the app's worker is stopped and was not woken" in (
            done.stderr
        )
        assert why in done.stderr
        assert "Traceback" not in done.stderr
        found = re.search(r"run_[0-9a-f]+", done.stdout)
        assert found is not None, done.stdout  # what the command did is printed first
        return found.group(0)

    def row(self) -> WakeupRow | None:
        return WakeupState(self.db, "sleepy").get()

    def wait_state(
        self, state: str, timeout: float = 60, *, since: datetime | None = None
    ) -> WakeupRow:
        """The worker's row once it is `state`; with `since`, once it stopped after then (not
        the stop it was in before a write woke it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.row()
            later = since is None or (row is not None and (row.stopped_at or since) > since)
            if row is not None and row.state == state and later:
                return row
            time.sleep(0.05)
        raise AssertionError(f"the worker was never {state}: {self.row()}\n{self.log()}")

    def moments(self) -> list[dict[str, Any]]:
        if not self.moments_file.exists():
            return []
        return [json.loads(line) for line in self.moments_file.read_text().splitlines()]

    def wait_moment(self, run_id: str | None, what: str, timeout: float = 60) -> float:
        """When run `run_id` (None: any run) recorded `what`, once it has."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for seen in self.moments():
                if run_id in (None, seen["run"]) and seen["what"] == what:
                    return float(seen["at"])
            time.sleep(0.02)
        raise AssertionError(f"run {run_id} never recorded {what}:\n{self.log()}")

    def wait_logged(self, text: str, *, times: int = 1, timeout: float = 30) -> None:
        """Wait until the instance has logged `text` at least `times` times."""
        deadline = time.monotonic() + timeout
        while self.log().count(text) < times:
            assert time.monotonic() < deadline, (
                f"{text!r} was not logged {times} times:\n{self.log()}"
            )
            time.sleep(0.05)

    def log(self) -> str:
        path = self.tmp / "instance.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> int:
        code = 0 if self.proc is None else _end(self.proc)
        if self._log is not None:
            self._log.close()
        self.db.dispose()
        return code

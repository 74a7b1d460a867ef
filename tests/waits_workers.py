"""Worker processes of the waits crash app (tests/apps/waits_crash_app), for the tests that kill
them around messages and child runs (see tests/processes.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remit.app import load_app
from tests.processes import Workers

WAITS_CRASH_APP = Path(__file__).parent / "apps" / "waits_crash_app"
APP_NAME = "waits-crash-app"


def start_run(workers: Workers, workflow: str, input: dict[str, Any]) -> str:
    """Start a run of the waits crash app from the test's process (as `remit start` does,
    without a command's start-up) and return its id."""
    app = load_app(WAITS_CRASH_APP)
    client = workers.db.client(app.name)
    try:
        starts = workers.runs.naming(None, app=app.name)
        return starts.start(client, app.workflow(workflow), input, started_by="user:test").run_id
    finally:
        client.destroy()


def executor_of(workers: Workers, workflow_id: str) -> str:
    """The worker (executor id) DBOS has the attempt `workflow_id` on."""
    client = workers.db.client(APP_NAME)
    try:
        return str(client.retrieve_workflow(workflow_id).get_status().executor_id)
    finally:
        client.destroy()


def until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait until `condition()` holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)

"""Scale to zero with real processes: an instance (`remit serve --worker --stop-when-idle`)
stops its worker when idle, holding no database connection, and a wake, a write through its
API, or the wakeup service at the registered deadline starts it again."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.conftest import postgres_admin_url
from tests.instances import Instance

# Never called by these tests: with nothing due, a stopping worker registers nothing.
NO_SERVICE = {"REMIT_WAKEUP_URL": "http://127.0.0.1:9", "REMIT_WAKEUP_ACCOUNT_TOKEN": "rwa_unused"}


@pytest.fixture
def instance(database_url: str, tmp_path: Path) -> Iterator[Instance]:
    running = Instance(database_url, tmp_path, **NO_SERVICE)
    yield running
    running.stop()


def connections(instance: Instance) -> list[str]:
    """What the instance's process holds open on its database: its Postgres sessions, or its
    file descriptors on the SQLite file and its -wal and -shm files."""
    assert instance.proc is not None
    url = sa.make_url(instance.database_url)
    if url.get_backend_name() == "sqlite":
        fds = Path(f"/proc/{instance.proc.pid}/fd")
        held = []
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(str(url.database)):
                held.append(target)
        return held
    admin = sa.create_engine(postgres_admin_url())
    try:
        with admin.connect() as conn:
            return [
                f"{row.pid} {row.state} {row.query}"
                for row in conn.execute(
                    sa.text("SELECT pid, state, query FROM pg_stat_activity WHERE datname = :name"),
                    {"name": url.database},
                )
            ]
    finally:
        admin.dispose()


def api_token(instance: Instance) -> dict[str, str]:
    made = instance.remit("tokens", "create", "--for", "user:test")
    return {"Authorization": f"Bearer {made.stdout.strip()}"}


def test_a_stopped_instance_holds_no_connection_and_a_wake_or_a_write_starts_it(
    instance: Instance,
) -> None:
    base = instance.serve()
    headers = api_token(instance)
    instance.wait_state("stopped")
    instance.db.dispose()  # the test's own connection is not the instance's
    time.sleep(0.5)
    assert connections(instance) == []

    woken = httpx.get(f"{base}/wake", timeout=30)
    assert (woken.status_code, woken.json()) == (200, {"worker": "stopped"})
    instance.wait_state("running")
    instance.wait_state("stopped")  # nothing to do: it stops again
    instance.db.dispose()
    time.sleep(0.5)
    assert connections(instance) == []

    # A start through the API wakes the worker, which runs it at once.
    began = time.time()
    started = httpx.post(
        f"{base}/runs",
        json={"workflow": "nap", "input": {"seconds": 0}},
        headers=headers,
        timeout=30,
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    assert instance.wait_moment(run_id, "after") - began < 10
    log = instance.log()
    assert log.count("started") >= 3
    assert "is idle and stops (nothing is due)" in log


def test_wakes_late_twice_or_many_at_once_do_no_harm(instance: Instance) -> None:
    base = instance.serve()
    instance.wait_state("stopped")
    # A run written by another process, with no wakeup service to tell: it waits for a wake.
    run_id = instance.start("nap", {"seconds": 0}, REMIT_WAKEUP_URL="")
    time.sleep(1.0)
    assert instance.moments() == []

    answers: list[int] = []

    def wake() -> None:
        answers.append(httpx.get(f"{base}/wake", timeout=30).status_code)

    wakers = [threading.Thread(target=wake) for _ in range(8)]
    for waker in wakers:
        waker.start()
    for waker in wakers:
        waker.join()
    assert answers == [200] * 8
    instance.wait_moment(run_id, "after")
    instance.wait_state("stopped")
    # A late wake, for a deadline long gone: the worker starts, finds nothing, stops again.
    assert httpx.get(f"{base}/wake", timeout=30).json() == {"worker": "stopped"}
    instance.wait_state("running")
    instance.wait_state("stopped")
    ran = [seen for seen in instance.moments() if seen["run"] == run_id]
    assert [seen["what"] for seen in ran] == ["before", "after"]
    status = instance.remit("show", run_id)
    assert f"{run_id}  nap  done" in status.stdout


def test_stop_when_idle_without_a_wakeup_service_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    instance = Instance(database_url, tmp_path)
    instance.env.pop("REMIT_WAKEUP_URL", None)
    instance.env.pop("REMIT_WAKEUP_ACCOUNT_TOKEN", None)
    done = instance.remit("serve", "--worker", "--stop-when-idle", "--port", "0", check=False)
    assert done.returncode == 1
    assert "--stop-when-idle needs a wakeup service" in done.stderr
    assert "REMIT_WAKEUP_URL and REMIT_WAKEUP_ACCOUNT_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr
    lone = instance.remit("serve", "--stop-when-idle", "--port", "0", check=False)
    assert lone.returncode == 1
    assert "give both" in lone.stderr
    instance.stop()


def test_status_says_why_a_worker_does_not_stop(instance: Instance) -> None:
    instance.env["REMIT_IDLE_HORIZON"] = "3600"
    run_id = instance.start("nap", {"seconds": 600}, REMIT_WAKEUP_URL="")
    instance.serve()
    instance.wait_moment(run_id, "before")
    deadline = time.monotonic() + 30
    while "busy" not in (shown := instance.remit("wakeup", "status").stdout):
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    assert re.search(rf"last check: .*busy, run {run_id} wakes from its sleep in ", shown), shown
    assert "within the idle horizon of 1h (REMIT_IDLE_HORIZON)" in shown
    assert "worker:         running" in shown

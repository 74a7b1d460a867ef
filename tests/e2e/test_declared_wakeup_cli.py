"""`remit serve --worker` on an app whose data files declare a wakeup: its worker stops when
idle with no flag, registering through the declared type's own op (no `REMIT_WAKEUP_URL`
needed); `--no-stop-when-idle` contradicts the declaration and is refused; a declared
`wakeup.instance` still needs remit's wakeup service."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.core.database import Database
from remit.core.schema import ledger
from remit.ops.idle import WakeupState
from tests.forked import run_remit, spawn_remit
from tests.instances import SECRET_KEY

ALARMED_APP = Path(__file__).resolve().parents[1] / "apps" / "alarmed_app"


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    made = {
        **os.environ,
        "REMIT_DATABASE_URL": database_url,
        "REMIT_FAKES": "1",
        "REMIT_SECRET_KEY": SECRET_KEY,
        "REMIT_POLL_INTERVAL": "0.1",
        "REMIT_IDLE_CHECK_INTERVAL": "0.3",
        "REMIT_IDLE_HORIZON": "1",
    }
    for unset in ("REMIT_URL", "REMIT_TOKEN", "REMIT_WAKEUP_URL", "REMIT_WAKEUP_ACCOUNT_TOKEN"):
        made.pop(unset, None)
    return made


def test_a_declared_wakeup_stops_the_worker_through_its_own_register_op(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        proc = spawn_remit(
            ["--app", str(ALARMED_APP), "serve", "--worker", "--port", "0"],
            env=env,
            output=log,
            script=True,
        )
        db = Database(database_url, pool_size=1)
        try:
            deadline = time.monotonic() + 90
            # The worker may stop before the server says it listens: wait for both lines.
            while not all(
                line in log_path.read_text()
                for line in ("is idle and stops", "it stops when idle and GET /wake starts it")
            ):
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            row = WakeupState(db, "alarmed").get()
            with db.engine.connect() as conn:
                calls = conn.execute(sa.select(ledger.c.op_id, ledger.c.actor)).all()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            db.dispose()
    assert row is not None
    assert row.at is not None  # the hourly schedule's next instant, registered
    shown = log_path.read_text()
    assert "it stops when idle and GET /wake starts it" in shown
    assert "is idle and stops (to be woken" in shown
    assert [tuple(call) for call in calls] == [("clockhost.alarms.register", "remit:wakeup")]


def test_no_stop_when_idle_against_a_declared_wakeup_is_refused(env: dict[str, str]) -> None:
    done = run_remit(
        ["--app", str(ALARMED_APP), "serve", "--worker", "--no-stop-when-idle", "--port", "0"],
        env=env,
        script=True,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "the data files declare a wakeup, `wake` (clockhost.alarm), which makes the worker stop "
        "when idle, and --no-stop-when-idle says it must not: remove the declaration (then "
        "`remit apply`), or leave the flag out"
    ) in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_a_declared_wakeup_instance_needs_the_wakeup_service(
    env: dict[str, str], tmp_path: Path
) -> None:
    app = tmp_path / "builtin_wakeup_app"
    shutil.copytree(ALARMED_APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    (app / "resources" / "instance.py").write_text(
        "from remit import ref\n"
        "from remit.connectors.wakeup import instance\n\n"
        "from ..clock import site\n\n"
        'web = site(name="desk")\n'
        'wake = instance(host=ref("web", "url"))\n'
    )
    done = run_remit(["--app", str(app), "serve", "--worker", "--port", "0"], env=env, script=True)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "the wakeup the data files declare needs a wakeup service" in said
    assert "set REMIT_WAKEUP_URL" in said
    assert "Traceback" not in done.stderr


def test_wakeup_status_asks_for_no_wakeup_service_for_a_vendors_own_clock(
    env: dict[str, str],
) -> None:
    done = run_remit(["--app", str(ALARMED_APP), "wakeup", "status"], env=env, script=True)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = done.stdout
    assert (
        "wakeup:         `wake` (clockhost.alarm), declared in the data files: a worker "
        "stopping when idle registers its next deadline through clockhost.alarms.register"
    ) in shown
    assert "service:        none needed: clockhost.alarm is its vendor's own clock" in shown
    assert "REMIT_WAKEUP_URL" not in shown
    assert "remit wakeup connect" not in shown
    assert "instance token" not in shown

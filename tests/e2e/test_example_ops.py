"""What the example repo does on its own database, which `make demo` (played through a demo's
API) cannot show: its worker scales to zero while a follow-up sleeps, woken by a wakeup service
at the sleep's end; and its declared resources are planned, applied, watched for drift and
replaced only after a controller approves. Each on a copy of `examples/acme`, on SQLite and
Postgres, through the command line in subprocesses."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remit.changes.fake_forge import FakeForge
from remit.serve.fake_repo import FakeRepo
from tests.e2e.cli_support import ACME, Cli
from tests.instances import WakeupService

sys.path.insert(0, str(ACME.parent))

from acme.connectors.dns import FakeDns, record
from acme.connectors.hosting import FakeHosting, container

# Where the example's operations repo is (`App(repo=...)`): its git host, on its fake.
ACME_REPO = "https://git.acme.test/acme/ops.git"

SMTP_PASSWORD = "smtp-example-password-5521"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A working copy of the example repo, as a person edits one (its data files change)."""
    copy = tmp_path / "work" / "acme"
    shutil.copytree(ACME, copy, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    (copy / "remit.lock").unlink(missing_ok=True)
    return copy


def shown(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def until(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    """Wait until `check()` is true, failing with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_worker_stops_while_a_follow_up_sleeps_and_is_woken_at_its_end(
    cli: Cli, repo: Path, service: WakeupService
) -> None:
    cli.env.update(
        REMIT_WAKEUP_URL=service.url,
        REMIT_WAKEUP_ACCOUNT_TOKEN=service.account("acme"),
        # Sleeps suspend at once, and a deadline 2 s away is far enough to stop for.
        REMIT_SUSPEND_AFTER="0",
        REMIT_IDLE_HORIZON="2",
        REMIT_IDLE_CHECK_INTERVAL="0.5",
        REMIT_SWEEP_INTERVAL="0.5",
    )
    cli.spawn("serve", "--worker", "--stop-when-idle", "--port", "0", app=repo)
    until("the instance never listened", lambda: "http://127.0.0.1:" in cli.log(0))
    url = re.search(r"http://127\.0\.0\.1:\d+", cli.log(0))
    assert url is not None
    connected = cli("wakeup", "connect", url.group(0), "--as", "user:sam", app=repo)
    assert "stored as the secret REMIT_WAKEUP_TOKEN" in connected.stdout
    # Its only deadline is the morning's drift check: it registers that, and stops.
    until(
        "the worker never stopped",
        lambda: re.search(r"worker: +stopped", cli("wakeup", "status", app=repo).stdout),
    )

    wait = '{"invoice_id": "inv_1001", "wait_seconds": 15}'
    follow = cli("start", "ar.follow-up", "--as", "user:ann", "--input", wait, app=repo).stdout
    follow = follow.strip()
    status = ""

    def asleep_and_stopped() -> bool:
        nonlocal status
        status = cli("wakeup", "status", app=repo).stdout
        stopped = re.search(r"worker: +stopped", status) is not None
        return stopped and f"{follow} wakes from its sleep" in status

    until("the worker did not stop while the follow-up slept", asleep_and_stopped)
    assert "registered:     a wake for the deadline at " in status

    # The status seen said the worker stopped while the follow-up's sleep was pending: its end
    # is what woke the worker to finish it, started again.
    until(
        "the follow-up never finished",
        lambda: (
            follow in cli("runs", "--workflow", "ar.follow-up", "--status", "done", app=repo).stdout
        ),
    )
    assert '"outcome": "followed up"' in cli("show", follow, app=repo).stdout
    assert "is idle and stops (to be woken " in cli.log(0)
    assert cli.log(0).count(" started") >= 2


def test_the_repo_s_resources_are_applied_watched_for_drift_and_replaced_after_approval(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    fakes = tmp_path / "fakes"
    cli.env["REMIT_FAKES_DIR"] = str(fakes)
    # The repo is at the git host's fake as a push would have put it there: its `main` holds
    # the copy's files, and the container's `source("main")` is that commit.
    forge = FakeForge(fakes / "forge-git", fakes / "forge.jsonl")
    main = FakeRepo(forge, ACME_REPO).hold(repo)
    printed: list[str] = []

    def remit(*args: str, code: int = 0, stdin: str | None = None) -> str:
        done = cli(*args, app=repo, check=False, stdin=stdin)
        printed.append(shown(done))
        assert done.returncode == code, shown(done)
        return done.stdout

    # Nothing exists yet: the plan creates all three, and exits 2 (something would change).
    planned = remit("plan", code=2)
    assert "Plan: 3 to create, 0 to update, 0 to replace, 0 to delete; 0 unchanged." in planned
    remit("secrets", "set", "SMTP_PASSWORD", "--as", "user:sam", stdin=SMTP_PASSWORD)
    applied = remit("apply", "--yes", "--as", "user:sam", stdin="")
    assert "Applied: 3 changed. remit.lock is up to date." in applied
    assert '"type": "pgcloud.project"' in (repo / "remit.lock").read_text()

    # Someone changes the DNS record's TTL at the vendor's console: drift finds it.
    dns = FakeDns(journal=fakes / "dns.jsonl")
    (record_id,) = dns.records(record)
    dns.tamper(record, record_id, ttl=60)
    drifted = remit("drift", "--as", "user:sam", code=2)
    assert "ttl  60 → 300" in drifted
    assert "Drift found: opened finding drf_" in drifted

    # Moving the database to another region cannot be done in place: a replace, which waits
    # for a controller before anything is deleted.
    desk = repo / "resources" / "desk.py"
    desk.write_text(desk.read_text().replace('region="eu-west-1"', 'region="us-east-1"'))
    replan = remit("plan", code=2)
    assert "will be replaced: region cannot change in place [asks for approval]" in replan
    applying = cli.spawn("apply", "--yes", "--as", "user:sam", app=repo)
    gate = ""

    def waiting() -> bool:
        nonlocal gate
        found = re.search(r"approval (apr_[0-9a-f]+)", cli.log(0))
        gate = found.group(1) if found else ""
        return bool(gate)

    until("the apply never asked for an approval", waiting)
    assert gate in remit("approvals", "--pending")
    assert applying.poll() is None  # nothing deleted until a controller decides
    remit("approve", gate, "--as", "user:carol")
    assert applying.wait(120) == 0, cli.log(0)
    log = cli.log(0)
    printed.append(log)
    assert "deleted pgcloud.project" in log
    assert "Applied: 2 changed. remit.lock is up to date." in log
    assert "REMIT_DATABASE_URL_STORE" in remit("secrets", "list")
    assert "updated dns.record" in log
    # The container runs the commit `main` is at.
    (running,) = FakeHosting(journal=fakes / "hosting.jsonl").records(container).values()
    assert running["revision"] == main
    # The vendor as another process sees it now: the TTL is 300 again.
    assert FakeDns(journal=fakes / "dns.jsonl").records(record)[record_id]["ttl"] == 300
    # The mail password is sent to the host and never shown.
    assert not [text for text in printed if SMTP_PASSWORD in text]

"""`make demo` runs the example desk's script on its embedded SQLite database, as a newcomer
does on a fresh machine: it ends well and shows each step it promises (the demo is about that
default, so it runs on SQLite only; every flow in it is tested on both databases elsewhere)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e.cli_support import AR_DESK


def test_the_demo_shows_each_step_and_ends_well(tmp_path: Path) -> None:
    desk = tmp_path / "ar_desk"
    shutil.copytree(AR_DESK, desk, ignore=shutil.ignore_patterns(".remit", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
    remit = Path(sys.executable).parent / "remit"
    done = subprocess.run(
        [str(desk / "demo.sh"), str(remit)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    for step in (
        "== 1. ann (a clerk) runs chase-invoice",
        "== 3. ann tries to approve the full 612.50",
        'user:ann may not decide ApprovalType::"write-off"',
        "401 send an API token as `Authorization: Bearer rmt_...`",
        "approved by user:carol",
        "approval.approved",
        "run.done",
        "== 6. scale to zero",
        "worker:         stopped",
        "wakes from its sleep",
        "is idle and stops (to be woken at",
        '"outcome": "followed up"',
        "== 7. declared resources",
        "Plan: 3 to create, 0 to update, 0 to replace, 0 to delete; 0 unchanged.",
        "-- remit plan exited 2",
        "Applied: 3 changed. remit.lock is up to date.",
        '"type": "pgcloud.project"',
        "ttl  60 → 300",
        "Drift found: opened finding drf_",
        "-- remit drift exited 2",
        "will be replaced: region cannot change in place [asks for approval]",
        "approved by user:carol",
        "deleted pgcloud.project",
        "Applied: 2 changed. remit.lock is up to date.",
        "REMIT_DATABASE_URL_STORE",
    ):
        assert step in shown, step
    assert "Traceback" not in shown
    assert "smtp-demo-password" not in shown  # the write-only value is only ever sent
    # The server the demo started is gone with it.
    left = subprocess.run(["pgrep", "-f", f"--app {desk} serve"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
    service = subprocess.run(
        ["pgrep", "-f", "wakeup serve --port 0 --allow-private"], capture_output=True, text=True
    )
    assert service.stdout == "", service.stdout

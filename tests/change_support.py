"""What tests of changes share: a copy of `tests/apps/change_app` whose operations repo is on a
fake forge, the environment a change run needs (also for a `remit` process started from the
test), and a change started on it and followed to where it waits.

    shop = shop_at(tmp_path, monkeypatch)
    with Harness(shop.app, database_url=database_url, actor="user:ann") as harness:
        change = start_change(harness, shop, "fix-readme", {"README.md": "hello\\n"})

Each copy is imported as the package `change_app`: the modules of the copy loaded before are
dropped first, so the app is the copy's, its fakes and folder its own.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from remit import App, load_app
from remit.changes.fake_forge import FakeForge
from remit.changes.store import Change
from remit.testing import Harness

CHANGE_APP = Path(__file__).resolve().parent / "apps" / "change_app"
REPO = "https://git.shop.test/shop/ops.git"
SECRET = "whsec-change-tests"
# Where a change waits for someone: at its review gate, or for a push after a failed check.
WAITING = ("review", "failing")


@dataclass(frozen=True)
class Shop:
    """The shop's app loaded from its copy in `folder`, the fake forge holding its repo (at
    `repo`), the webhook secret the forge signs its deliveries with, and the folder its fakes
    keep their state in."""

    app: App
    forge: FakeForge
    repo: str
    folder: Path
    secret: str
    fakes: Path

    def healthy_only(self, *revisions: str) -> None:
        """Make the fake host's apps crash on every revision but `revisions`."""
        self.fakes.mkdir(parents=True, exist_ok=True)
        (self.fakes / "healthy-revisions").write_text("".join(f"{r}\n" for r in revisions))


def copy_app(tmp_path: Path) -> Path:
    """A copy of the change app in `tmp_path/change_app`, without what running it left."""
    folder = tmp_path / "change_app"
    shutil.copytree(
        CHANGE_APP, folder, ignore=shutil.ignore_patterns("__pycache__", ".remit", ".pytest_cache")
    )
    return folder


def shop_environ(tmp_path: Path) -> dict[str, str]:
    """What a change run of the copy in `tmp_path` reads: its fakes' folder (the fake forge's
    repo is in it), its checks' mirrors, the repo's URL and the webhook secret."""
    return {
        "REMIT_FAKES_DIR": str(tmp_path / "fakes"),
        "REMIT_CHANGES_DIR": str(tmp_path / "changes"),
        "REMIT_REPO_URL": REPO,
        "FORGE_WEBHOOK_SECRET": SECRET,
    }


def shop_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    """Copy the change app into `tmp_path`, set the environment a change run reads (kept in
    `os.environ`, so a `remit` process started with it reads the same), make its repo on the
    fake forge from the copy's files, and load it."""
    folder = copy_app(tmp_path)
    for name in [name for name in sys.modules if name.partition(".")[0] == "change_app"]:
        monkeypatch.delitem(sys.modules, name)
    fakes = tmp_path / "fakes"
    for name, value in shop_environ(tmp_path).items():
        monkeypatch.setenv(name, value)
    forge = FakeForge()
    forge.create_repo(REPO, folder)
    return Shop(load_app(folder), forge, REPO, folder, SECRET, fakes)


def start_change(
    harness: Harness,
    shop: Shop,
    branch: str,
    files: dict[str, str],
    *,
    title: str = "",
    by: str = "user:ann",
    timeout: float = 600,
) -> Change:
    """Push `files` onto `branch` at the forge, open a change of it as `by`, and return the
    change once its checks are done and it waits (at its review, or for a push)."""
    shop.forge.push(shop.repo, branch, files, title or branch, author=by.partition(":")[2])
    opened = harness.client.changes.open(branch, title=title, by=by)
    return wait_for_status(harness, opened.id, *WAITING, timeout=timeout)


def wait_for_status(
    harness: Harness, change_id: str, *statuses: str, timeout: float = 600
) -> Change:
    """The change once its status is one of `statuses` (one of `WAITING` once its run waits
    too: the run writes the status a moment before it waits); fails naming where it stands and
    its run's error when it does not get there."""
    deadline = time.monotonic() + timeout
    while True:
        change = harness.client.changes.get(change_id)
        run = harness.client.runs.get(change.run_id)
        if change.status in statuses and (change.status not in WAITING or run.status == "waiting"):
            return change
        if run.finished or time.monotonic() > deadline:
            raise AssertionError(
                f"change {change_id} is {change.status} (run {run.run_id} {run.status}: "
                f"{run.error}), never {' or '.join(statuses)}"
            )
        time.sleep(0.1)

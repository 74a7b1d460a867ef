"""Change runs under real worker processes: killed at random points of their life, and carried
over to a worker of the version they merged.

The app is a copy of `tests/apps/change_app`, its repo held by a fake forge in the test's
folder, shared by every process through its journal and its bare repository.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from remit.changes.forge import FakeForge
from remit.changes.git import Git
from remit.core.runs import Run
from remit.core.schema import approvals, changes, deploys
from tests.change_support import REPO, copy_app, shop_environ
from tests.processes import Workers

# Serial: each change's checks start processes of their own, and other tests' load would
# stretch the kills and the checks past any bound.
pytestmark = [pytest.mark.crash, pytest.mark.serial, pytest.mark.timeout(900)]

ROOT = Path(__file__).parents[2]
KILLS = 10


@pytest.fixture
def shop(database_url: str, tmp_path: Path) -> Iterator[tuple[Workers, FakeForge]]:
    env = shop_environ(tmp_path)
    (tmp_path / "fakes").mkdir()
    os.environ.update(env)  # the fake forge made here shares the workers' folder
    try:
        folder = copy_app(tmp_path)
        forge = FakeForge()
        forge.create_repo(REPO, folder)
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        workers = Workers(
            database_url,
            tmp_path,
            app=folder,
            PYTHONPATH=path,
            REMIT_HEARTBEAT_INTERVAL="0.25",
            REMIT_DEAD_AFTER="2",
            REMIT_LOG_LEVEL="INFO",
            REMIT_MAX_RECOVERIES="1000",
            **env,
        )
        yield workers, forge
        workers.close()
    finally:
        for name in env:
            os.environ.pop(name, None)


def open_change(workers: Workers, branch: str) -> str:
    """Start a change run for `branch` as ann, as `remit start` does; its run id."""
    said = workers.remit(
        "start",
        "change",
        "--as",
        "user:ann",
        "--input",
        json.dumps(
            {"id": f"chg_{branch}", "branch": branch, "author": "user:ann", "health_wait": 0.1}
        ),
    )
    return next(word for word in said.split() if word.startswith("run_"))


def pending_gate(workers: Workers, run_id: str) -> str | None:
    with workers.db.engine.connect() as conn:
        found = conn.execute(
            sa.select(approvals.c.id).where(
                approvals.c.run_id == run_id, approvals.c.status == "pending"
            )
        ).scalar()
    return None if found is None else str(found)


def approve_when_asked(workers: Workers, run_id: str) -> None:
    gate = pending_gate(workers, run_id)
    if gate is not None:
        workers.remit("approve", gate, "--as", "user:carol")


def merges(workers: Workers) -> list[dict[str, object]]:
    """The merges the fake forge made, from its journal (every process's)."""
    journal = workers.tmp / "fakes" / "forge.jsonl"
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return [effect for effect in lines if effect["op"] == "forge.change.merge"]


def change_status(workers: Workers, run_id: str) -> str | None:
    with workers.db.engine.connect() as conn:
        found = conn.execute(sa.select(changes.c.status).where(changes.c.run_id == run_id))
        return found.scalar()


def run_of(workers: Workers, run_id: str) -> Run:
    return workers.runs.get(run_id)


def test_a_change_killed_at_random_points_merges_and_deploys_once(
    shop: tuple[Workers, FakeForge],
) -> None:
    workers, forge = shop
    forge.push(REPO, "notes", {"NOTES.md": "kept\n"}, "Notes", author="ann")
    run_id = open_change(workers, "notes")
    chance = random.Random(os.environ.get("PYTEST_XDIST_WORKER", "") + run_id)
    for _ in range(KILLS):
        proc = workers.start("w1")
        deadline = time.monotonic() + chance.uniform(0.5, 6.0)
        while time.monotonic() < deadline and not run_of(workers, run_id).finished:
            approve_when_asked(workers, run_id)
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        if run_of(workers, run_id).finished:
            break
    proc = workers.start("w1")
    deadline = time.monotonic() + 480
    while not run_of(workers, run_id).finished:
        assert time.monotonic() < deadline, f"the change never finished\n{workers.logs()}"
        approve_when_asked(workers, run_id)
        time.sleep(0.1)
    run = run_of(workers, run_id)
    assert run.status == "done", f"{run.error}\n{workers.logs()}"

    # One merge at the forge, and main has one merge commit over where it was.
    assert len(merges(workers)) == 1
    main = forge.head(REPO, "main")
    git = Git(forge.git_url(REPO))
    assert len(git.run("rev-list", "--merges", "main").split()) == 1
    # One deploy per host: the host was created once, at the merged revision.
    host_journal = workers.tmp / "fakes" / "host.jsonl"
    creates = [
        json.loads(line)
        for line in host_journal.read_text().splitlines()
        if line.strip() and json.loads(line)["op"] == "host.app.create"
    ]
    assert len(creates) == 1
    assert creates[0]["input"]["desired"]["revision"] == main
    with workers.db.engine.connect() as conn:
        rows = conn.execute(sa.select(deploys.c.host, deploys.c.kind, deploys.c.revision)).all()
    assert [tuple(row) for row in rows] == [("web", "deploy", main)]
    assert change_status(workers, run_id) == "deployed"
    # The lockfile binds the host, as the database does.
    lock = json.loads((workers.app / "remit.lock").read_text())
    assert lock["resources"]["web"]["id"] == creates[0]["output"]["id"]


def version_of(folder: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from remit.app import load_app; print(load_app({str(folder)!r}).version)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return done.stdout.strip().splitlines()[-1]


def test_a_worker_of_a_new_version_takes_the_change_runs_first(
    shop: tuple[Workers, FakeForge], tmp_path: Path
) -> None:
    workers, forge = shop
    orders = (workers.app / "workflows" / "orders.py").read_text()
    guarded = orders.replace(
        "    decision = ctx.approval(",
        '    if ctx.patch("check-stock"):\n'
        '        ctx.step("check stock", lambda: "ok")\n'
        "    decision = ctx.approval(",
    )
    slow_test = "import time\n\n\ndef test_slowly() -> None:\n    time.sleep(12)\n"
    head = forge.push(
        REPO,
        "stock",
        {"workflows/orders.py": guarded, "tests/test_slow.py": slow_test},
        "Check stock",
        author="ann",
    )
    # The code of the branch, checked out where its worker runs.
    new = tmp_path / "new" / "change_app"
    new.parent.mkdir()
    subprocess.run(["git", "clone", "-q", forge.git_url(REPO), str(new)], check=True)
    subprocess.run(["git", "-C", str(new), "checkout", "-q", head], check=True)
    old_version, new_version = version_of(workers.app), version_of(new)
    assert old_version != new_version

    first = workers.start("old")
    run_id = open_change(workers, "stock")
    # The old worker is in the change's checks (the branch's slow test) when the new one starts.
    workers._wait(lambda: change_status(workers, run_id) == "checking", "the checks", first)
    same = {k: v for k, v in workers.env.items() if k.startswith(("REMIT_", "FORGE_"))}
    url = same.pop("REMIT_DATABASE_URL")
    newer = Workers(url, tmp_path / "new", app=new, PYTHONPATH=workers.env["PYTHONPATH"], **same)
    try:
        second = newer.start("new")
        newer.wait_serving(second)
        moved = workers.runs.get(run_id)
        assert moved.attempt == 2
        deadline = time.monotonic() + 480
        while not run_of(workers, run_id).finished:
            assert time.monotonic() < deadline, f"never finished\n{workers.logs()}\n{newer.logs()}"
            approve_when_asked(newer, run_id)
            time.sleep(0.1)
        run = run_of(workers, run_id)
        assert run.status == "done", f"{run.error}\n{newer.logs()}"
        assert run.version == new_version
        assert f"carried over from version {old_version}" in newer.log(0)
        assert len(merges(workers)) == 1
        # The merge is in the bare repo, the fake host runs it, and its health is green.
        main = forge.head(REPO, "main")
        git = Git(forge.git_url(REPO))
        assert git.run("rev-list", "--parents", "-n", "1", str(main)).split()[2] == head
        journal = workers.tmp / "fakes" / "host.jsonl"
        made = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
        assert made[-1]["input"]["desired"]["revision"] == main
        with workers.db.engine.connect() as conn:
            rows = conn.execute(sa.select(deploys.c.revision, deploys.c.healthy)).all()
        assert [tuple(row) for row in rows] == [(main, True)]
        assert change_status(workers, run_id) == "deployed"
    finally:
        newer.close()

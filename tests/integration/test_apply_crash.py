"""SIGKILL the worker running the built-in `apply` of 24 declared resources, then restart it.

However often it is killed, the apply finishes `applied`; the vendor (the store fake, its
journal shared by every process) made each declared resource once; remit.lock binds each
declaration to the object the vendor holds, and binds everything the vendor holds; and a
`remit plan` afterwards finds nothing to change. A failure prints the seed;
`REMIT_CRASH_SEED` replays it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from remit.app import load_app
from remit.declare.resources import Declaration
from remit.resources.lockfile import FILE, Lockfile
from tests.forked import run_remit, spawn_remit
from tests.processes import Workers
from tests.resource_support import FakeStore, alias, box

pytestmark = pytest.mark.crash

STOCK_APP = Path(__file__).parents[1] / "apps" / "stock_app"
ROOT = Path(__file__).parents[2]
PASSWORD = "box-pw-never-journaled"
KILLS = 5


def declarations() -> dict[str, Declaration]:
    resources = load_app(STOCK_APP).resources
    assert resources is not None
    return dict(resources.declared.by_name)


@pytest.fixture
def stock(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Workers on a copy of the stock app, so each test's remit.lock is its own."""
    folder = tmp_path / "stock_app"
    shutil.copytree(STOCK_APP, folder, ignore=shutil.ignore_patterns("__pycache__", FILE))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    workers = Workers(
        database_url,
        tmp_path,
        app=folder,
        PYTHONPATH=path,
        REMIT_FAKES_DIR=str(tmp_path / "fakes"),
        BOX_PW=PASSWORD,
        REMIT_HEARTBEAT_INTERVAL="0.25",
        REMIT_DEAD_AFTER="2",
        REMIT_LOG_LEVEL="WARNING",
        # One apply is cut more often here than a real one ever is; the bound on recoveries
        # is tested on its own (test_recoveries.py).
        REMIT_MAX_RECOVERIES="1000",
    )
    yield workers
    workers.close()


def journal(workers: Workers) -> Path:
    return workers.tmp / "fakes" / "store.jsonl"


def creates(workers: Workers) -> list[dict[str, Any]]:
    """The creates the vendor has applied so far, in order (a line torn by a kill skipped)."""
    if not journal(workers).exists():
        return []
    made = []
    for line in journal(workers).read_text().splitlines():
        try:
            effect = json.loads(line)
        except ValueError:
            continue
        if effect["op"].endswith(".create"):
            made.append(effect)
    return made


def wait_for(
    condition: Callable[[], bool], what: str, workers: Workers, proc: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + 90
    while not condition():
        assert proc.poll() is None, f"the worker exited waiting for {what}\n{workers.logs()}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}\n{workers.logs()}"
        time.sleep(0.002)


def wait_for_creates(workers: Workers, proc: subprocess.Popen[bytes], count: int) -> None:
    wait_for(lambda: len(creates(workers)) >= count, f"create {count}", workers, proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


@contextmanager
def binds_held(folder: Path) -> Iterator[None]:
    """Hold remit.lock's write lock, so a bind step waits for it."""
    with Lockfile(folder / FILE).held():
        yield


def check_applied(workers: Workers, run_id: str, why: str) -> None:
    """The apply is done and the vendor, remit.lock and a new plan all agree with the files."""
    declared = declarations()
    run = workers.wait_finished(run_id, timeout=120)
    assert run.status == "done", f"{why}: the apply is {run.status}: {run.error}\n{workers.logs()}"
    assert isinstance(run.output, dict)
    assert run.output["outcome"] == "applied", why
    assert sorted((a["name"], a["action"]) for a in run.output["applied"]) == sorted(
        (name, "create") for name in declared
    ), why

    vendor = FakeStore(journal=journal(workers))
    made = [e for e in vendor.effects if e.op.endswith(".create")]
    times = Counter((e.op, e.input["desired"]["name"]) for e in made)
    wanted = Counter((f"{d.type.id}.create", d.fields["name"]) for d in declared.values())
    assert times == wanted, f"{why}: made other than once each: {times - wanted}"
    assert len({e.output["id"] for e in made}) == len(declared), why

    bindings = Lockfile(workers.app / FILE).read()
    held = {**vendor.records(box), **vendor.records(alias)}
    assert sorted(bindings) == sorted(declared), why
    assert sorted(b.id for b in bindings.values()) == sorted(held), (
        f"{why}: the vendor holds what remit.lock does not bind"
    )
    for name, binding in bindings.items():
        assert binding.type == declared[name].type.id, f"{why}: {name}"
        assert held[binding.id]["name"] == declared[name].fields["name"], f"{why}: {name}"
    for name, binding in bindings.items():
        if binding.type == alias.id:
            target = held[bindings[name.replace("alias", "box")].id]["url"]
            assert held[binding.id]["target"] == target, f"{why}: {name}"
    assert PASSWORD not in journal(workers).read_text(), why

    assert "No changes: 24 resources match the data files." in workers.remit("plan"), why


def test_an_apply_killed_at_random_moments_makes_each_resource_once(stock: Workers) -> None:
    seed = int(os.environ.get("REMIT_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    why = f"seed {seed}"
    total = len(declarations())
    # Each kill lands once the vendor has made so many (and at least one more since the last
    # kill), a random moment after.
    targets = sorted(rng.sample(range(1, total - KILLS), KILLS))
    run_id = stock.remit("start", "apply")
    proc = stock.start("stock-0")
    cut_at = [0]
    for target in targets:
        wait_for_creates(stock, proc, max(target, cut_at[-1] + 1))
        time.sleep(rng.uniform(0, 0.01))
        kill(proc)
        cut_at.append(len(creates(stock)))
        proc = stock.start("stock-0")
    check_applied(stock, run_id, why)
    # Each kill cut the apply after it had made more, and before its last create.
    assert cut_at[-1] < total, f"{why}: kills after {cut_at[1:]} creates"


@pytest.mark.parametrize("nth", [1, 13])
def test_an_apply_killed_after_a_create_before_its_bind_makes_it_once(
    stock: Workers, nth: int
) -> None:
    folder = stock.app
    bound = Lockfile(folder / FILE)
    run_id = stock.remit("start", "apply")
    proc = None
    if nth > 1:
        proc = stock.start("stock-0")
        wait_for(lambda: len(bound.read()) >= nth - 1, f"bind {nth - 1}", stock, proc)
    with binds_held(folder):
        if proc is None:
            proc = stock.start("stock-0")
        before = bound.read()
        # The next create is made, then its bind waits for the lock: kill it there.
        wait_for_creates(stock, proc, len(before) + 1)
        kill(proc)
        made = creates(stock)
        assert bound.read() == before
    assert len(made) == len(before) + 1
    by_vendor_name = {d.fields["name"]: name for name, d in declarations().items()}
    cut = by_vendor_name[made[-1]["input"]["desired"]["name"]]
    assert cut not in before
    assert stock.runs.get(run_id).status == "running"

    stock.start("stock-0")
    check_applied(stock, run_id, f"killed after creating {cut}")


def test_apply_again_after_a_killed_apply_carries_that_one_on_and_reports_it(
    stock: Workers,
) -> None:
    """`remit apply` killed mid-way, then run again: the second carries the first on and
    reports its outcome, rather than starting a second apply that could only fail."""
    argv = ["--app", str(stock.app), "apply", "--yes"]
    with (stock.tmp / "first-apply.log").open("wb") as log:
        first = spawn_remit(argv, env=stock.env, output=log)
        wait_for_creates(stock, first, 3)
        kill(first)
    [cut] = stock.runs.list(workflow="apply")
    assert cut.status == "running"

    again = run_remit(argv, env=stock.env)

    said = again.stdout + again.stderr
    assert again.returncode == 0, said
    assert f"an earlier apply, run {cut.run_id}, is running: carrying it on first" in said
    assert "Applied: 24 changed. remit.lock is up to date." in said
    assert "No changes: 24 resources match the data files." in said
    assert [run.run_id for run in stock.runs.list(workflow="apply")] == [cut.run_id]
    check_applied(stock, cut.run_id, "carried on by a second `remit apply`")


def test_applies_cut_off_and_cancelled_then_a_fresh_one_make_each_resource_once(
    stock: Workers,
) -> None:
    """Ten applies, each killed at a random moment after the vendor made one more resource and
    then cancelled, so a create may be cut off mid-call, or answered and never bound. A fresh
    `remit apply` settles each such create under its key, rather than making it again: the
    vendor holds each declared resource once, each bound, and a plan finds nothing to do."""
    seed = int(os.environ.get("REMIT_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    why = f"seed {seed}"
    for _ in range(10):
        run_id = stock.remit("start", "apply")
        proc = stock.start("stock-0")
        wait_for_creates(stock, proc, len(creates(stock)) + 1)
        time.sleep(rng.uniform(0, 0.01))
        kill(proc)
        stock.remit("cancel", run_id)

    applied = stock.remit("apply", "--yes")

    assert "Applied:" in applied, why
    declared = declarations()
    vendor = FakeStore(journal=journal(stock))
    made = Counter(e.input["desired"]["name"] for e in vendor.effects if e.op.endswith(".create"))
    assert made == Counter(d.fields["name"] for d in declared.values()), f"{why}: {made}"
    bindings = Lockfile(stock.app / FILE).read()
    held = {**vendor.records(box), **vendor.records(alias)}
    assert sorted(bindings) == sorted(declared), why
    assert sorted(b.id for b in bindings.values()) == sorted(held), why
    assert "No changes: 24 resources match the data files." in stock.remit("plan"), why
    # No create asked a person: each was made again, or read back, under its key.
    assert stock.remit("tasks").count("tsk_") == 0, why

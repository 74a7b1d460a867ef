"""The steps about changes to the app's repo, which every app with a forge has: a branch pushed
to the forge, a change of it opened as someone, where it stands and what its checks said.

The repo is at the forge's fake, in the scenario's own fakes folder (`own_fakes`), made from
the app folder's files the first time a step needs it (`serve/fake_repo.py`). A change's checks
run as a real change's do: `remit test`, `remit plan` and `remit deploy check` in a worktree of
the branch, against the scenario's own database, so a step that waits for them waits seconds
of real time (up to `CHECKS_TIMEOUT`), whatever the scenario's clock says. Deciding a change's
review is the generic `carol approves $change`: `$change` is also the change's run.

A scenario that opens a change is skipped in the processes a change's checks start
(`CHECKING` is set there): inside a change's own `remit test`, it would check itself without
end.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remit.app import App
from remit.changes.checks import CHANGES_DIR, CHECKING
from remit.changes.git import ZERO
from remit.changes.store import Change, Changes
from remit.connectors.resources import FAKES_DIR
from remit.core.errors import AppError
from remit.core.settings import environment_set
from remit.ops.changes import ForgeEvents
from remit.resources.lockfile import FILE as LOCKFILE
from remit.scenarios.features import Scenario, Step
from remit.scenarios.generic import RUN, WHO, generic
from remit.scenarios.world import RESTING, Mismatch, World, acting, principal
from remit.serve.fake_repo import FakeRepo, fake_repo

# How long a step waits for a change's checks (real processes, on the real clock).
CHECKS_TIMEOUT = 300.0
# Where a change stands, and those it only passes through while its run works.
CHANGE_STATUSES = (
    "opened",
    "checking",
    "review",
    "failing",
    "rejected",
    "withdrawn",
    "merged",
    "deploying",
    "deployed",
    "unhealthy",
    "rolled_back",
    "closed",
)
MOVING = ("opened", "checking", "merged", "deploying")
BRANCH = r"\"(?P<branch>[^\"]+)\""
OPENS = (
    rf"{WHO} opens a change of {BRANCH}(?: titled \"(?P<title>[^\"]*)\")?"
    r"(?: as \$(?P<name>[\w-]+))?"
)
# The checks named in `failed on "test" and "plan"` (or `"test", "plan"`).
NAMES = r"\"[^\"]+\"(?:(?:,| and) \"[^\"]+\")*"
# Who a scenario's pushes are by, at the forge.
PUSHER = "scenario"


@contextlib.contextmanager
def own_fakes(app: App) -> Iterator[None]:
    """Around one scenario: its fakes keep their state in a folder of its own, removed after
    (`REMIT_FAKES_DIR`, and `REMIT_CHANGES_DIR` for the mirrors of its repo), as its database
    is its own, and the webhook secret of each of the app's remotes is one of its own. The
    processes a change's checks start see the same, and `CHECKING`. A deploy's bindings go to
    a lockfile of the scenario's own, starting empty: the app folder's `remit.lock` binds the
    real vendors, never the scenario's fakes."""
    with (
        tempfile.TemporaryDirectory(prefix="remit-scenario-fakes-") as folder,
        contextlib.nullcontext()
        if app.resources is None
        else app.resources.lockfile.kept_at(Path(folder) / LOCKFILE),
    ):
        values = {
            FAKES_DIR: os.path.join(folder, "fakes"),
            CHANGES_DIR: os.path.join(folder, "changes"),
        }
        if app.remotes:
            values[CHECKING] = "scenario"
            for connector in app.remotes.values():
                assert connector.remote is not None
                values[connector.remote.webhook_secret] = secrets.token_hex(16)
        with environment_set(values):
            yield


def opens_a_change(scenario: Scenario) -> bool:
    """Whether a step of `scenario` opens a change."""
    opening = re.compile(OPENS)
    return any(opening.fullmatch(step.text.strip()) for step in scenario.steps)


def skipped_here(scenario: Scenario) -> str | None:
    """Why `scenario` does not run in this process (inside a change's checks), or None."""
    if os.environ.get(CHECKING) and opens_a_change(scenario):
        return (
            "it opens a change, and this is a change's own check: it would check itself "
            "without end (it runs in `remit test` outside one)"
        )
    return None


def _repo(world: World) -> FakeRepo:
    """The app's repo at the forge's fake, made from the app folder on first use."""
    if world.repo is not None:
        return world.repo
    try:
        repo = fake_repo(world.app)
    except AppError as error:
        raise AppError(f"a change needs the app's repo: {error}") from None
    if repo is None:
        raise AppError(
            f"app `{world.app.name}` has no forge whose fake is a FakeForge, so a scenario has no "
            "repo to change: give the connector of the repo's git host "
            "`remote=Remote(..., fake=FakeForge)`"
        )
    if world.app.folder is None:
        raise AppError(
            "a scenario's repo is made from the app's folder: load the app with load_app"
        )
    repo.hold(world.app.folder)
    world.repo = repo
    return repo


def _read(world: World, change_id: str) -> Change:
    """The change as the database holds it (a scenario reads what it checks as the harness
    does: under no policy)."""
    found = Changes(world.harness.client.db, world.app.name).get(change_id)
    if found is None:
        raise Mismatch(f"no change {change_id}")
    return found


def _change(world: World, name: str) -> Change:
    if name not in world.changes:
        known = ", ".join(f"${n}" for n in world.changes) or "none yet"
        raise Mismatch(
            f"${name} is not a change this scenario opened (its changes: {known}): open it "
            f'first, `When ann opens a change of "fix-notes" as ${name}`'
        )
    return _read(world, world.changes[name])


def _view(world: World, change_id: str) -> dict[str, Any]:
    """A change as `$name` shows it: its fields, and its run's."""
    change = _read(world, change_id)
    return {
        **world.run_view(change.run_id),
        "change_id": change.id,
        "branch": change.branch,
        "base": change.base,
        "status": change.status,
        "run_status": change.run_status,
        "author": change.author,
        "title": change.title,
        "number": change.number,
        "url": change.url,
        "head": change.head,
        "merge_commit": change.merge_commit,
        "deployed": change.deployed,
        "checks": change.checks,
    }


def _settled(world: World, change_id: str) -> Change:
    """The change once its run has stopped working on it: its checks done and it waits (for a
    review, a push, a rollback's decision), or it ended."""
    deadline = time.monotonic() + CHECKS_TIMEOUT
    while True:
        change = _read(world, change_id)
        run = world.harness.runs.get(change.run_id)
        if run.finished or (run.status in RESTING and change.status not in MOVING):
            break
        if time.monotonic() > deadline:
            raise Mismatch(
                f"change {change_id} is still {change.status} after {CHECKS_TIMEOUT:g} s (its "
                f"run {run.run_id} is {run.status})"
            )
        time.sleep(0.05)
    world.settle([change.run_id])
    return _read(world, change_id)


def _going(world: World, branch: str) -> Change | None:
    """The change of `branch` this scenario opened whose run has not finished."""
    for change_id in world.changes.values():
        change = _read(world, change_id)
        if change.branch == branch and not world.harness.runs.get(change.run_id).finished:
            return change
    return None


@generic(
    rf"the branch {BRANCH} changes \"(?P<path>[^\"]+)\" to:?",
    'the branch "fix" changes "NOTES.md" to:',
)
def branch_changes(world: World, step: Step, m: dict[str, str]) -> None:
    """Push a commit onto the branch (a new one starts at main) with the file at `path` holding
    the docstring; a change of the branch going in this scenario is told, as the forge's
    webhook tells it, and checks the new head."""
    if step.doc is None:
        raise AppError(f"`{step.sentence}` gives no text for {m['path']}: write it in a docstring")
    repo = _repo(world)
    branch, path = m["branch"], m["path"]
    before = repo.head(branch)
    text = step.doc if step.doc.endswith("\n") else step.doc + "\n"
    after = repo.push(branch, {path: text}, message=f"Change {path}", author=PUSHER)
    going = _going(world, branch)
    if going is None:
        return
    forge = world.app.forge()
    assert forge is not None
    headers, body = repo.forge.event(
        "push",
        repo.url,
        secret=os.environ.get(forge.remote.webhook_secret, ""),
        branch=branch,
        before=before or ZERO,
        after=after,
        actor=PUSHER,
    )
    attempt = world.harness.runs.get(going.run_id).attempt
    with acting():
        ForgeEvents(world.harness.client).take(forge.vendor, headers, body)
    world.harness.wait_moved(going.run_id, attempt, timeout=CHECKS_TIMEOUT)
    _settled(world, going.id)


@generic(OPENS, 'ann opens a change of "fix-notes" as $change')
def opens(world: World, step: Step, m: dict[str, str]) -> None:
    """Open a change of the branch as the person (its author), and wait until its checks are
    done. Without `as $name` the change is `$change`."""
    _repo(world)
    name = m.get("name", "change")
    with acting():
        opened = world.harness.client.changes.open(
            m["branch"], title=m.get("title", ""), by=principal(m["who"])
        )
    world.name_run(name, opened.run_id)
    world.changes[name] = opened.id
    world.names.keep_live(name, lambda: _view(world, opened.id))
    _settled(world, opened.id)


@generic(rf"{RUN} is \"?(?P<status>{'|'.join(CHANGE_STATUSES)})\"?", '$change is "review"')
def change_is(world: World, step: Step, m: dict[str, str]) -> None:
    change = _settled(world, _change(world, m["run"]).id)
    if change.status != m["status"]:
        raise Mismatch(
            f"${m['run']} is {change.status} (its run is {change.run_status})",
            expected=[f"status | {m['status']}"],
            actual=[f"status | {change.status}", *_check_lines(change)],
        )


@generic(
    rf"the checks of {RUN} (?:(?P<passed>passed)|failed on (?P<failed>{NAMES}))",
    'the checks of $change failed on "deploy-check"',
)
def checks_are(world: World, step: Step, m: dict[str, str]) -> None:
    """Every check of the change's last head passed, or exactly the named ones failed."""
    change = _settled(world, _change(world, m["run"]).id)
    results = (change.checks or {}).get("results") or {}
    if not results:
        raise Mismatch(f"${m['run']} has no checks yet (it is {change.status})")
    failed = sorted(name for name, result in results.items() if not result.get("ok"))
    wanted = [] if m.get("passed") else sorted(re.findall(r'"([^"]+)"', m["failed"]))
    if failed != wanted:
        said = "passed" if not wanted else f"failed on {', '.join(wanted)}"
        raise Mismatch(
            f"the checks of ${m['run']} did not all go as said ({said})",
            expected=[f"{name} | {'failed' if name in wanted else 'ok'}" for name in results],
            actual=_check_lines(change),
        )


def _check_lines(change: Change) -> list[str]:
    """Each check of the change's last head as a line: ok or failed, and what it said last."""
    results = (change.checks or {}).get("results") or {}
    lines = []
    for name, result in results.items():
        said = [line for line in str(result.get("summary", "")).splitlines() if line.strip()]
        last = f" ({said[-1].strip()})" if said else ""
        lines.append(f"{name} | {'ok' if result.get('ok') else 'failed'}{last}")
    return lines

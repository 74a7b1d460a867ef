"""A change's checks: the branch's own tests, its plan, and its code against the live runs.

Each check runs `remit` in its own process, in a temporary worktree of the commit checked
(so the branch's code is what is imported, never the worker's), against the live database:

- `test`: `remit test`, the branch's scenarios and tests, on fakes, with no access to the live
  database or remit's stored credentials;
- `plan`: `remit plan`, the branch's data files against the live bindings (what a deploy of
  it would change; a plan with changes passes, one that cannot be made fails);
- `deploy-check`: `remit deploy check`, the branch's code replayed against every unfinished
  run in the live database, naming each run it would break.

The worktree is made from a mirror of the forge's repo kept in `REMIT_CHANGES_DIR` (default
`.remit/changes` in the app folder), and removed after, whatever the checks did.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remit.changes.git import Git

CHANGES_DIR = "REMIT_CHANGES_DIR"
# Set in the processes the checks start: a scenario that opens a change skips itself there,
# or it would check itself without end.
CHECKING = "REMIT_CHANGE_CHECK"
CHECK_TIMEOUT = "REMIT_CHANGE_CHECK_TIMEOUT"
# The checks, in the order they run, with the command each runs in the worktree.
CHECKS: dict[str, tuple[str, ...]] = {
    "test": ("test", "-q", "-p", "no:cacheprovider"),
    "plan": ("plan",),
    "deploy-check": ("deploy", "check"),
}
# The last part of a check's output kept as its summary.
KEPT_CHARS = 3000


@dataclass(frozen=True)
class Where:
    """What the checks run against: the repo (its git URL at the forge), the live database,
    and the app folder the worker runs (its name is the package the worktree is imported as)."""

    git_url: str
    database_url: str
    app_folder: Path
    environ: Mapping[str, str]


def mirror_of(where: Where, vendor: str) -> Git:
    """The local mirror of the repo at the forge `vendor`, fetched now. It is named after the
    app folder, as its worktrees are: each is imported as the app's package."""
    base = where.environ.get(CHANGES_DIR) or str(where.app_folder / ".remit" / "changes")
    folder = Path(base) / vendor
    folder.mkdir(parents=True, exist_ok=True)
    return Git.mirror(where.git_url, folder / f"{where.app_folder.name}.git")


def commits(git: Git, base: str, head: str) -> list[dict[str, str]]:
    """What `head` adds over `base`, oldest first."""
    return [
        {"sha": c.sha, "subject": c.subject, "author": c.author} for c in git.commits(base, head)
    ]


def run_checks(git: Git, where: Where, head: str) -> dict[str, dict[str, Any]]:
    """Each check's result on commit `head`: `{"ok": bool, "summary": str}` by name."""
    timeout = float(where.environ.get(CHECK_TIMEOUT) or 1800)
    results: dict[str, dict[str, Any]] = {}
    with git.worktree(head) as tree:
        for name, args in CHECKS.items():
            env = _environ(where, tree, name)
            results[name] = _run(name, [sys.executable, "-m", "remit", *args], tree, env, timeout)
    return results


# All the branch's own tests are given of the worker's environment: they run on fakes, on
# databases of their own, with none of the worker's credentials, tokens or secrets.
_TESTS_SEE = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
# The deploy check reads the database and no credential: it is not given remit's secret key.
_KEYS = ("REMIT_SECRET_KEY", "REMIT_SECRET_KEY_FILE")


def _environ(where: Where, tree: Path, check: str) -> dict[str, str]:
    if check == "test":
        env = {name: where.environ[name] for name in _TESTS_SEE if name in where.environ}
        env.update({CHECKING: check, "REMIT_FAKES": "1"})
    else:
        env = dict(where.environ)
        env.pop("PYTEST_CURRENT_TEST", None)
        env[CHECKING] = check
        if check != "plan":
            for name in _KEYS:
                env.pop(name, None)
        # The plan and the deploy check read the live database; the plan also asks the vendors,
        # with the worker's stored credentials.
        env["REMIT_DATABASE_URL"] = where.database_url
        key_file = where.environ.get("REMIT_SECRET_KEY_FILE") or str(
            where.app_folder / ".remit" / "secret.key"
        )
        if check == "plan" and Path(key_file).exists():
            env["REMIT_SECRET_KEY_FILE"] = key_file
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(tree.parent), env.get("PYTHONPATH", "")] if p
    )
    return env


def _run(
    name: str, command: list[str], cwd: Path, env: Mapping[str, str], timeout: float
) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as output:
        try:
            code = subprocess.run(
                command,
                cwd=cwd,
                env=dict(env),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                text=True,
            ).returncode
        except subprocess.TimeoutExpired:
            output.seek(0)
            return {
                "ok": False,
                "summary": f"`remit {' '.join(command[3:])}` took over {timeout:g} s and was "
                f"stopped\n{_tail(output.read())}",
            }
        output.seek(0)
        text = output.read()
    # `remit plan` exits 2 when the plan has changes: a plan that can be made passes.
    ok = code == 0 or (name == "plan" and code == 2)
    return {"ok": ok, "exit": code, "summary": _tail(text)}


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= KEPT_CHARS else "…" + text[-KEPT_CHARS:]


def first_line(result: Mapping[str, Any]) -> str:
    """A check's result as one line for the forge's status: its last line of output."""
    lines = [line for line in str(result.get("summary", "")).splitlines() if line.strip()]
    text = lines[-1] if lines else ("passed" if result.get("ok") else "failed")
    return text if len(text) <= 140 else text[:139] + "…"

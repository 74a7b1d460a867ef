"""The app's data files and its `source()` revisions, read from the repo at the forge.

With a forge, the built-in `apply` can deploy a revision other than the worker's own code: it
reads the data files as they are at that commit (`remit resources --declared`, run in a
worktree of it), and resolves a host's `source("main")` to the commit `main` is at (in a run,
a recorded call of `remit.source.resolve`; outside one, `git ls-remote`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from remit.changes.checks import Where, mirror_of
from remit.changes.ops import Forge, RepoApp, commit_of, resolve_source
from remit.core.errors import RemitError

if TYPE_CHECKING:
    from remit.execution.context import Context


def _forge(app: RepoApp) -> Forge:
    forge = app.forge()
    if forge is None:
        raise RemitError("the app has no forge remote to read its repo from")
    return forge


def _git_url(app: RepoApp) -> str:
    forge = _forge(app)
    return forge.api(fakes=app.forge_on_fakes).git_url(forge.repo_url)


def resolver(app: RepoApp) -> Any:
    """`Resources.resolve_source` for an app with a forge."""

    def resolve(ctx: Context | None, ref: str) -> str:
        if ctx is not None:
            return str(ctx.call(resolve_source, {"ref": ref}, key=f"source:{ref}").commit)
        return commit_of(_forge(app), _git_url(app), ref)

    return resolve


def files_reader(app: RepoApp) -> Any:
    """`Resources.read_at` for an app with a forge: the declarations at a revision."""

    def read(revision: str) -> Mapping[str, Any]:
        folder = app.folder
        if folder is None:
            raise RemitError(
                f"reading the data files at {revision} needs the app loaded from its folder"
            )
        forge = _forge(app)
        where = Where(
            git_url=_git_url(app), database_url="", app_folder=folder, environ=dict(os.environ)
        )
        git = mirror_of(where, forge.vendor)
        with git.worktree(revision) as tree:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    p for p in [str(tree.parent), os.environ.get("PYTHONPATH", "")] if p
                ),
            }
            done = subprocess.run(
                [sys.executable, "-m", "remit", "resources", "--declared"],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                stdin=subprocess.DEVNULL,
            )
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[-2000:]
            raise RemitError(f"the data files at {revision[:12]} could not be read: {said}")
        try:
            declared = json.loads(done.stdout)["declarations"]
        except (ValueError, KeyError, TypeError):
            raise RemitError(
                f"the data files at {revision[:12]} were printed as {done.stdout[:200]!r}, not "
                'as {"declarations": ...}'
            ) from None
        if not isinstance(declared, dict):
            raise RemitError(f"the data files at {revision[:12]} hold no declarations by name")
        return declared

    return read

"""The app's operations repo on its fake forge, for what runs on fakes: a demo and a scenario.

A forge holds a repo because someone pushed it there. On fakes no one has, so what runs on
fakes and needs the repo puts it there first, where everyone sees it: the demo when it starts,
a scenario when a step first needs it, a test in its setup. `main` is then the app folder's
files (less what remit and Python write beside them: `.remit/`, `__pycache__/`, and whatever
the folder's own `.gitignore` leaves out), and a branch is files laid over `main`.

remit never does this behind a command's back: on fakes as at a real forge, `remit plan` of an
app whose repo no one put there is refused, naming the repo.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from remit.app import App
from remit.changes.fake_forge import FakeForge

# What a repo made from an app folder leaves out: what remit and the tools write beside it.
LEFT_OUT = (".remit", ".git", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")


@dataclass(frozen=True)
class FakeRepo:
    """The app's repo (`url`) at its fake forge."""

    forge: FakeForge
    url: str

    def head(self, branch: str = "main") -> str | None:
        """The branch's head commit, or None when the forge holds no such repo or branch."""
        return self.forge.head(self.url, branch)

    def hold(self, folder: Path, *, message: str = "The app as it is") -> str:
        """Make the repo, its first commit on `main` holding `folder`'s files, unless the forge
        holds it already: `main`'s head."""
        held = self.head()
        if held is not None:
            return held
        with tempfile.TemporaryDirectory(prefix="remit-repo-") as scratch:
            copy = Path(scratch) / folder.name
            shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(*LEFT_OUT))
            return self.forge.create_repo(self.url, copy, message=message, author="remit")

    def push(
        self,
        branch: str,
        files: Mapping[str, str | bytes | None],
        *,
        message: str,
        author: str,
    ) -> str:
        """Commit `files` (paths to their text; None deletes one) over the branch, a new one
        starting at `main`, and move it, as a push does: its new head."""
        return self.forge.push(self.url, branch, dict(files), message, author)

    def lay_over(self, branch: str, folder: Path, *, message: str, author: str) -> str:
        """Push the files under `folder` onto `branch`, each at its path under `folder`."""
        files: dict[str, str | bytes | None] = {
            path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file() and not _left_out(path.relative_to(folder))
        }
        return self.push(branch, files, message=message, author=author)


def _left_out(path: Path) -> bool:
    return any(Path(part).match(pattern) for part in path.parts for pattern in LEFT_OUT)


def fake_repo(app: App) -> FakeRepo | None:
    """The app's repo at its forge's fake, as the app's runs reach it on fakes; None when the
    app has no forge, or its remote's fake is not a `FakeForge` (which a test fills itself).
    Refused, as `app.forge()` is, when the repo's URL is unknown."""
    forge = app.forge()
    if forge is None:
        return None
    api = forge.api(fakes=True)
    if not isinstance(api, FakeForge):
        return None
    return FakeRepo(api, forge.repo_url)

"""Git, through the git CLI: mirrors of the operations repo, worktrees to run checks in, and the
plumbing a fake forge merges with.

Every command runs as `git` in a subprocess, so remit fetches with the user's own credentials
and transport settings. Nothing here reads the user's identity: a commit remit makes names its
author and committer on the command line, and never signs. Each command is confined to the
repo it is given (git's repo discovery stops there), and a failure is a `GitError` naming the
command, the repo and what git said.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from remit.core.errors import RemitError

# Who commits what remit's fakes and tools write: never the user's configured identity.
COMMITTER = ("remit", "remit@remit.invalid")
_AS_COMMITTER = ("-c", f"user.name={COMMITTER[0]}", "-c", f"user.email={COMMITTER[1]}")

# Settings a command is run with whatever the user's config says: quoted paths would garble
# names in messages, and a user's signing or exclude settings must not change what is made.
_SETTINGS = (
    "core.quotePath=false",
    "commit.gpgSign=false",
    f"core.excludesFile={os.devnull}",
    "core.autocrlf=false",
)

# Variables that would point a command at another repo than the one it is given.
_LOCATING = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)

_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
ZERO = "0" * 40


class GitError(RemitError):
    """A git command failed. `command` is what was run, `repo` the repo (or URL) it was run on,
    `stderr` what git said; `retryable` is True where the network may be to blame (clone,
    fetch, ls-remote) and trying again can help."""

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str],
        repo: str,
        returncode: int | None = None,
        stderr: str = "",
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.repo = repo
        self.returncode = returncode
        self.stderr = stderr
        self.retryable = retryable


class MergeConflict(GitError):
    """Two commits do not merge cleanly: `paths` are the files in conflict."""

    def __init__(
        self, message: str, *, command: Sequence[str], repo: str, paths: Sequence[str]
    ) -> None:
        super().__init__(message, command=command, repo=repo, returncode=1)
        self.paths = tuple(paths)


@dataclass(frozen=True)
class Commit:
    """One commit as a change lists it."""

    sha: str
    subject: str
    author: str


def _environ(extra: Mapping[str, str] | None, ceiling: Path | None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in _LOCATING}
    env["GIT_TERMINAL_PROMPT"] = "0"  # a fetch that needs a password fails, never waits
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    if extra:
        env.update(extra)
    return env


def _git(
    args: Sequence[str],
    *,
    repo: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    ok: tuple[int, ...] = (0,),
    retryable: bool = False,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `git args` in `cwd` (confined to it); a GitError unless its exit code is in `ok`."""
    command = ["git", *(part for setting in _SETTINGS for part in ("-c", setting)), *args]
    shown = "git " + " ".join(args)
    ceiling = cwd.parent if cwd is not None else None
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=_environ(env, ceiling),
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as error:
        raise GitError(
            f"`{shown}` could not run: git is not installed or not on PATH ({error})",
            command=command,
            repo=repo,
        ) from error
    except subprocess.TimeoutExpired as error:
        raise GitError(
            f"`{shown}` on {repo} took more than {timeout} seconds and was stopped",
            command=command,
            repo=repo,
            retryable=True,
        ) from error
    if done.returncode not in ok:
        said = done.stderr.decode(errors="replace").strip()
        raise GitError(
            f"`{shown}` failed on {repo} (exit {done.returncode}): {said or 'git said nothing'}",
            command=command,
            repo=repo,
            returncode=done.returncode,
            stderr=said,
            retryable=retryable,
        )
    return done


def _text(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode(errors="replace").strip()


def _identity(name: str, email: str) -> dict[str, str]:
    committer, committer_email = COMMITTER
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": committer,
        "GIT_COMMITTER_EMAIL": committer_email,
    }


def ls_remote(url: str, ref: str, *, timeout: float | None = 60.0) -> str | None:
    """The commit `ref` names at `url` (a full ref, a branch or a tag), or None when the
    remote has no such ref; asks the remote, without a local repo. A full sha is answered as
    it is: the remote lists its refs, not its commits."""
    _refuse_option(url, "URL")
    _refuse_option(ref, "ref")
    if _SHA.fullmatch(ref):
        return ref
    done = _git(("ls-remote", url, ref), repo=url, retryable=True, timeout=timeout)
    found: dict[str, str] = {}
    for line in _text(done).splitlines():
        sha, _, name = line.partition("\t")
        found[name] = sha
    for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if name in found:
            return found[name]
    return None


class Git:
    """A local git repo (a clone, a mirror or a bare repo) at `path`, and what remit does
    with it. `timeout` bounds each command in seconds."""

    def __init__(self, path: Path | str, *, timeout: float | None = 300.0) -> None:
        self.path = Path(path).absolute()
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Git({str(self.path)!r})"

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        ok: tuple[int, ...] = (0,),
        retryable: bool = False,
    ) -> str:
        """`git args` in this repo: what it printed, stripped."""
        done = _git(
            args,
            repo=str(self.path),
            cwd=self.path,
            env=env,
            input=input,
            ok=ok,
            retryable=retryable,
            timeout=self.timeout,
        )
        return _text(done)

    # Mirrors of a remote repo.

    @classmethod
    def mirror(cls, url: str, into: Path | str, *, timeout: float | None = 300.0) -> Git:
        """A mirror of `url` at `into`: cloned with `--mirror` when `into` is absent or empty,
        else fetched (its origin set to `url` first, when it fetched from elsewhere)."""
        _refuse_option(url, "URL")
        folder = Path(into).absolute()
        if folder.is_dir() and any(folder.iterdir()):
            git = cls(folder, timeout=timeout)
            if git.run("rev-parse", "--is-bare-repository", ok=(0, 128)) != "true":
                raise GitError(
                    f"{folder} is to hold a mirror of {url}, and it holds something else: "
                    "remove it, or give another folder",
                    command=("git", "rev-parse", "--is-bare-repository"),
                    repo=str(folder),
                )
            if git.run("config", "--get", "remote.origin.url", ok=(0, 1)) != url:
                git.run("remote", "set-url", "origin", url)
            git.fetch()
            return git
        folder.parent.mkdir(parents=True, exist_ok=True)
        _git(
            ("clone", "--mirror", "--quiet", "--", url, str(folder)),
            repo=url,
            cwd=folder.parent,
            retryable=True,
            timeout=timeout,
        )
        return cls(folder, timeout=timeout)

    def fetch(self) -> None:
        """Bring the repo's refs up to date with its origin, dropping those deleted there."""
        self.run("fetch", "--prune", "--quiet", "origin", retryable=True)

    ls_remote = staticmethod(ls_remote)

    # Reading.

    def resolve(self, ref: str) -> str:
        """The full sha of the commit `ref` names (a branch, tag, `refs/...` or sha); refused,
        naming the ref and the repo, when there is none."""
        _refuse_option(ref, "ref")
        sha = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1, 128))
        if not _SHA.fullmatch(sha):
            raise GitError(
                f"no commit `{ref}` in the repo at {self.path}: name a branch, tag or commit "
                "it has (was it fetched?)",
                command=("git", "rev-parse", "--verify", ref),
                repo=str(self.path),
            )
        return sha

    def branch(self, name: str) -> str | None:
        """The head of branch `name`, or None when there is no such branch."""
        _refuse_option(name, "branch")
        sha = self.run("rev-parse", "--verify", "--quiet", f"refs/heads/{name}", ok=(0, 1))
        return sha or None

    def commits(self, base: str, head: str) -> list[Commit]:
        """What `head` adds over `base`, oldest first."""
        since, until = self.resolve(base), self.resolve(head)
        listed = self.run(
            "log",
            "--reverse",
            "--no-show-signature",
            "--format=%H%x1f%an%x1f%s",
            f"{since}..{until}",
        )
        found = []
        for line in listed.splitlines():
            sha, author, subject = line.split("\x1f", 2)
            found.append(Commit(sha=sha, subject=subject, author=author))
        return found

    def is_ancestor(self, ancestor: str, of: str) -> bool:
        """Whether commit `ancestor` is `of` or in its history."""
        done = _git(
            ("merge-base", "--is-ancestor", self.resolve(ancestor), self.resolve(of)),
            repo=str(self.path),
            cwd=self.path,
            ok=(0, 1),
            timeout=self.timeout,
        )
        return done.returncode == 0

    def merged_by(self, branch: str, head: str) -> str | None:
        """The merge commit on `branch`'s first-parent line that merged `head`, or None."""
        line = self.run("rev-list", "--first-parent", "--parents", f"refs/heads/{branch}")
        for commit in line.splitlines():
            sha, *parents = commit.split()
            if head in parents[1:]:
                return sha
        return None

    # Checks run in a worktree.

    @contextlib.contextmanager
    def worktree(self, rev: str) -> Iterator[Path]:
        """A detached worktree of `rev` in a temporary folder, removed after, even on error."""
        sha = self.resolve(rev)
        parent = Path(tempfile.mkdtemp(prefix="remit-worktree-"))
        tree = parent / self.path.name.removesuffix(".git")
        try:
            self.run("worktree", "add", "--detach", "--quiet", str(tree), sha)
            yield tree
        finally:
            with contextlib.suppress(GitError):
                self.run("worktree", "remove", "--force", "--force", str(tree))
            shutil.rmtree(parent, ignore_errors=True)
            with contextlib.suppress(GitError):
                self.run("worktree", "prune")

    # Writing without a worktree (bare repos: a fake forge, and tests).

    @classmethod
    def init_bare(cls, path: Path | str, *, timeout: float | None = 300.0) -> Git:
        """A new, empty bare repo at `path` (an existing one is left as it is)."""
        folder = Path(path).absolute()
        folder.mkdir(parents=True, exist_ok=True)
        git = cls(folder, timeout=timeout)
        git.run("init", "--bare", "--quiet")
        return git

    def commit(
        self,
        branch: str,
        *,
        message: str,
        folder: Path | str | None = None,
        files: Mapping[str, str | bytes | None] | None = None,
        author: str = COMMITTER[0],
        email: str | None = None,
        start: str | None = None,
    ) -> str:
        """Commit onto `branch` without a worktree and move the branch to it: the new commit's
        sha. Its files are `folder`'s (all of them, as `git add -A` sees them), or the parent's
        with `files` written (a path to its text; None deletes it). The parent is the branch's
        head, or `start` for a new branch. Refused when the branch moved meanwhile."""
        if (folder is None) == (files is None):
            raise ValueError("commit takes either `folder` or `files`")
        _refuse_option(branch, "branch")
        old = self.branch(branch)
        parent = old or (self.resolve(start) if start else None)
        with tempfile.TemporaryDirectory(prefix="remit-index-") as scratch:
            index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if folder is not None:
                tree = self._tree_of_folder(Path(folder), index)
            else:
                assert files is not None
                tree = self._tree_with(parent, files, index)
        parents = ["-p", parent] if parent else []
        sha = self.run(
            *_AS_COMMITTER,
            "commit-tree",
            tree,
            *parents,
            "-F",
            "-",
            env=_identity(author, email or f"{author}@users.remit.invalid"),
            input=message.encode(),
        )
        self.run("update-ref", f"refs/heads/{branch}", sha, old or ZERO)
        return sha

    def _tree_of_folder(self, folder: Path, index: Mapping[str, str]) -> str:
        git_dir = self.run("rev-parse", "--absolute-git-dir")
        _git(
            ("--git-dir", git_dir, "--work-tree", ".", "add", "--all", "."),
            repo=str(self.path),
            cwd=folder.absolute(),
            env=index,
            timeout=self.timeout,
        )
        return self.run("write-tree", env=index)

    def _tree_with(
        self, parent: str | None, files: Mapping[str, str | bytes | None], index: Mapping[str, str]
    ) -> str:
        if parent:
            self.run("read-tree", parent, env=index)
        else:
            self.run("read-tree", "--empty", env=index)
        for path, content in files.items():
            _refuse_option(path, "path")
            if content is None:
                self.run("update-index", "--force-remove", "--", path, env=index)
                continue
            data = content.encode() if isinstance(content, str) else content
            blob = self.run("hash-object", "-w", "--stdin", input=data)
            self.run("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=index)
        return self.run("write-tree", env=index)

    def merge(
        self,
        base: str,
        head: str,
        *,
        message: str,
        author: str = COMMITTER[0],
        email: str | None = None,
    ) -> str:
        """Merge commit `head` into branch `base` without a worktree (`merge-tree
        --write-tree`), as a merge commit with both parents, and move `base` to it only if it
        has not moved meanwhile: the merge commit's sha. `MergeConflict` names the files when
        they do not merge cleanly; nothing is changed then."""
        old = self.resolve(f"refs/heads/{base}")
        theirs = self.resolve(head)
        done = _git(
            ("merge-tree", "--write-tree", "--name-only", "--no-messages", old, theirs),
            repo=str(self.path),
            cwd=self.path,
            ok=(0, 1),
            timeout=self.timeout,
        )
        tree, *conflicted = _text(done).splitlines()
        if done.returncode == 1:
            paths = list(dict.fromkeys(path for path in conflicted if path))
            raise MergeConflict(
                f"{theirs[:12]} does not merge cleanly into `{base}` in {self.path}: "
                f"{', '.join(paths) or 'conflicts'} conflict; merge `{base}` into the branch "
                "and resolve them",
                command=("git", "merge-tree", "--write-tree", old, theirs),
                repo=str(self.path),
                paths=paths,
            )
        sha = self.run(
            *_AS_COMMITTER,
            "commit-tree",
            tree,
            "-p",
            old,
            "-p",
            theirs,
            "-F",
            "-",
            env=_identity(author, email or f"{author}@users.remit.invalid"),
            input=message.encode(),
        )
        self.run("update-ref", f"refs/heads/{base}", sha, old)
        return sha


def _refuse_option(value: str, what: str) -> None:
    """Refuse a value git would read as an option (or an empty one)."""
    if not value or value.startswith("-"):
        raise GitError(
            f"the {what} {value!r} cannot be given to git: it is empty or starts with `-`",
            command=("git",),
            repo="",
        )

"""A fake forge for tests and demos: its repos are bare git repos, its change requests,
statuses and comments are effects in a fake's journal, so every process that opens the same
folder (`$REMIT_FAKES_DIR`) sees one forge. Merges are made in the bare repo, as a forge makes
them (`git merge-tree`), and a push is a commit made there (`FakeForge.push`)."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from remit.changes.git import ZERO, Git, GitError, MergeConflict
from remit.changes.webhooks import sign
from remit.connectors.base import AppliedEffect, Fake
from remit.connectors.forges import ChangeRequest, CommitStatus, ForgeApi
from remit.connectors.resources import FAKES_DIR
from remit.core.errors import DriverError

# The kinds of the fake's writes, as its effects name them (`<vendor>.<kind>`).
_OPEN, _MERGE, _STATUS, _COMMENT = "change.open", "change.merge", "status.create", "comment.create"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FULL_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_process_folder: list[Path] = []
_process_lock = threading.Lock()


def _fakes_folder() -> Path:
    """`$REMIT_FAKES_DIR`, else a folder made once per process and removed when it exits."""
    given = os.environ.get(FAKES_DIR)
    if given:
        return Path(given)
    with _process_lock:
        if not _process_folder:
            folder = Path(tempfile.mkdtemp(prefix="remit-fakes-"))
            atexit.register(_remove, folder, os.getpid())
            _process_folder.append(folder)
        return _process_folder[0]


def _remove(folder: Path, pid: int) -> None:
    if os.getpid() == pid:  # not in a child forked from this process
        shutil.rmtree(folder, ignore_errors=True)


def _refused(message: str, *, status: int = 422, retryable: bool = False) -> DriverError:
    return DriverError(message, retryable=retryable, status=status, maybe_applied=False)


class FakeForge(ForgeApi, Fake):
    """A forge for tests and demos: its repos are bare git repos under `root`
    (`<root>/<host>/<owner>/<name>.git`), its change requests, statuses and comments are effects
    in its journal, so two fakes on one `root` and `journal` (two processes) are one forge.

    By default both are in `$REMIT_FAKES_DIR` (`<vendor>-git/`, `<vendor>.jsonl`), else in a
    folder made once per process; given a `root` alone, the journal is kept in it, and given a
    `journal` alone, the repos are kept beside it. A write repeated under its key answers what
    it first did; a merge is made in the bare repo (`git merge-tree`), refused on a conflict.
    """

    def __init__(
        self,
        root: Path | str | None = None,
        journal: Path | str | None = None,
        *,
        vendor: str = "forge",
    ) -> None:
        if root is None and journal is None:
            folder = _fakes_folder()
            root, journal = folder / f"{vendor}-git", folder / f"{vendor}.jsonl"
        elif root is None:
            assert journal is not None
            root = Path(journal).parent / f"{vendor}-git"
        elif journal is None:
            journal = Path(root) / f"{vendor}.jsonl"
        self.vendor = vendor
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        Path(journal).parent.mkdir(parents=True, exist_ok=True)
        self._changes: dict[tuple[str, int], ChangeRequest] = {}
        self._statuses: dict[tuple[str, str], dict[str, CommitStatus]] = {}
        self._comments: dict[tuple[str, int], list[str]] = {}
        self._folded = 0
        self._fold_lock = threading.Lock()
        super().__init__(journal=journal)

    # ForgeApi.

    def git_url(self, repo: str) -> str:
        return str(self._place(repo)[1])

    def open_change(
        self,
        repo: str,
        *,
        branch: str,
        base: str,
        title: str,
        body: str,
        author: str,
        key: str,
    ) -> ChangeRequest:
        def apply() -> dict[str, Any]:
            git, at = self._repo(repo), self._key(repo)
            for held in self._held_in(at):
                if held.branch == branch and held.state == "open":
                    return self._now(held).model_dump(mode="json")
            head = git.branch(branch)
            if head is None:
                raise _refused(f"the repo {repo} has no branch `{branch}`: push it first")
            if git.branch(base) is None:
                raise _refused(f"the repo {repo} has no branch `{base}` to merge `{branch}` into")
            number = 1 + max((held.number for held in self._held_in(at)), default=0)
            return ChangeRequest(
                number=number,
                repo=repo,
                branch=branch,
                base=base,
                head=head,
                title=title or branch,
                author=author,
                url=f"{repo.removesuffix('.git')}/pull/{number}",
            ).model_dump(mode="json")

        sent = {"repo": repo, "branch": branch, "base": base, "title": title, "body": body}
        made = self._write(_OPEN, key, {**sent, "author": author}, apply)
        return ChangeRequest.model_validate(made)

    def read_change(self, repo: str, number: int) -> ChangeRequest:
        self._fold()
        return self._now(self._held(repo, number))

    def post_status(self, repo: str, status: CommitStatus, *, key: str) -> CommitStatus:
        def apply() -> dict[str, Any]:
            git = self._repo(repo)
            try:
                found = git.resolve(status.sha) if _FULL_SHA.fullmatch(status.sha) else None
            except GitError:
                found = None
            if found != status.sha:
                raise _refused(f"the repo {repo} has no commit {status.sha}: give a full sha")
            return status.model_dump(mode="json")

        made = self._write(_STATUS, key, {"repo": repo, **status.model_dump(mode="json")}, apply)
        return CommitStatus.model_validate(made)

    def statuses(self, repo: str, sha: str) -> list[CommitStatus]:
        self._fold()
        with self._fold_lock:
            return list(self._statuses.get((self._key(repo), sha), {}).values())

    def comment(self, repo: str, number: int, body: str, *, key: str) -> None:
        def apply() -> dict[str, Any]:
            self._held(repo, number)
            return {"repo": repo, "number": number, "body": body}

        self._write(_COMMENT, key, {"repo": repo, "number": number, "body": body}, apply)

    def merge(self, repo: str, number: int, *, head: str, key: str) -> ChangeRequest:
        def apply() -> dict[str, Any]:
            change = self._now(self._held(repo, number))
            if change.state == "merged":
                return change.model_dump(mode="json")
            if change.state == "closed":
                raise _refused(f"change request #{number} of {repo} is closed: reopen it")
            if change.head != head:
                raise _moved(repo, number, change.head, head)
            git = self._repo(repo)
            if git.is_ancestor(head, f"refs/heads/{change.base}"):  # merged before its record
                commit = git.merged_by(change.base, head) or git.resolve(change.base)
            else:
                commit = self._merge_in(git, change)
            return change.model_copy(update={"state": "merged", "merge_commit": commit}).model_dump(
                mode="json"
            )

        made = self._write(_MERGE, key, {"repo": repo, "number": number, "head": head}, apply)
        return ChangeRequest.model_validate(made)

    def _merge_in(self, git: Git, change: ChangeRequest) -> str:
        message = f"Merge change #{change.number} from {change.branch}\n\n{change.title}\n"
        try:
            return git.merge(change.base, change.head, message=message)
        except MergeConflict as conflict:
            raise _refused(
                f"change request #{change.number} of {change.repo} does not merge cleanly into "
                f"`{change.base}` ({', '.join(conflict.paths)} conflict): merge `{change.base}` "
                "into the branch and resolve them",
                status=409,
            ) from None
        except GitError as error:  # the base moved meanwhile: nothing was merged
            raise _refused(
                f"change request #{change.number} of {change.repo} was not merged: {error}",
                status=409,
                retryable=True,
            ) from None

    # Helpers for tests and demos.

    def create_repo(
        self,
        repo: str,
        from_folder: Path | str | None = None,
        *,
        files: Mapping[str, str | bytes | None] | None = None,
        branch: str = "main",
        message: str = "First commit",
        author: str = "remit",
    ) -> str:
        """A new repo at the forge whose first commit on `branch` holds `from_folder`'s files
        (or `files`): that commit's sha."""
        path = self._place(repo)[1]
        if path.exists():
            raise ValueError(f"the fake forge holds a repo at {repo} already (in {path})")
        git = Git.init_bare(path)
        git.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
        if from_folder is not None:
            return git.commit(branch, folder=from_folder, message=message, author=author)
        return git.commit(branch, files=files or {}, message=message, author=author)

    def push(
        self,
        repo: str,
        branch: str,
        content: Path | str | Mapping[str, str | bytes | None],
        message: str = "Change",
        author: str = "dev",
        *,
        start: str = "main",
    ) -> str:
        """Commit onto `branch` (a new one starts at `start`) and move it, as a push would: the
        new head. `content` is a folder (the commit holds its files) or a mapping of paths to
        text written over the branch's files (None deletes one)."""
        git = self._repo(repo)
        if isinstance(content, Mapping):
            return git.commit(branch, files=content, message=message, author=author, start=start)
        return git.commit(branch, folder=content, message=message, author=author, start=start)

    def head(self, repo: str, branch: str = "main") -> str | None:
        """The head of `branch` at the forge, or None when there is no such repo or branch."""
        path = self._place(repo)[1]
        return Git(path).branch(branch) if path.is_dir() else None

    def changes(self, repo: str) -> list[ChangeRequest]:
        """Every change request of `repo`, by number."""
        self._fold()
        return [self._now(change) for change in self._held_in(self._key(repo))]

    def comments(self, repo: str, number: int) -> list[str]:
        """The comments on change request `number`, oldest first."""
        self._fold()
        with self._fold_lock:
            return list(self._comments.get((self._key(repo), number), []))

    def event(
        self,
        kind: str,
        repo: str,
        *,
        secret: str,
        number: int | None = None,
        branch: str | None = None,
        before: str | None = None,
        after: str | None = None,
        body: str = "",
        actor: str = "dev",
        merged: bool = False,
        delivery: str | None = None,
    ) -> tuple[dict[str, str], bytes]:
        """A webhook delivery as GitHub sends it, signed with `secret`: `(headers, body)`.
        `kind` is `push` (of `branch`, to its head unless `after`), `comment` or `merge` (a
        `/merge` comment) on change `number`, `closed` (`merged` or not), or `other` (a ping)."""
        html = repo.removesuffix(".git")
        full_name = self._key(repo).partition("/")[2]
        payload: dict[str, Any] = {
            "repository": {"clone_url": repo, "html_url": html, "full_name": full_name},
            "sender": {"login": actor},
        }
        if kind == "push":
            pushed = branch or "main"
            raw = "push"
            payload.update(
                ref=f"refs/heads/{pushed}",
                before=before or ZERO,
                after=after or self.head(repo, pushed) or ZERO,
                pusher={"name": actor},
            )
        elif kind in ("comment", "merge"):
            raw = "issue_comment"
            payload.update(
                action="created",
                issue={
                    "number": _given(number),
                    "pull_request": {"html_url": f"{html}/pull/{number}"},
                },
                comment={
                    "body": body or ("/merge" if kind == "merge" else ""),
                    "user": {"login": actor},
                },
            )
        elif kind == "closed":
            raw = "pull_request"
            change = self.read_change(repo, _given(number))
            payload.update(
                action="closed",
                number=number,
                pull_request={
                    "number": number,
                    "merged": merged,
                    "merge_commit_sha": change.merge_commit,
                    "head": {"ref": branch or change.branch, "sha": change.head},
                    "base": {"ref": change.base},
                },
            )
        elif kind == "other":
            raw = "ping"
            payload.update(zen="Keep it logically awesome.", hook_id=1)
        else:
            raise ValueError(
                f"no webhook event kind {kind!r}: push, comment, merge, closed or other"
            )
        data = json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": raw,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(secret, data),
            "Content-Type": "application/json",
        }
        return headers, data

    def state(self) -> dict[str, Any]:
        """The forge's change requests, statuses and comments, by repo."""
        self._fold()
        with self._fold_lock:
            return {
                "changes": [
                    change.model_dump(mode="json") for _, change in sorted(self._changes.items())
                ],
                "statuses": {
                    f"{at} {sha}": [status.model_dump(mode="json") for status in held.values()]
                    for (at, sha), held in sorted(self._statuses.items())
                },
                "comments": {
                    f"{at} #{number}": list(held)
                    for (at, number), held in sorted(self._comments.items())
                },
            }

    # The fake's own workings.

    def _write(
        self, kind: str, key: str, input: dict[str, Any], apply: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply one write under its idempotency key, as `Fake.invoke` does an op: one write
        per key at a time, checked and applied under the journal's lock after reading what
        other processes applied; a key seen before answers what it first did."""
        op = f"{self.vendor}.{kind}"
        with self._lock:
            self.calls.append((op, key))
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock, self._vendor_lock():
            self._catch_up()
            if key in self._results:
                first = next(e.op for e in self.effects if e.idempotency_key == key)
                if first != op:
                    raise _refused(
                        f"the key {key} was used for {first} and cannot be used for {op}: "
                        "give each write its own key",
                        status=409,
                    )
                return self._results[key]
            self._fold()
            output = apply()
            self._record(AppliedEffect(op=op, idempotency_key=key, input=input, output=output))
            return output

    def _fold(self) -> None:
        """Bring the state up to date with the effects (this process's and the journal's)."""
        self._catch_up()
        with self._fold_lock:
            with self._lock:
                fresh = self.effects[self._folded :]
                self._folded = len(self.effects)
            for effect in fresh:
                kind, out = effect.op.partition(".")[2], effect.output
                if kind in (_OPEN, _MERGE):
                    change = ChangeRequest.model_validate(out)
                    at = (self._key(change.repo), change.number)
                    if kind == _MERGE or at not in self._changes:
                        self._changes[at] = change
                elif kind == _STATUS:
                    status = CommitStatus.model_validate(out)
                    held = self._statuses.setdefault(
                        (self._key(effect.input["repo"]), status.sha), {}
                    )
                    held[status.context] = status
                elif kind == _COMMENT:
                    at = (self._key(out["repo"]), int(out["number"]))
                    self._comments.setdefault(at, []).append(str(out["body"]))

    def _held_in(self, at: str) -> list[ChangeRequest]:
        with self._fold_lock:
            return [
                change for (held_at, _), change in sorted(self._changes.items()) if held_at == at
            ]

    def _held(self, repo: str, number: int) -> ChangeRequest:
        with self._fold_lock:
            change = self._changes.get((self._key(repo), number))
        if change is None:
            raise _refused(f"the repo {repo} has no change request #{number}", status=404)
        return change

    def _now(self, change: ChangeRequest) -> ChangeRequest:
        """An open change with its branch's head as the forge's git has it now."""
        if change.state != "open":
            return change
        head = self.head(change.repo, change.branch)
        return change.model_copy(update={"head": head}) if head and head != change.head else change

    def _repo(self, repo: str) -> Git:
        path = self._place(repo)[1]
        if not path.is_dir():
            raise _refused(
                f"the fake forge has no repo {repo}: make it with `create_repo`", status=404
            )
        return Git(path)

    def _key(self, repo: str) -> str:
        return self._place(repo)[0]

    def _place(self, repo: str) -> tuple[str, Path]:
        """The repo's key (`host/owner/name`) and its bare repo's folder."""
        parts = urlsplit(repo.strip())
        host = parts.netloc.lower().rpartition("@")[2].replace(":", "_")
        segments = [part for part in parts.path.removesuffix(".git").split("/") if part]
        if not (parts.scheme and segments and all(map(_SEGMENT.fullmatch, [host, *segments]))):
            raise _refused(
                f"the fake forge cannot hold a repo at {repo!r}: give its URL, e.g. "
                "https://git.example.com/acme/ops.git"
            )
        folder = self.root.joinpath(host, *segments[:-1], f"{segments[-1]}.git")
        return "/".join([host, *segments]), folder


def _given(number: int | None) -> int:
    if number is None:
        raise ValueError("this webhook event is about a change request: give its `number`")
    return number


def _moved(repo: str, number: int, now: str, given: str) -> DriverError:
    return DriverError(
        f"change request #{number} of {repo} has moved: its head is {now[:12]}, not "
        f"{given[:12]}; check the new head before merging it",
        retryable=False,
        status=409,
        maybe_applied=False,
    )

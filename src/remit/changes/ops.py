"""remit's own ops on the operations repo: `remit.change.*` at the forge, and
`remit.source.resolve`.

The app's repo is a git repository at a forge (a git host). A connector contributes the forge's
half (`Connector(..., remote=Remote(...))`, `changes/forge.py`); the app finds the one that
serves its repo's URL (`REMIT_REPO_URL`, else the app folder's `origin`). These ops call that
half, on its driver or its fake as the app's other connectors are:

- `remit.change.open`, `status`, `comment` and `merge`: a change request, a commit status, a
  comment and the merge. Only the built-in `change` workflow may call them: the app's load
  check refuses a workflow of the app's that lists one.
- `remit.source.resolve`: a ref of the repo (`main`, a branch, a commit) to its commit, as the
  forge's git has it now. Apply resolves a host's `source("main")` with it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel

from remit.changes.forge import ChangeRequest, CommitStatus, ForgeApi, Remote
from remit.changes.git import GitError, ls_remote
from remit.connectors.base import CallContext, Connector, Implementation, implements
from remit.core.errors import AppError, DriverError, RemitError
from remit.declare.ops import Op, op

if TYPE_CHECKING:
    from remit.declare.resources import ResourceType
    from remit.resources.workflows import Resources

VENDOR = "remit"
REPO_URL = "REMIT_REPO_URL"


class OpenIn(BaseModel):
    branch: str
    base: str = "main"
    title: str = ""
    body: str = ""
    author: str = ""


class StatusIn(BaseModel):
    sha: str
    context: str
    state: Literal["pending", "success", "failure", "error"]
    description: str = ""


class CommentIn(BaseModel):
    number: int
    body: str


class Commented(BaseModel):
    number: int


class MergeIn(BaseModel):
    number: int
    head: str


class ResolveIn(BaseModel):
    ref: str


class Resolved(BaseModel):
    """The commit `ref` names now, and the URL git fetches the repo from."""

    ref: str
    commit: str
    git_url: str
    # Whether the worker calls the vendors' fakes: the checks then plan against them too.
    on_fakes: bool = False


open_change = op(
    "remit.change.open",
    effect="write",
    input=OpenIn,
    output=ChangeRequest,
    idempotent=True,
    description="Open a change request for a branch at the forge (an open one is returned).",
)
post_status = op(
    "remit.change.status",
    effect="write",
    input=StatusIn,
    output=CommitStatus,
    idempotent=True,
    description="Post a check's result on a commit at the forge.",
)
comment = op(
    "remit.change.comment",
    effect="write",
    input=CommentIn,
    output=Commented,
    idempotent=True,
    description="Comment on a change request at the forge.",
)
merge = op(
    "remit.change.merge",
    effect="write",
    input=MergeIn,
    output=ChangeRequest,
    idempotent=True,
    description="Merge a change request at the forge, refused when its head moved.",
)
resolve_source = op(
    "remit.source.resolve",
    effect="read",
    input=ResolveIn,
    output=Resolved,
    description="The commit a ref of the operations repo names now.",
)

OPS: tuple[Op[Any, Any], ...] = (open_change, post_status, comment, merge, resolve_source)


@dataclass(frozen=True)
class Forge:
    """The app's repo as remit reaches it: its URL, the remote that serves it, and its vendor
    (the remote's connector's, which names its webhook: `/forge/<vendor>/events`)."""

    vendor: str
    remote: Remote
    repo_url: str

    def api(self, *, fakes: bool) -> ForgeApi:
        return (self.remote.fake if fakes else self.remote.driver)()


class RepoApp(Protocol):
    """What changes read of the app (`remit.app.App`): its folder, its forge, its resources."""

    @property
    def folder(self) -> Path | None: ...

    @property
    def forge_on_fakes(self) -> bool: ...

    @property
    def resources(self) -> Resources | None: ...

    @property
    def resource_types(self) -> Mapping[str, ResourceType]: ...

    def forge(self) -> Forge | None: ...


def repo_url(
    folder: Path | None, environ: Mapping[str, str] | None = None, *, default: str | None = None
) -> str | None:
    """The URL of the app's operations repo: `REMIT_REPO_URL`, else the app's own (`default`,
    `App(repo=...)`), else the `origin` of the git repository the app folder is in; None when
    there is none of them."""
    env = os.environ if environ is None else environ
    if env.get(REPO_URL):
        return env[REPO_URL].strip()
    if default:
        return default
    if folder is None:
        return None
    try:
        found = subprocess.run(
            ["git", "-C", str(folder), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = found.stdout.strip()
    return url if found.returncode == 0 and url else None


def find_forge(connectors: Iterable[Connector], url: str | None) -> Forge | None:
    """The forge serving the repo at `url` among the connectors' remotes. None when no
    connector has a remote; refused, naming the URL and the remotes, when none serves it."""
    remotes = [(c.vendor, c.remote) for c in connectors if c.remote is not None]
    if not remotes:
        return None
    if url is None:
        raise AppError(
            f"the app declares a forge remote ({', '.join(v for v, _ in remotes)}) but remit "
            f"cannot tell the repo's URL: give it as `App(repo=...)`, set {REPO_URL}, or run "
            "in a git checkout with an `origin` remote"
        )
    serving = [(vendor, remote) for vendor, remote in remotes if remote.serves(url)]
    if not serving:
        known = "; ".join(f"{v}: {', '.join(r.urls)}" for v, r in remotes)
        raise AppError(
            f"no remote of the app serves the repo {url} (the remotes serve {known}): add the "
            f"repo's host to a remote's urls, or name the repo's URL at one (`App(repo=...)` "
            f"or {REPO_URL})"
        )
    if len(serving) > 1:
        raise AppError(
            f"two remotes serve the repo {url} ({', '.join(v for v, _ in serving)}): narrow "
            "their urls so that one does"
        )
    vendor, remote = serving[0]
    return Forge(vendor, remote, url)


def commit_of(forge: Forge, git_url: str, ref: str) -> str:
    """The commit `ref` names now in the repo at `git_url`, the forge's; refused, saying what
    to do, when the repo is not there or has no such ref."""
    try:
        commit = ls_remote(git_url, ref)
    except GitError as error:
        raise GitError(
            f"the repo {forge.repo_url} cannot be read at its forge ({forge.vendor}): "
            f"{error.stderr.strip() or error}. Check that it is there and this machine may "
            "fetch it (on fakes, `remit demo` and a scenario put it there; a test with "
            "`FakeForge().create_repo(url, folder)`)",
            command=error.command,
            repo=error.repo,
            returncode=error.returncode,
            stderr=error.stderr,
            retryable=error.retryable,
        ) from None
    if commit is None:
        raise RemitError(
            f"the repo {forge.repo_url} has no ref `{ref}`: name a branch, a tag or a commit "
            "it holds"
        )
    return commit


class _RepoOps(Implementation):
    """The `remit.change.*` and `remit.source.resolve` ops, through the forge's half."""

    inline: ClassVar[bool] = False

    def __init__(self, forge: Callable[[], Forge | None], *, fakes: bool) -> None:
        self._forge = forge
        self._fakes = fakes
        self._api: ForgeApi | None = None

    def _at(self, op_id: str, call: CallContext) -> tuple[Forge, ForgeApi]:
        forge = self._forge()
        if forge is None:
            raise DriverError(
                f"`{op_id}` needs the app's forge, and no connector of the app has a remote: "
                "add `remote=Remote(...)` to the connector of the repo's git host",
                retryable=False,
                maybe_applied=False,
            )
        if not self._fakes:
            # The driver reads its credentials where remit keeps them: the call's.
            return forge, forge.api(fakes=False).using(call.environ, timeout=call.timeout)
        if self._api is None:
            self._api = forge.api(fakes=True)
        return forge, self._api

    def needs(self, op_id: str) -> tuple[str, ...]:
        forge = self._forge()
        if forge is None or self._fakes:
            return ()
        return tuple(getattr(forge.api(fakes=False), "credentials", ()))

    @implements(open_change)
    def open(self, input: OpenIn, call: CallContext) -> ChangeRequest:
        forge, api = self._at(open_change.id, call)
        return api.open_change(
            forge.repo_url,
            branch=input.branch,
            base=input.base,
            title=input.title or input.branch,
            body=input.body,
            author=input.author,
            key=call.idempotency_key,
        )

    @implements(post_status)
    def status(self, input: StatusIn, call: CallContext) -> CommitStatus:
        forge, api = self._at(post_status.id, call)
        return api.post_status(
            forge.repo_url, CommitStatus(**input.model_dump()), key=call.idempotency_key
        )

    @implements(comment)
    def comment(self, input: CommentIn, call: CallContext) -> Commented:
        forge, api = self._at(comment.id, call)
        api.comment(forge.repo_url, input.number, input.body, key=call.idempotency_key)
        return Commented(number=input.number)

    @implements(merge)
    def merge(self, input: MergeIn, call: CallContext) -> ChangeRequest:
        forge, api = self._at(merge.id, call)
        return api.merge(forge.repo_url, input.number, head=input.head, key=call.idempotency_key)

    @implements(resolve_source)
    def resolve(self, input: ResolveIn, call: CallContext) -> Resolved:
        forge, api = self._at(resolve_source.id, call)
        git_url = api.git_url(forge.repo_url)
        try:
            commit = commit_of(forge, git_url, input.ref)
        except RemitError as error:
            retryable = bool(getattr(error, "retryable", False))
            raise DriverError(str(error), retryable=retryable, maybe_applied=False) from None
        return Resolved(ref=input.ref, commit=commit, git_url=git_url, on_fakes=self._fakes)


def repo_ops(forge: Callable[[], Forge | None], *, fakes: bool) -> Implementation:
    """The implementation of `OPS` on the forge's driver, or on its fake."""
    return _RepoOps(forge, fakes=fakes)

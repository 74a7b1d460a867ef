"""What a connector declares of a forge (a git host): `Remote`, the repos it hosts, and
`ForgeApi`, what its driver and its fake implement, with the models they answer.

They live here, below the change workflow (`remit.changes`), so that `Connector` can hold a
`Remote`; the driver, the fake and the webhook parsing are in `remit.changes.forge`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel

from remit.core.errors import AppError


class ChangeRequest(BaseModel):
    """A change request (a pull request) for a branch of a repo, as the forge holds it."""

    number: int
    repo: str  # the repo's URL as the app knows it, e.g. https://git.acme.test/acme/ops.git
    branch: str
    base: str = "main"
    head: str  # the branch's head commit (full sha) as the forge last saw it
    title: str = ""
    author: str = ""  # the forge login that opened it
    state: Literal["open", "merged", "closed"] = "open"
    merge_commit: str | None = None
    url: str = ""


class CommitStatus(BaseModel):
    """A check's result on a commit, e.g. context `remit/test`."""

    sha: str
    context: str
    state: Literal["pending", "success", "failure", "error"]
    description: str = ""


class ForgeEvent(BaseModel):
    """One webhook delivery, parsed."""

    delivery: str  # the forge's delivery id (a redelivery repeats it)
    kind: Literal["push", "comment", "merge", "closed", "other"]
    repo: str  # the repo URL (as in ChangeRequest.repo)
    branch: str | None = None  # push: the branch pushed; a change's event: its branch, if told
    before: str | None = None  # push: the old head
    after: str | None = None  # push: the new head
    number: int | None = None  # the change request's number, when about one
    body: str = ""  # a comment's text
    actor: str = ""  # the forge login who acted (pusher, commenter)
    raw_kind: str = ""  # the forge's own event name


class ForgeApi(ABC):
    """What a forge's half implements, its driver and its fake alike.

    Every write takes `key`, the idempotency key of remit's call, stable across retries: the
    same key never acts twice. A refusal or a failure is a `DriverError` whose `retryable` and
    `maybe_applied` say what a retry would do.
    """

    credentials: ClassVar[tuple[str, ...]] = ()

    def using(self, environ: Mapping[str, str], *, timeout: float | None = None) -> ForgeApi:
        """This API as one call of remit's makes it: credentials read from `environ` (e.g.
        `CallContext.environ`, remit's secrets over the environment), each request bounded by
        `timeout` seconds. A fake needs neither and answers itself."""
        return self

    @abstractmethod
    def git_url(self, repo: str) -> str:
        """What `git fetch` and `git ls-remote` use for `repo`."""

    @abstractmethod
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
        """Open a change request for `branch` into `base`; one already open for the branch is
        returned as it is."""

    @abstractmethod
    def read_change(self, repo: str, number: int) -> ChangeRequest:
        """Change request `number` as the forge holds it now."""

    @abstractmethod
    def post_status(self, repo: str, status: CommitStatus, *, key: str) -> CommitStatus:
        """Post a check's result on a commit."""

    @abstractmethod
    def statuses(self, repo: str, sha: str) -> list[CommitStatus]:
        """The latest status of each context on commit `sha`, in the order the contexts were
        first posted."""

    @abstractmethod
    def comment(self, repo: str, number: int, body: str, *, key: str) -> None:
        """Comment on change request `number`."""

    @abstractmethod
    def merge(self, repo: str, number: int, *, head: str, key: str) -> ChangeRequest:
        """Merge change request `number` with a merge commit, refused (not retryable) when its
        head is not `head` or it does not merge cleanly; one already merged is answered as it
        is, with its `merge_commit`."""


def normal_url(url: str) -> str:
    """`url` with its scheme and host in lower case and no trailing `.git`."""
    scheme, sep, rest = url.strip().partition("://")
    if sep:
        host, slash, path = rest.partition("/")
        return f"{scheme.lower()}://{host.lower()}{slash}{path}".removesuffix(".git")
    return scheme.removesuffix(".git")


@dataclass(frozen=True)
class Remote:
    """The git repos a forge hosts, and its two halves, e.g.
    `Remote(urls=("https://git.acme.test/",), driver=ForgeDriver, fake=FakeForge)`.

    `urls` are prefixes of the repo URLs the forge serves; `driver` and `fake` are called with
    no arguments to make a `ForgeApi`. `webhook_secret` names remit's secret (or environment
    variable) the forge signs its webhooks with.
    """

    urls: tuple[str, ...]
    driver: Callable[[], ForgeApi]
    fake: Callable[[], ForgeApi]
    webhook_secret: str = "FORGE_WEBHOOK_SECRET"

    def __post_init__(self) -> None:
        urls = (self.urls,) if isinstance(self.urls, str) else tuple(self.urls)
        if not urls or not all(isinstance(url, str) and url.strip() for url in urls):
            raise AppError(
                f"Remote(urls={self.urls!r}): give the prefixes of the repo URLs the forge "
                "hosts, e.g. urls=('https://git.example.com/',)"
            )
        object.__setattr__(self, "urls", urls)
        for role in ("driver", "fake"):
            if not callable(getattr(self, role)):
                raise AppError(
                    f"Remote({role}={getattr(self, role)!r}): give a class or function that "
                    "makes the forge's API when called with no arguments"
                )
        if not isinstance(self.webhook_secret, str) or not self.webhook_secret:
            raise AppError(
                f"Remote(webhook_secret={self.webhook_secret!r}): name the secret the forge "
                "signs its webhooks with, e.g. 'FORGE_WEBHOOK_SECRET'"
            )

    def serves(self, repo_url: str) -> bool:
        """Whether the repo at `repo_url` is one of this forge's: a prefix of `urls` matches it,
        whatever the case of the scheme and host and with or without `.git`."""
        url = normal_url(repo_url)
        for prefix in map(normal_url, self.urls):
            if url == prefix or (
                url.startswith(prefix) and (prefix.endswith("/") or url[len(prefix)] == "/")
            ):
                return True
        return False

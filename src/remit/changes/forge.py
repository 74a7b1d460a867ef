"""The forge's half of a change, in one place: its REST API in GitHub's shape
(`ForgeDriver`, here), a fake forge over bare git repos (`FakeForge`, `fake_forge.py`), and its
webhooks (`sign`, `verify`, `parse_event`, `webhooks.py`).

`Remote`, `ForgeApi` and the models are declared in `remit.connectors.forges`, since a
connector holds a `Remote`; they are exported here too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import httpx

from remit.changes.fake_forge import FakeForge
from remit.changes.webhooks import login, parse_event, sign, verify
from remit.connectors.base import Driver
from remit.connectors.forges import ChangeRequest, CommitStatus, ForgeApi, ForgeEvent, Remote
from remit.core.errors import DriverError, MissingCredential

__all__ = [
    "ChangeRequest",
    "CommitStatus",
    "FakeForge",
    "ForgeApi",
    "ForgeDriver",
    "ForgeEvent",
    "Remote",
    "parse_event",
    "sign",
    "verify",
]


def _owner_name(repo: str) -> tuple[str, str]:
    """`(owner, name)` from a repo URL's path, e.g. `https://host/acme/ops.git`."""
    parts = [part for part in urlsplit(repo).path.removesuffix(".git").split("/") if part]
    if len(parts) != 2:
        raise DriverError(
            f"the repo URL {repo!r} does not end in <owner>/<name>: give the repo's URL at the "
            "forge, e.g. https://git.example.com/acme/ops.git",
            retryable=False,
            maybe_applied=False,
        )
    return parts[0], parts[1]


def _pull(repo: str, answer: Any) -> ChangeRequest:
    """A GitHub pull request as a `ChangeRequest`."""
    try:
        head, base = answer.get("head") or {}, answer.get("base") or {}
        merged = bool(answer.get("merged") or answer.get("merged_at"))
        state = "merged" if merged else "closed" if answer.get("state") == "closed" else "open"
        return ChangeRequest(
            number=answer["number"],
            repo=repo,
            branch=head["ref"],
            base=base.get("ref") or "main",
            head=head["sha"],
            title=answer.get("title") or "",
            author=login(answer.get("user")),
            state=state,
            merge_commit=answer.get("merge_commit_sha") if merged else None,
            url=answer.get("html_url") or "",
        )
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise DriverError(
            f"the forge answered a pull request of {repo} remit cannot read ({error})",
            retryable=False,
        ) from None


class ForgeDriver(ForgeApi, Driver):
    """A forge's REST API in GitHub's shape, at `FORGE_API_URL` with `FORGE_API_TOKEN` as a
    Bearer token. Credentials are read from `environ` (default: the process's environment;
    `using(call.environ)` gives one that reads remit's secrets) at each request; every write
    sends its key as `Idempotency-Key`, and redirects are not followed."""

    credentials: ClassVar[tuple[str, ...]] = ("FORGE_API_URL", "FORGE_API_TOKEN")

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.transport = transport
        self.timeout = timeout

    def using(self, environ: Mapping[str, str], *, timeout: float | None = None) -> ForgeDriver:
        return ForgeDriver(
            environ,
            transport=self.transport,
            timeout=self.timeout if timeout is None else timeout,
        )

    def git_url(self, repo: str) -> str:
        return repo

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
        found = self._open_for(repo, branch)
        if found is not None:
            return found
        sent = {"title": title or branch, "head": branch, "base": base, "body": body}
        try:
            made = self._request("POST", repo, "/pulls", sent, key=key)
        except DriverError as refused:
            # A pull request opened meanwhile for the branch (another try, a person) is refused
            # as a duplicate: that one is the answer.
            found = self._open_for(repo, branch) if refused.status == 422 else None
            if found is None:
                raise
            return found
        return _pull(repo, made)

    def _open_for(self, repo: str, branch: str) -> ChangeRequest | None:
        owner, _ = _owner_name(repo)
        head = quote(f"{owner}:{branch}", safe="")
        listed = self._request("GET", repo, f"/pulls?head={head}&state=open")
        if not isinstance(listed, list):
            raise DriverError(
                f"the forge answered the open pull requests of {repo} with something other "
                "than a list",
                retryable=False,
            )
        for pull in listed:
            change = _pull(repo, pull)
            if change.branch == branch:
                return change
        return None

    def read_change(self, repo: str, number: int) -> ChangeRequest:
        return _pull(repo, self._request("GET", repo, f"/pulls/{int(number)}"))

    def post_status(self, repo: str, status: CommitStatus, *, key: str) -> CommitStatus:
        sent = {"state": status.state, "context": status.context}
        if status.description:
            sent["description"] = status.description
        made = self._request("POST", repo, f"/statuses/{_sha(status.sha)}", sent, key=key)
        made = made if isinstance(made, dict) else {}
        return CommitStatus(
            sha=status.sha,
            context=made.get("context") or status.context,
            state=made.get("state") or status.state,
            description=made.get("description") or "",
        )

    def statuses(self, repo: str, sha: str) -> list[CommitStatus]:
        listed = self._request("GET", repo, f"/commits/{_sha(sha)}/statuses?per_page=100")
        if not isinstance(listed, list):
            raise DriverError(
                f"the forge answered the statuses of {sha} in {repo} with something other "
                "than a list",
                retryable=False,
            )
        latest: dict[str, CommitStatus] = {}
        for each in reversed(listed):  # the forge lists them newest first
            try:
                status = CommitStatus(
                    sha=sha,
                    context=each["context"],
                    state=each["state"],
                    description=each.get("description") or "",
                )
            except (AttributeError, KeyError, TypeError, ValueError) as error:
                raise DriverError(
                    f"the forge answered a status of {sha} in {repo} remit cannot read ({error})",
                    retryable=False,
                ) from None
            latest[status.context] = status  # a context keeps its first place, its latest state
        return list(latest.values())

    def comment(self, repo: str, number: int, body: str, *, key: str) -> None:
        self._request("POST", repo, f"/issues/{int(number)}/comments", {"body": body}, key=key)

    def merge(self, repo: str, number: int, *, head: str, key: str) -> ChangeRequest:
        change = self.read_change(repo, number)
        if change.state == "merged":
            return change
        if change.state == "closed":
            raise DriverError(
                f"change request #{number} of {repo} is closed: reopen it to merge it",
                retryable=False,
                maybe_applied=False,
            )
        if change.head != head:
            raise _moved(repo, number, change.head, head)
        sent = {"sha": head, "merge_method": "merge"}
        try:
            merged = self._request("PUT", repo, f"/pulls/{int(number)}/merge", sent, key=key)
        except DriverError:
            # Another try of this merge (a worker that died after sending it) may have merged
            # it meanwhile: that merge of this head is this one's answer.
            again = self.read_change(repo, number)
            if again.state == "merged" and again.head == head:
                return again
            raise
        change = self.read_change(repo, number)
        if change.state != "merged":  # the forge may show the merge a moment later
            commit = merged.get("sha") if isinstance(merged, dict) else None
            change = change.model_copy(update={"state": "merged", "merge_commit": commit})
        return change

    def _credential(self, name: str) -> str:
        value = self.environ.get(name)
        if not value:
            raise MissingCredential(
                f"the forge driver needs the credential `{name}`: store it with `remit secrets "
                f"set {name}`, or set the environment variable {name} (or run on fakes)",
                op="forge",
                variable=name,
            )
        return value

    def _request(
        self,
        method: str,
        repo: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> Any:
        """`method /repos/{owner}/{name}{path}` with a JSON body: the forge's JSON answer."""
        owner, name = _owner_name(repo)
        base = self._credential("FORGE_API_URL").rstrip("/")
        if urlsplit(base).scheme not in ("http", "https"):
            raise DriverError(
                f"FORGE_API_URL is {base!r}, which is not an http(s) address: set it to the "
                "forge API's base URL",
                retryable=False,
                maybe_applied=False,
            )
        what = f"{method} /repos/{owner}/{name}{path}"
        headers = {
            "Authorization": f"Bearer {self._credential('FORGE_API_TOKEN')}",
            "Accept": "application/vnd.github+json",
        }
        if key is not None:
            headers["Idempotency-Key"] = key
        url = f"{base}/repos/{quote(owner, safe='')}/{quote(name, safe='')}{path}"
        try:
            with httpx.Client(
                transport=self.transport, timeout=self.timeout, follow_redirects=False
            ) as client:
                response = client.request(method, url, json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise DriverError(
                f"the forge API at {base} is unreachable ({error}): is it up, and is "
                "FORGE_API_URL right?",
                retryable=True,
                maybe_applied=False,
            ) from error
        except httpx.HTTPError as error:
            raise DriverError(
                f"the forge API at {base} failed {what}: {type(error).__name__}: {error}",
                retryable=True,
            ) from error
        return _answer(response, base, what)


def _answer(response: httpx.Response, base: str, what: str) -> Any:
    status = response.status_code
    if 300 <= status < 400:
        raise DriverError(
            f"the forge API at {base} answered {what} with a redirect ({status}), which is not "
            "followed: set FORGE_API_URL to the API's own address",
            retryable=False,
            status=status,
            maybe_applied=False,
        )
    try:
        answer = response.json() if response.content else {}
    except ValueError:
        raise DriverError(
            f"the forge API at {base} answered {what} with {status} and a body that is not "
            "JSON: is FORGE_API_URL right?",
            retryable=status == 429 or status >= 500,
            status=status,
        ) from None
    if status >= 400:
        said = answer.get("message") or answer.get("error") if isinstance(answer, dict) else None
        hint = "; check FORGE_API_TOKEN" if status in (401, 403) else ""
        raise DriverError(
            f"the forge API refused {what} ({status}): {said or response.reason_phrase}{hint}",
            retryable=status == 429 or status >= 500,
            status=status,
        )
    return answer


def _sha(sha: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{7,64}", sha):
        raise DriverError(
            f"{sha!r} is not a commit sha: give the commit's hex sha",
            retryable=False,
            maybe_applied=False,
        )
    return sha


def _moved(repo: str, number: int, now: str, given: str) -> DriverError:
    return DriverError(
        f"change request #{number} of {repo} has moved: its head is {now[:12]}, not "
        f"{given[:12]}; check the new head before merging it",
        retryable=False,
        status=409,
        maybe_applied=False,
    )

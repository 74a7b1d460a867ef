"""A forge's webhooks, in GitHub's shape: the signature over a delivery's body (`sign`,
`verify`) and what a delivery says (`parse_event`)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from remit.connectors.forges import ForgeEvent


def sign(secret: str, body: bytes) -> str:
    """The signature a forge sends with `body`: `sha256=<hex>` of its HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether `signature` is `body`'s under `secret` (compared in constant time). A missing
    signature, or an empty secret, never verifies."""
    if not secret or not signature:
        return False
    return hmac.compare_digest(sign(secret, body).encode(), signature.strip().encode())


def parse_event(headers: Mapping[str, str], body: bytes) -> ForgeEvent:
    """One webhook delivery in GitHub's shape (`X-GitHub-Event`, `X-GitHub-Delivery`) as a
    `ForgeEvent`: a branch pushed, a comment on a change request (`merge` when its first line
    is `/merge`), a change request closed, or `other`. A `ValueError` names what is missing."""
    lowered = {name.lower(): value for name, value in headers.items()}
    raw_kind = lowered.get("x-github-event", "").strip()
    delivery = lowered.get("x-github-delivery", "").strip()
    for header, value in (("X-GitHub-Event", raw_kind), ("X-GitHub-Delivery", delivery)):
        if not value:
            raise ValueError(f"the webhook delivery has no {header} header: send GitHub's headers")
    try:
        payload = json.loads(body)
    except ValueError:
        raise ValueError(f"the body of webhook delivery {delivery} is not JSON") from None
    if not isinstance(payload, dict):
        raise ValueError(f"the body of webhook delivery {delivery} is not a JSON object")
    repo = _repo_of(payload)
    event = ForgeEvent(delivery=delivery, kind="other", repo=repo or "", raw_kind=raw_kind)
    sender = login(payload.get("sender"))
    if raw_kind == "push":
        ref = _text(payload, "ref", delivery)
        if not ref.startswith("refs/heads/"):
            return event.model_copy(update={"actor": sender})
        pusher = payload.get("pusher")
        actor = pusher.get("name") if isinstance(pusher, dict) else None
        return event.model_copy(
            update={
                "kind": "push",
                "repo": _needed(repo, delivery),
                "branch": ref.removeprefix("refs/heads/"),
                "before": _text(payload, "before", delivery),
                "after": _text(payload, "after", delivery),
                "actor": actor if isinstance(actor, str) else sender,
            }
        )
    if raw_kind == "issue_comment":
        issue, comment = payload.get("issue"), payload.get("comment")
        if not isinstance(issue, dict) or not isinstance(comment, dict):
            raise ValueError(f"webhook delivery {delivery} (issue_comment) has no issue or comment")
        number = _number(issue.get("number"), delivery)
        body_text = comment.get("body") if isinstance(comment.get("body"), str) else ""
        if payload.get("action") != "created" or not issue.get("pull_request"):
            return event.model_copy(update={"number": number, "actor": sender})
        first = str(body_text).split("\n", 1)[0].rstrip("\r")
        return event.model_copy(
            update={
                "kind": "merge" if first == "/merge" else "comment",
                "repo": _needed(repo, delivery),
                "number": number,
                "body": body_text,
                "actor": login(comment.get("user")) or sender,
            }
        )
    if raw_kind == "pull_request":
        pull = payload.get("pull_request")
        if not isinstance(pull, dict):
            raise ValueError(f"webhook delivery {delivery} (pull_request) has no pull_request")
        head = pull.get("head")
        branch = head.get("ref") if isinstance(head, dict) else None
        update: dict[str, Any] = {
            "number": _number(pull.get("number", payload.get("number")), delivery),
            "branch": branch if isinstance(branch, str) else None,
            "actor": sender,
        }
        if payload.get("action") == "closed":
            update.update(kind="closed", repo=_needed(repo, delivery))
        return event.model_copy(update=update)
    return event.model_copy(update={"actor": sender})


def _repo_of(payload: Mapping[str, Any]) -> str | None:
    repository = payload.get("repository")
    if not isinstance(repository, dict):
        return None
    clone_url, html_url = repository.get("clone_url"), repository.get("html_url")
    if isinstance(clone_url, str) and clone_url:
        return clone_url
    if isinstance(html_url, str) and html_url:
        return html_url + ".git"
    return None


def _needed(repo: str | None, delivery: str) -> str:
    if not repo:
        raise ValueError(
            f"webhook delivery {delivery} names no repository (repository.clone_url or html_url)"
        )
    return repo


def _text(payload: Mapping[str, Any], name: str, delivery: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"webhook delivery {delivery} has no `{name}`")
    return value


def _number(value: Any, delivery: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"webhook delivery {delivery} has no change request number")
    return value


def login(user: Any) -> str:
    """The `login` of a GitHub user object, or "" when there is none."""
    login = user.get("login") if isinstance(user, dict) else None
    return login if isinstance(login, str) else ""

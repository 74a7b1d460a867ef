"""A local stand-in for a forge's REST API in GitHub's shape, for testing `ForgeDriver` over
real HTTP (served with `tests.vendor_servers.serve`).

State is in memory, and a test may read and change it directly: `branches` (by
`(owner, name, branch)`, the head sha a push left), `pulls`, `statuses`, `comments`, and
`mergeable` (False: every merge is refused with 405). Every request needs the Bearer `TOKEN`;
every POST and PUT needs an `Idempotency-Key`, and the same key again answers what the first
request did. `fail_next` makes the next request fail with a status; `requests` records each
request's method, path and key.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = "forge-test-token"

Answer = tuple[int, Any]


class Refused(Exception):
    """What a handler raises to answer GitHub's error shape: `{"message": message}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class ForgeServer:
    """The forge: pull requests by `(owner, name)` and number, statuses and comments."""

    def __init__(self) -> None:
        self.branches: dict[tuple[str, str, str], str] = {}
        self.pulls: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        self.statuses: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        self.comments: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        self.mergeable = True
        self.fail_next: int | None = None
        self.requests: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        self._replays: dict[str, Answer] = {}
        self._made = 0
        base = "/repos/{owner}/{name}"
        self.app = Starlette(
            routes=[
                self.route(f"{base}/pulls", "GET", self.list_pulls),
                self.route(f"{base}/pulls", "POST", self.create_pull),
                self.route(base + "/pulls/{number:int}", "GET", self.read_pull),
                self.route(base + "/pulls/{number:int}/merge", "PUT", self.merge_pull),
                self.route(base + "/statuses/{sha}", "POST", self.create_status),
                self.route(base + "/commits/{sha}/statuses", "GET", self.list_statuses),
                self.route(base + "/issues/{number:int}/comments", "POST", self.create_comment),
            ]
        )

    def route(self, path: str, method: str, handler: Any) -> Route:
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return JSONResponse({"message": "Problems parsing JSON"}, status_code=400)
            key = request.headers.get("idempotency-key")
            with self.lock:
                self.requests.append((method, request.url.path, key))
                if request.headers.get("authorization") != f"Bearer {TOKEN}":
                    return JSONResponse({"message": "Bad credentials"}, status_code=401)
                failing, self.fail_next = self.fail_next, None
                if failing is not None:
                    return JSONResponse({"message": "Server Error"}, status_code=failing)
                if method in ("POST", "PUT"):
                    if not key:
                        return JSONResponse(
                            {"message": "an Idempotency-Key header is required"}, status_code=400
                        )
                    if key in self._replays:
                        return _response(*self._replays[key])
                try:
                    status, answer = handler(request, body)
                except Refused as refused:
                    status, answer = refused.status, {"message": refused.message}
                if method in ("POST", "PUT") and key and status < 500:
                    self._replays[key] = (status, answer)
                return _response(status, answer)

        return Route(path, endpoint, methods=[method])

    # Pull requests.

    def shown(self, owner: str, name: str, pull: dict[str, Any]) -> dict[str, Any]:
        """A pull request as GitHub answers it, an open one at its branch's head now."""
        shown = json.loads(json.dumps(pull))
        if pull["state"] == "open":
            shown["head"]["sha"] = self.branches[(owner, name, pull["head"]["ref"])]
        return shown

    def list_pulls(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        head, state = request.query_params.get("head"), request.query_params.get("state", "open")
        found = [
            self.shown(owner, name, pull)
            for pull in self.pulls.get((owner, name), {}).values()
            if (state == "all" or pull["state"] == state)
            and (head is None or f"{owner}:{pull['head']['ref']}" == head)
        ]
        return 200, found

    def create_pull(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        head, base = body.get("head"), body.get("base")
        for branch in (head, base):
            if (owner, name, branch) not in self.branches:
                raise Refused(422, f"Validation Failed: no branch {branch}")
        held = self.pulls.setdefault((owner, name), {})
        if any(p["state"] == "open" and p["head"]["ref"] == head for p in held.values()):
            raise Refused(422, f"A pull request already exists for {owner}:{head}.")
        number = len(held) + 1
        held[number] = {
            "number": number,
            "state": "open",
            "title": body.get("title", ""),
            "body": body.get("body", ""),
            "user": {"login": "remit-bot"},
            "head": {"ref": head, "sha": self.branches[(owner, name, head)]},
            "base": {"ref": base},
            "merged": False,
            "merged_at": None,
            "merge_commit_sha": None,
            "html_url": f"https://git.test/{owner}/{name}/pull/{number}",
        }
        return 201, self.shown(owner, name, held[number])

    def pull(self, request: Request) -> dict[str, Any]:
        owner, name = _repo(request)
        number = request.path_params["number"]
        found = self.pulls.get((owner, name), {}).get(number)
        if found is None:
            raise Refused(404, "Not Found")
        return found

    def read_pull(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        return 200, self.shown(owner, name, self.pull(request))

    def merge_pull(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        pull = self.pull(request)
        if pull["state"] != "open" or not self.mergeable:
            raise Refused(405, "Pull Request is not mergeable")
        head = self.branches[(owner, name, pull["head"]["ref"])]
        if body.get("sha") != head:
            raise Refused(409, "Head branch was modified. Review and try the merge again.")
        base = (owner, name, pull["base"]["ref"])
        commit = hashlib.sha1(f"{self.branches[base]}+{head}".encode()).hexdigest()
        self.branches[base] = commit
        pull.update(
            state="closed", merged=True, merged_at="2026-01-01T00:00:00Z", merge_commit_sha=commit
        )
        pull["head"]["sha"] = head
        return 200, {"sha": commit, "merged": True, "message": "Pull Request successfully merged"}

    # Statuses and comments.

    def create_status(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        if body.get("state") not in ("pending", "success", "failure", "error"):
            raise Refused(422, "Validation Failed: state")
        self._made += 1
        made = {
            "id": self._made,
            "state": body["state"],
            "context": body.get("context", "default"),
            "description": body.get("description"),
        }
        held = self.statuses.setdefault((owner, name, request.path_params["sha"]), [])
        held.insert(0, made)  # newest first, as GitHub lists them
        return 201, made

    def list_statuses(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        return 200, list(self.statuses.get((owner, name, request.path_params["sha"]), []))

    def create_comment(self, request: Request, body: dict[str, Any]) -> Answer:
        owner, name = _repo(request)
        self.pull(request)
        self._made += 1
        made = {"id": self._made, "body": body.get("body", ""), "user": {"login": "remit-bot"}}
        self.comments.setdefault((owner, name, request.path_params["number"]), []).append(made)
        return 201, made


def _repo(request: Request) -> tuple[str, str]:
    return request.path_params["owner"], request.path_params["name"]


def _response(status: int, answer: Any) -> Response:
    return JSONResponse(answer, status_code=status)

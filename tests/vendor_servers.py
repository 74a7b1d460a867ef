"""Local stand-ins for the example vendors' APIs (`examples/acme/connectors`: dns, hosting,
pgcloud), for testing their drivers over real HTTP.

Each is a small Starlette app over state in memory that a test may read and change directly
(`items`, by id), as a person at the vendor's console would. Every request needs the Bearer
`TOKEN`; every POST needs an `Idempotency-Key`, and the same key again answers what the first
request did, making nothing twice. `fail_next` makes the next request fail with a status.
`serve(app)` runs one on 127.0.0.1 in a thread and yields its base URL.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = "vendor-test-token"
REGIONS = ("eu-west-1", "us-east-1")

Answer = tuple[int, dict[str, Any] | None]
Handler = Callable[[Request, dict[str, Any]], Answer]


class Refused(Exception):
    """What a handler raises to answer an error: `{"error": message, "code": code}`."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def _missing(what: str, id: str) -> Refused:
    return Refused(404, f"no {what} {id}", "not_found")


def _text(body: dict[str, Any], name: str, *, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value:
        raise Refused(422, f"`{name}` must be a non-empty string", "invalid")
    return value


def _strings(body: dict[str, Any], name: str) -> dict[str, str]:
    value = body.get(name, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Refused(422, f"`{name}` must map names to strings", "invalid")
    return dict(value)


def _revision(body: dict[str, Any]) -> str | None:
    value = body.get("revision")
    if value is not None and (not isinstance(value, str) or not value):
        raise Refused(422, "`revision` must be a commit's sha, or null", "invalid")
    return value


def _unchanged(body: dict[str, Any], held: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if name in body and body[name] != held.get(name):
            raise Refused(422, f"`{name}` cannot change; make a new one", "immutable")


class VendorServer:
    """What the three vendors' servers share: the state, the token check, the replay of a
    POST's idempotency key, and `fail_next`."""

    prefix = "obj"

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.fail_next: int | None = None
        self.lock = threading.Lock()
        self._replays: dict[str, tuple[int, dict[str, Any] | None]] = {}
        self._made = 0
        self.app = Starlette(routes=self.routes())

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def route(self, path: str, method: str, handler: Handler) -> Route:
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return _error(400, "the body is not JSON", "invalid")
            if not isinstance(body, dict):
                return _error(400, "the body must be a JSON object", "invalid")
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                return _error(401, "unknown token", "unauthorized")
            with self.lock:
                failing, self.fail_next = self.fail_next, None
                if failing is not None:
                    return _error(failing, "the vendor failed the request", "failed")
                key = request.headers.get("idempotency-key")
                if method == "POST":
                    if not key:
                        return _error(400, "an Idempotency-Key header is required", "invalid")
                    if key in self._replays:
                        return _response(*self._replays[key])
                try:
                    status, answer = handler(request, body)
                except Refused as refused:
                    status, answer = (
                        refused.status,
                        {"error": refused.message, "code": refused.code},
                    )
                if method == "POST" and key and status < 500:
                    self._replays[key] = (status, answer)
                return _response(status, answer)

        return Route(path, endpoint, methods=[method])

    def new_id(self) -> str:
        self._made += 1
        return f"{self.prefix}_{self._made:04d}"

    def held(self, what: str, id: str) -> dict[str, Any]:
        found = self.items.get(id)
        if found is None:
            raise _missing(what, id)
        return found

    def delete(self, what: str, request: Request) -> Answer:
        id = request.path_params["id"]
        if self.items.pop(id, None) is None:
            raise _missing(what, id)
        return 204, None


def _error(status: int, message: str, code: str) -> Response:
    return JSONResponse({"error": message, "code": code}, status_code=status)


def _response(status: int, answer: dict[str, Any] | None) -> Response:
    if answer is None:
        return Response(status_code=status)
    return JSONResponse(answer, status_code=status)


class DnsServer(VendorServer):
    """The DNS provider: records by id, `rec_…`."""

    prefix = "rec"

    def routes(self) -> list[Route]:
        return [
            self.route("/zones/{zone}/records", "POST", self.create),
            self.route("/records/{id}", "GET", self.read),
            self.route("/records/{id}", "PATCH", self.update),
            self.route("/records/{id}", "DELETE", lambda r, b: self.delete("record", r)),
        ]

    def create(self, request: Request, body: dict[str, Any]) -> Answer:
        ttl = body.get("ttl", 300)
        if not isinstance(ttl, int) or ttl < 1:
            raise Refused(422, "`ttl` must be a positive number of seconds", "invalid")
        id = self.new_id()
        self.items[id] = {
            "id": id,
            "zone": request.path_params["zone"],
            "name": _text(body, "name"),
            "type": _text(body, "type"),
            "content": _text(body, "content"),
            "ttl": ttl,
        }
        return 201, dict(self.items[id])

    def read(self, request: Request, body: dict[str, Any]) -> Answer:
        return 200, dict(self.held("record", request.path_params["id"]))

    def update(self, request: Request, body: dict[str, Any]) -> Answer:
        held = self.held("record", request.path_params["id"])
        _unchanged(body, held, ("zone", "name", "type"))
        if "content" in body:
            held["content"] = _text(body, "content")
        if "ttl" in body:
            held["ttl"] = body["ttl"]
        return 200, dict(held)


class HostingServer(VendorServer):
    """The container host: containers by id, `ctr_…`, each running the `revision` it was
    last sent. What a container was sent in `secret_env` is kept in `secret_env`, by id, and
    never answered."""

    prefix = "ctr"

    def __init__(self) -> None:
        self.secret_env: dict[str, dict[str, str]] = {}
        super().__init__()

    def routes(self) -> list[Route]:
        return [
            self.route("/containers", "POST", self.create),
            self.route("/containers/{id}", "GET", self.read),
            self.route("/containers/{id}", "PUT", self.replace),
            self.route("/containers/{id}", "DELETE", self.remove),
        ]

    def create(self, request: Request, body: dict[str, Any]) -> Answer:
        name = _text(body, "name")
        if any(held["name"] == name for held in self.items.values()):
            raise Refused(409, f"a container is named {name}", "name_taken")
        id = self.new_id()
        self.items[id] = {
            "id": id,
            "name": name,
            "image": _text(body, "image"),
            "env": _strings(body, "env"),
            "revision": _revision(body),
            "url": f"https://{name}.hosting.test",
            "status": "running",
        }
        self.secret_env[id] = _strings(body, "secret_env")
        return 201, dict(self.items[id])

    def read(self, request: Request, body: dict[str, Any]) -> Answer:
        return 200, dict(self.held("container", request.path_params["id"]))

    def replace(self, request: Request, body: dict[str, Any]) -> Answer:
        id = request.path_params["id"]
        held = self.held("container", id)
        _unchanged(body, held, ("name",))
        held["image"] = _text(body, "image")
        held["env"] = _strings(body, "env")
        held["revision"] = _revision(body)
        self.secret_env[id] = _strings(body, "secret_env")
        return 200, dict(held)

    def remove(self, request: Request, body: dict[str, Any]) -> Answer:
        self.secret_env.pop(request.path_params["id"], None)
        return self.delete("container", request)


class PgcloudServer(VendorServer):
    """Managed Postgres: projects by id, `prj_…`, each with a password kept in `passwords`
    and given only in its connection URI."""

    prefix = "prj"

    def __init__(self) -> None:
        self.passwords: dict[str, str] = {}
        super().__init__()

    def routes(self) -> list[Route]:
        return [
            self.route("/projects", "POST", self.create),
            self.route("/projects/{id}", "GET", self.read),
            self.route("/projects/{id}", "PATCH", self.update),
            self.route("/projects/{id}", "DELETE", lambda r, b: self.delete("project", r)),
            self.route("/projects/{id}/connection_uri", "GET", self.connection_uri),
        ]

    def create(self, request: Request, body: dict[str, Any]) -> Answer:
        region = body.get("region")
        if region not in REGIONS:
            raise Refused(422, f"no region {region!r}: one of {', '.join(REGIONS)}", "invalid")
        id = self.new_id()
        self.items[id] = {
            "id": id,
            "name": _text(body, "name"),
            "region": region,
            "size": _text(body, "size", default="small"),
            "host": f"{id}.{region}.pgcloud.test",
        }
        self.passwords[id] = secrets.token_urlsafe(12)
        return 201, dict(self.items[id])

    def read(self, request: Request, body: dict[str, Any]) -> Answer:
        return 200, dict(self.held("project", request.path_params["id"]))

    def update(self, request: Request, body: dict[str, Any]) -> Answer:
        held = self.held("project", request.path_params["id"])
        _unchanged(body, held, ("name", "region"))
        if "size" in body:
            held["size"] = _text(body, "size")
        return 200, dict(held)

    def connection_uri(self, request: Request, body: dict[str, Any]) -> Answer:
        id = request.path_params["id"]
        held = self.held("project", id)
        uri = f"postgresql://app:{self.passwords[id]}@{held['host']}/{held['name']}"
        return 200, {"uri": uri}


@contextlib.contextmanager
def serve(app: Callable[..., Awaitable[None]]) -> Iterator[str]:
    """Serve the ASGI `app` on 127.0.0.1, on a free port, in a thread; yield its base URL."""
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan="off", ws="none", http="h11", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listening]}, name="vendor-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            listening.close()
            raise RuntimeError(f"the vendor server on port {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listening.close()

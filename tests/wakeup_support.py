"""What the wakeup service's tests share: a local instance stand-in that records every
`GET …/wake` it receives, a server that is not the service, and waiting for a condition with a
generous bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel

from remit.connectors.base import CallContext, Implementation
from remit.core.wakeup_tokens import mint_instance_token
from remit.declare.ops import Op


class Instances:
    """A threaded HTTP server on 127.0.0.1 standing in for many instances, one per path
    (`/i/<n>` in the tests). It answers `GET <path>/wake` with the status set for that path
    (200 unless told), records each call as (path, time received), and holds a call to a path
    marked with `hold` open until `release`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.status: dict[str, int] = {}
        self._holds: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.arrived = threading.Condition(self._lock)
        instances = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                received = time.time()
                path = self.path.removesuffix("/wake")
                with instances.arrived:
                    instances.calls.append((self.path, received))
                    held = instances._holds.get(path)
                    instances.arrived.notify_all()
                if held is not None:
                    held.wait(120)
                status = instances.status.get(path, 200)
                body = b"{}"
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the caller went away (a killed service)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def hold(self, path: str) -> None:
        self._holds[path] = threading.Event()

    def release(self, path: str) -> None:
        self._holds.pop(path).set()

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for called, _ in self.calls if called == f"{path}/wake")

    def times(self, path: str) -> list[float]:
        with self._lock:
            return [at for called, at in self.calls if called == f"{path}/wake"]

    def wait_calls(self, path: str, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while sum(1 for called, _ in self.calls if called == f"{path}/wake") < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{path}/wake was not called {n} time(s): {self.calls}")
                self.arrived.wait(left)

    def close(self) -> None:
        for event in self._holds.values():
            event.set()
        self.server.shutdown()
        self.server.server_close()


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Poll `check` until it returns something true, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class NotTheService:
    """A server on 127.0.0.1 that is not the wakeup service: it answers every request with an
    HTML page, or with a redirect to `redirect_to`, and records each (method, path)."""

    def __init__(self, *, redirect_to: str | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.seen.append((self.command, self.path))
                if redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"<html><body>It works!</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NotTheService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def call(
    implementation: Implementation, op: Op[Any, Any], input: BaseModel, env: dict[str, str]
) -> dict[str, Any]:
    """One call of `op` on `implementation`, as remit makes it, under a key of its own: its
    output as JSON."""
    context = CallContext(
        op=op,
        idempotency_key=f"k-{mint_instance_token()[4:16]}",
        run_id="run_test",
        attempt=1,
        actor="user:ann",
        environ=env,
        timeout=30.0,
    )
    output: dict[str, Any] = implementation.invoke(op, input, context).model_dump(mode="json")
    return output

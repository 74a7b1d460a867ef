"""A real wakeup service for tests: `remit wakeup serve` in a subprocess on a free port, with a
SQLite database of its own, and accounts made with `remit wakeup accounts create`."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REMIT = (sys.executable, "-m", "remit")
LISTENING = re.compile(r"wakeup service listening on (http://127\.0\.0\.1:\d+)")


class WakeupService:
    """The service's address, its database, and a way to make accounts on it."""

    def __init__(self, url: str, database: str, log: Path) -> None:
        self.url = url
        self.database = database
        self.log = log
        self._labels = 0

    def account(self) -> str:
        """A new account's token (`rwa_…`)."""
        self._labels += 1
        done = subprocess.run(
            [
                *REMIT,
                "wakeup",
                "accounts",
                "create",
                f"account-{self._labels}",
                "--database",
                self.database,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=_env(),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        token = done.stdout.strip()
        assert token.startswith("rwa_"), done.stdout + done.stderr
        return token


def _env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("REMIT_")}


@contextmanager
def wakeup_service(folder: Path) -> Iterator[WakeupService]:
    """`remit wakeup serve --port 0 --allow-private` on a SQLite file in `folder`, stopped
    (SIGTERM, then killed) on leaving."""
    database = f"sqlite:///{folder / 'wakeup.sqlite'}"
    log_path = folder / "wakeup-service.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*REMIT, "wakeup", "serve", "--port", "0", "--allow-private", "--database", database],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            cwd=folder,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                found = LISTENING.search(log_path.read_text())
                if found is not None:
                    break
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
            yield WakeupService(found.group(1), database, log_path)
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


class NotTheService:
    """A tiny HTTP server that is not the wakeup service: it answers every request with an
    HTML page, or with a redirect to `redirect_to`, and records each path and Authorization
    header it was sent."""

    def __init__(self, *, redirect_to: str | None = None) -> None:
        self.seen: list[tuple[str, str, str]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                outer.seen.append((self.command, self.path, self.headers.get("authorization", "")))
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

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> NotTheService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

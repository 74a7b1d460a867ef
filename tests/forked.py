"""`remit` commands run in processes forked from one that has already imported remit's libraries.

A `remit` command is a new process that spends most of its CPU importing SQLAlchemy, DBOS,
psycopg, Typer and Rich before it does anything (`bench/cli_startup.py`), and the e2e tests run
about a thousand commands. So each test process starts one server, which imports those once
and forks a child per command. The child is a process of its own, as a real command is: it
takes the command's environment, folder, arguments and standard streams, imports remit's
command line and the app itself, runs `remit`'s `main` and ends through the interpreter's
normal exit. The server, its parent, reports how it ended (its exit code, or the signal that
killed it), as `subprocess` reports a child's.

`tests/e2e/test_cli_startup.py` and a few others still start `python -m remit` itself;
`test_a_forked_command_prints_what_the_real_one_prints` compares the two.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

# Libraries, and remit's modules below its command line: those read nothing from the
# environment on import. `remit.cli` is left to each child, since its consoles are made on import
# from what they find then (whether the output is a terminal, its colours).
PRELOADED = (
    "sqlalchemy",
    "sqlalchemy.orm",
    "sqlalchemy.dialects.postgresql",
    "sqlalchemy.dialects.sqlite",
    "psycopg",
    "dbos",
    "dbos._client",
    "typer",
    "rich.console",
    "rich.table",
    "rich.markup",
    "pydantic",
    "httpx",
    "cedarpy",
    "croniter",
    "yaml",
    "remit.app",
    "remit.client",
    "remit.people.approvals",
    "remit.people.tasks",
)
MAIN = Path(__file__).parent.parent / "src" / "remit" / "__main__.py"
SCRIPT = Path(sys.executable).with_name("remit")
"""The `remit` command as installed: a child given `script=True` runs as if started by it."""


def run_remit(
    argv: list[str],
    *,
    env: dict[str, str],
    input: str | bytes | None = None,
    timeout: float = 120,
    text: bool = True,
    script: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """`remit ARGV`, run to its end as `subprocess.run([python, "-m", "remit", *ARGV],
    capture_output=True)` would run it (with `script`, as `[SCRIPT, *ARGV]`), and what it
    printed."""
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        if input is not None:
            stdin.write(input.encode() if isinstance(input, str) else input)
            stdin.seek(0)
        process = _server().start(argv, env, script, stdin, stdout, stderr)
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        out, errors = (_read(stream) for stream in (stdout, stderr))
    if text:
        return subprocess.CompletedProcess(process.args, returncode, _text(out), _text(errors))
    return subprocess.CompletedProcess(process.args, returncode, out, errors)


def spawn_remit(
    argv: list[str], *, env: dict[str, str], output: IO[Any], script: bool = False
) -> ForkedProcess:
    """`remit ARGV` left running (a worker, a server), writing both its streams to `output`."""
    with tempfile.TemporaryFile() as stdin:
        return _server().start(argv, env, script, stdin, output, output)


class ForkedProcess:
    """A forked command, with what the tests use of `subprocess.Popen`."""

    def __init__(self, conn: socket.socket, pid: int, args: list[str]) -> None:
        self._conn = conn
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._read_end()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._read_end()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read_end(self) -> None:
        ended = b""
        while not ended.endswith(b"\n"):
            chunk = self._conn.recv(64)
            assert chunk, f"the command server ended before reporting how {self.args} ended"
            ended += chunk
        self.returncode = int(ended)
        self._conn.close()


class _Server:
    """The server of this test process: started at its first command, stopped at its exit."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="remit-forks-")
        self._address = str(Path(self._folder.name) / "socket")
        self._process = subprocess.Popen(
            [sys.executable, __file__, self._address], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        ready = self._process.stdout.readline().strip()
        assert ready == "ready", f"the command server did not start: {ready!r}"

    def start(
        self, argv: list[str], env: dict[str, str], script: bool, *streams: IO[Any]
    ) -> ForkedProcess:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._address)
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), "script": script}
        socket.send_fds(conn, [json.dumps(request).encode()], [s.fileno() for s in streams])
        conn.shutdown(socket.SHUT_WR)
        pid = b""
        while not pid.endswith(b"\n"):
            chunk = conn.recv(64)
            assert chunk, f"the command server did not start `remit {' '.join(argv)}`"
            pid += chunk
        command = [str(SCRIPT)] if script else [sys.executable, "-m", "remit"]
        return ForkedProcess(conn, int(pid), [*command, *argv])

    def close(self) -> None:
        self._process.kill()
        self._process.wait()
        self._folder.cleanup()


_servers: list[_Server] = []
_starting = threading.Lock()


def _server() -> _Server:
    with _starting:
        if not _servers:
            import atexit

            _servers.append(_Server())
            atexit.register(_servers[0].close)
        return _servers[0]


def _read(stream: IO[bytes]) -> bytes:
    stream.seek(0)
    return stream.read()


def _text(data: bytes) -> str:
    """As `subprocess.run(text=True)` reads it: with universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


# The server: imports the libraries, then forks a child per connection and reports its end.


def _serve(address: str) -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    # A fork copies only the thread that calls it: the server must have no other.
    assert threading.active_count() == 1, threading.enumerate()
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the `select` below through `wake`
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    parent = os.getppid()
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent:  # else the tests' process is gone without stopping this
        ready = select.select([listener, woken], [], [], 1.0)[0]
        if woken in ready:
            os.read(woken, 4096)
        _reap(children)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while more := conn.recv(1 << 20):  # the client shuts its side once it has sent all
            message += more
        pid = os.fork()
        if pid == 0:
            for each in (listener, conn, *children.values()):
                each.close()
            for fd in (woken, wake):
                os.close(fd)
            _child(json.loads(message), fds)  # never returns
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        children[pid] = conn


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = children.pop(pid)
        with contextlib.suppress(OSError):  # the test gave up on it
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        conn.close()


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """Become the command: its streams, environment, folder and arguments; run it and exit."""
    import random

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    random.seed()
    if request["script"]:  # Click names it after its file: `remit`
        sys.modules["__main__"].__package__ = None
        sys.argv = [str(SCRIPT), *request["argv"]]
        sys.path[0] = str(SCRIPT.parent)
    else:  # Click names it `python -m remit`
        sys.modules["__main__"].__package__ = "remit"
        sys.argv = [str(MAIN), *request["argv"]]
        sys.path[0] = request["cwd"]

    # As the interpreter puts them, after the script's or the current folder.
    sys.path[1:1] = [
        path for path in request["env"].get("PYTHONPATH", "").split(os.pathsep) if path
    ]

    from remit.cli.main import main

    main()
    raise SystemExit(0)


if __name__ == "__main__":
    _serve(sys.argv[1])

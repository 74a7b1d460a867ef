"""The wakeup service's lateness: how long after its `at` an instance's `GET /wake` arrives.

    .venv/bin/python bench/bench.py --only wakeup [--quick] [--write]    # `make bench` runs it too
    .venv/bin/python bench/wakeup.py [--quick] [--write]

One `remit wakeup serve` process (`--allow-private`, default lease and concurrency) on a fresh
Postgres database; one local threaded HTTP server stands in for 1,000 instances, answering
`GET /i/<n>/wake` with 200 and recording when each arrived. The instances are registered through
the service's routes, then each `PUT /wakeup/wake`s a time: the wakes fall evenly over 10 s,
starting a few seconds after the last is set. Lateness is the time a call arrived minus its
`at` (one clock: the service and the server are on this machine). Prints
`BENCH wake_lateness_p50_ms <value>` and `BENCH wake_lateness_p99_ms <value>`; the goal is a
p99 of 500 ms at most.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from common import (
    ROOT,
    Figure,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    write_section,
)

SPREAD_S = 10.0
LISTENING = re.compile(r"wakeup service listening on (http://\S+)")


class _Recorder:
    """The instances' stand-in: when each path's `/wake` first arrived."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                received = time.time()
                with recorder.lock:
                    recorder.arrived.setdefault(self.path.removesuffix("/wake"), received)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 256
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _remit(*args: str) -> list[str]:
    return [sys.executable, "-m", "remit", *args]


def lateness(count: int, folder: Path) -> list[float]:
    """Seconds late of each of `count` wakes spread over `SPREAD_S`, on one service process."""
    url = fresh_database("postgres", folder)
    recorder = _Recorder()
    log_path = folder / "wakeup-service.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "REMIT_LOG_LEVEL": "WARNING"}
    made = subprocess.run(
        _remit("wakeup", "accounts", "create", "bench", "--database", url),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    account = made.stdout.strip()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            _remit("wakeup", "serve", "--port", "0", "--database", url, "--allow-private"),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        service = _listening(proc, log_path)
        with httpx.Client(base_url=service, timeout=30) as http:
            tokens = []
            for n in range(count):
                token = f"rwi_bench-{n}-{os.urandom(16).hex()}"
                answer = http.post(
                    "/wakeup/instances",
                    json={"url": f"{recorder.url}/i/{n}", "token": token},
                    headers={"Authorization": f"Bearer {account}"},
                )
                assert answer.status_code == 201, answer.text
                tokens.append(token)
            # Setting 1,000 wakes takes a few seconds here: the first falls due after that.
            start = datetime.now(UTC) + timedelta(seconds=count * 0.006 + 2)
            due: dict[str, float] = {}
            for n, token in enumerate(tokens):
                at = start + timedelta(seconds=SPREAD_S * n / count)
                answer = http.put(
                    "/wakeup/wake",
                    json={"at": at.isoformat()},
                    headers={"Authorization": f"Bearer {token}"},
                )
                assert answer.status_code == 204, answer.text
                due[f"/i/{n}"] = at.timestamp()
        set_by = datetime.now(UTC)
        if set_by > start:
            print(f"(the wakes took until {(set_by - start).total_seconds():.2f} s past the first)")
        deadline = time.monotonic() + SPREAD_S + 120
        while len(recorder.arrived) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        if len(recorder.arrived) < count:
            raise RuntimeError(
                f"only {len(recorder.arrived)} of {count} wakes arrived; see {log_path}"
            )
        return [recorder.arrived[path] - at for path, at in due.items()]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        recorder.close()
        drop_database(url)


def _listening(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = LISTENING.search(log_path.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"the wakeup service did not start: {log_path.read_text()}")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def measure(*, quick: bool, folder: Path) -> list[Figure]:
    count = 1000  # the goal is stated for 1,000; --quick changes nothing here
    late = lateness(count, folder)
    ms = [value * 1000 for value in late]
    p50 = statistics.median(ms)
    p99 = _percentile(ms, 0.99)
    print(f"BENCH wake_lateness_p50_ms {p50:.1f}", flush=True)
    print(f"BENCH wake_lateness_p99_ms {p99:.1f}", flush=True)
    print(f"(earliest {min(ms):.1f} ms, latest {max(ms):.1f} ms)", flush=True)
    note = f"{count:,} wakes due evenly over {SPREAD_S:g} s, one service on Postgres"
    return [
        ("wake_lateness_p50_ms", p50, "ms", f"median lateness, {note}"),
        ("wake_lateness_p99_ms", p99, "ms", f"99th percentile (goal ≤ 500), {note}"),
    ]


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres on the same machine, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "One `remit wakeup serve` process on a fresh Postgres database calls 1,000 instances "
        "(one local threaded HTTP server answering `GET /i/<n>/wake`), whose wakes fall evenly "
        f"over {SPREAD_S:g} s. Lateness is when a call arrived minus its `at`.",
        "",
        *figure_table(figures),
    ]
    write_section("The wakeup service", "\n".join(lines))


if __name__ == "__main__":
    run_alone("wakeup.py", measure, write, quick_help="the same run (kept for symmetry)")

"""The wakeup service's lateness: how long after its `at` an instance's `GET /wake` arrives.

    .venv/bin/python bench/bench.py --only wakeup [--quick | --smoke] [--write]    # `make bench` runs it too
    .venv/bin/python bench/wakeup.py [--quick | --smoke] [--write]

One `remit wakeup serve` process (`--allow-private`, default lease and concurrency) on a fresh
Postgres database; one local threaded HTTP server stands in for 1,000 instances, answering
`GET /i/<n>/wake` with 200 and recording when each arrived. The instances are registered through
the service's routes, then each `PUT /wakeup/wake`s a time: the wakes fall evenly over 10 s,
starting a few seconds after the last is set. Lateness is the time a call arrived minus its
`at` (one clock: the service and the server are on this machine). Prints
`BENCH wake_lateness_p50_ms <value> ms` and `BENCH wake_lateness_p99_ms <value> ms`; the goal
is a p99 of 500 ms at most. `--quick` changes nothing (the goal is stated for 1,000 wakes over
10 s); `--smoke` sets 10 wakes over 1 s.
"""

from __future__ import annotations

import os
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
    Process,
    Size,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    wait_until,
    write_section,
)

SPREAD_S = 10.0
WAKES = 1000
LISTENING = r"wakeup service listening on (http://\S+)"
TIMEOUT = 120.0  # seconds, at most, for the service to start, a command to end, or the last wake


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


def lateness(count: int, folder: Path, spread: float = SPREAD_S) -> list[float]:
    """Seconds late of each of `count` wakes spread over `spread` seconds, on one service
    process."""
    url = fresh_database("postgres", folder)
    recorder = _Recorder()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "REMIT_LOG_LEVEL": "WARNING"}
    made = subprocess.run(
        _remit("wakeup", "accounts", "create", "bench", "--database", url),
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    )
    account = made.stdout.strip()
    proc = Process(
        "`remit wakeup serve`",
        _remit("wakeup", "serve", "--port", "0", "--database", url, "--allow-private"),
        env=env,
    )
    try:
        service = proc.wait_for_line(LISTENING, timeout=TIMEOUT).group(1)
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
                at = start + timedelta(seconds=spread * n / count)
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
        last_due = max(due.values()) - time.time()
        wait_until(
            lambda: len(recorder.arrived) >= count,
            timeout=max(0.0, last_due) + TIMEOUT,
            what=f"{count} wakes to arrive (the last due {last_due:.1f} s after the wait began)",
            state=lambda: (
                f"{len(recorder.arrived)} arrived; {proc.name}'s last output:\n" + proc.tail()
            ),
            every=0.1,
        )
        return [recorder.arrived[path] - at for path, at in due.items()]
    finally:
        proc.stop()
        recorder.close()
        drop_database(url)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def measure(*, size: Size, folder: Path) -> list[Figure]:
    # The goal is stated for 1,000 over 10 s: --quick changes nothing here.
    count, spread = size.pick(smoke=(10, 1.0), quick=(WAKES, SPREAD_S), full=(WAKES, SPREAD_S))
    late = lateness(count, folder, spread)
    ms = [value * 1000 for value in late]
    p50 = statistics.median(ms)
    p99 = _percentile(ms, 0.99)
    print(f"BENCH wake_lateness_p50_ms {p50:.1f} ms", flush=True)
    print(f"BENCH wake_lateness_p99_ms {p99:.1f} ms", flush=True)
    print(f"(earliest {min(ms):.1f} ms, latest {max(ms):.1f} ms)", flush=True)
    note = f"{count:,} wakes due evenly over {spread:g} s, one service on Postgres"
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
    run_alone(
        "wakeup.py",
        measure,
        write,
        quick_help="the same run (kept for symmetry)",
        smoke_help="10 wakes over 1 s: only that it runs",
    )

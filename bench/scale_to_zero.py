"""What a stopped instance costs, and how fast a wake gets a due run going.

    .venv/bin/python bench/scale_to_zero.py [--quick] [--write]
    .venv/bin/python bench/bench.py --only wakeup [--quick] [--write]   # with the service's figures

One `remit serve --worker --stop-when-idle` process (the test app `tests/apps/sleepy_app`, on a
fresh Postgres database) stops its worker once idle. Then:

- `stopped_idle_cpu_pct`: the CPU time the stopped process uses over 10 s (user and system, from
  /proc), as a percentage of one core;
- `wake_to_first_step_ms`: a run is queued while the worker is stopped (from another process,
  with no wakeup service to tell), then `GET /wake` is sent; the figure is the time from the
  wake to the run's first step, which records the moment it ran. It includes starting the
  worker (launching DBOS, its first sweep, the queue's first poll). The median of several.

Nothing is due at any time, so the worker registers nothing: the wakeup service plays no part.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa
from common import ROOT, Figure, drop_database, figure_table, fresh_database, write_section

APP = ROOT / "tests" / "apps" / "sleepy_app"
REMIT = str(Path(sys.executable).with_name("remit"))
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _state(url: str) -> str | None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT state FROM remit_wakeup WHERE app = 'sleepy'")
            ).scalar_one_or_none()
    except sa.exc.ProgrammingError:
        return None
    finally:
        engine.dispose()


def _wait_stopped(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _state(url) != "stopped":
        if time.monotonic() > deadline:
            raise RuntimeError("the worker never stopped")
        time.sleep(0.1)


def _first_step(moments: Path, run_id: str, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if moments.exists():
            for line in moments.read_text().splitlines():
                seen = json.loads(line)
                if seen["run"] == run_id and seen["what"] == "before":
                    return float(seen["at"])
        time.sleep(0.005)
    raise RuntimeError(f"run {run_id} never took its first step")


def measure(*, quick: bool, folder: Path) -> list[Figure]:
    url = fresh_database("postgres", folder)
    moments = folder / f"moments-{uuid.uuid4().hex[:8]}.jsonl"
    env = {
        **os.environ,
        "REMIT_DATABASE_URL": url,
        "REMIT_FAKES": "1",
        "MOMENTS_FILE": str(moments),
        "REMIT_IDLE_CHECK_INTERVAL": "0.5",
        "REMIT_IDLE_HORIZON": "1",
    }
    env.pop("REMIT_URL", None)
    serving = {
        **env,
        # Never called: nothing is due, so nothing is registered.
        "REMIT_WAKEUP_URL": "http://127.0.0.1:9",
        "REMIT_WAKEUP_ACCOUNT_TOKEN": "rwa_bench",
    }
    proc = subprocess.Popen(
        [REMIT, "--app", str(APP), "serve", "--worker", "--stop-when-idle", "--port", "0"],
        env=serving,
        stderr=subprocess.PIPE,
        text=True,
    )
    figures: list[Figure] = []
    try:
        assert proc.stderr is not None
        base = ""
        for line in proc.stderr:
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                base = found.group(1)
                break
        _wait_stopped(url)
        time.sleep(1.0)  # let the stop settle
        window = 10.0
        before = _cpu_seconds(proc.pid)
        time.sleep(window)
        used = _cpu_seconds(proc.pid) - before
        pct = used / window * 100
        print(f"BENCH stopped_idle_cpu_pct {pct:.3f}", flush=True)
        figures.append(
            (
                "stopped_idle_cpu_pct",
                pct,
                "% of a core",
                f"a stopped instance over {window:.0f} s (goal ≤ 0.5)",
            )
        )
        waits: list[float] = []
        for _ in range(3 if quick else 7):
            _wait_stopped(url)
            started = subprocess.run(
                [REMIT, "--app", str(APP), "start", "nap", "--input", '{"seconds": 0}'],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            named = re.search(r"run_[0-9a-f]+", started.stdout + started.stderr)
            assert named is not None, started
            run_id = named.group(0)
            woken = time.time()
            httpx.get(f"{base}/wake", timeout=10).raise_for_status()
            waits.append((_first_step(moments, run_id) - woken) * 1000)
        wake = statistics.median(waits)
        print(f"BENCH wake_to_first_step_ms {wake:.1f}", flush=True)
        figures.append(
            (
                "wake_to_first_step_ms",
                wake,
                "ms",
                f"median of {len(waits)}, from GET /wake to a queued run's first step, the "
                "worker's start included (goal ≤ 2000)",
            )
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        drop_database(url)
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    body = "\n".join(
        [
            f"`{command}` on {os.cpu_count()} cores, Postgres on the same machine, "
            f"{time.strftime('%Y-%m-%d')}.",
            "",
            "One `remit serve --worker --stop-when-idle` process (the app `tests/apps/sleepy_app`, "
            "on a fresh Postgres database) stops its worker once idle. The CPU figure is the "
            "stopped process's user and system time over 10 s. The wake figure is the median "
            "time from `GET /wake` to the first step of a run queued while the worker was "
            "stopped: it includes starting the worker (DBOS's launch, the first sweep, the "
            "queue's first poll).",
            "",
            *figure_table(figures),
        ]
    )
    write_section("A stopped instance", body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    made = measure(quick=args.quick, folder=folder)
    if args.write:
        write(made, command="python bench/scale_to_zero.py" + (" --quick" if args.quick else ""))


if __name__ == "__main__":
    main()

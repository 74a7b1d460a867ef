"""What a stopped instance costs, and how fast a wake gets a due run going.

    .venv/bin/python bench/scale_to_zero.py [--quick | --smoke] [--write]
    .venv/bin/python bench/bench.py --only wakeup [--quick | --smoke] [--write]   # with the service's figures

One `remit wakeup serve` process (`--allow-private`, on a SQLite file of its own, with an
account made by `remit wakeup accounts create`), and one `remit serve --worker --stop-when-idle`
process (the test app `tests/apps/sleepy_app`, on a fresh Postgres database) connected to it
(`remit wakeup connect`), whose worker stops once idle. Then:

- `stopped_idle_cpu_pct`: the CPU time the stopped process uses over 10 s (user and system, from
  /proc), as a percentage of one core (`--smoke`: 1 s). Nothing is due, so the worker
  registered nothing before it stopped;
- `wake_to_first_step_ms`: a run is queued while the worker is stopped (from another process,
  with no wakeup service to tell), then `GET /wake` is sent; the figure is the time from the
  wake to the run's first step, which records the moment it ran. It includes starting the
  worker (launching DBOS, its first sweep, the queue's first poll). The median of 7 (`--quick`:
  3, `--smoke`: 1);
- `sleep_resumed_late_ms`: with the worker stopped, a `nap` run that sleeps 6 s is started from
  the command line, which asks the service to wake the worker now. The run takes its first
  step, its sleep suspends it (`REMIT_SUSPEND_AFTER=0`), and the worker stops, having asked the
  service to wake it ahead of the sleep's end by twice its last start and a poll (at most 80%
  of `REMIT_IDLE_HORIZON`, 3 s here: a horizon longer than a start on a busy machine; a worker
  stops only with its next deadline further away than that). The benchmark checks that the
  worker did stop before the sleep's end, with that deadline registered, so only the
  service's wake can carry the run on; the figure is how late after the sleep's end the run's
  next step (which records the moment it ran) came. The deadline is the sleep's end, the
  `wake_at` of the run's row in `remit_timers`, from which a sweep may wake the run. It is also
  the `at` the instance's row in `remit_wakeup` keeps once the worker stopped for it (what the
  e2e test reads as `stopped.at`; the benchmark checks they are the same), but that row shows
  the last deadline registered, which it still shows a moment after the worker it woke has
  started; the wake the service holds is earlier, by the lead. The median of 5 naps (`--quick`:
  3, `--smoke`: 1, of 4 s with a horizon of 2 s), and `sleep_resumed_late_max_ms`, the latest.
  The goal, the product's promise, is 1 s. The processes and the benchmark share one clock.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
import sqlalchemy as sa
from common import (
    ROOT,
    Figure,
    Process,
    Size,
    drop_database,
    figure_table,
    fresh_database,
    wait_until,
    write_section,
)

APP = ROOT / "tests" / "apps" / "sleepy_app"
REMIT = str(Path(sys.executable).with_name("remit"))
TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT = 60.0  # seconds, at most, for a server to listen, a command to end, a worker to stop
SERVING = r"on (http://127\.0\.0\.1:\d+)"
LISTENING = r"wakeup service listening on (http://\S+)"
# The log line of a stop for a deadline: how far ahead of it the worker asked to be woken.
STOPS = r"is idle and stops \(to be woken ([\d.]+)s before its deadline at (\S+)\)"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def _wakeup_row(engine: sa.Engine) -> sa.Row[tuple[str, datetime | None, datetime | None]] | None:
    """The app's row in `remit_wakeup` (its state, its registered deadline `at`, when it last
    stopped), if there is one yet."""
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT state, at, stopped_at FROM remit_wakeup WHERE app = 'sleepy'")
            ).one_or_none()
    except sa.exc.ProgrammingError:
        return None  # the server has not made its tables yet


def _wait_stopped(engine: sa.Engine, server: Process, *, after: float | None = None) -> None:
    """Wait for `server`'s worker to stop itself, idle (with `after`, in a stop later than
    that epoch time, not the one before)."""

    def stopped() -> bool:
        row = _wakeup_row(engine)
        return (
            row is not None
            and row.state == "stopped"
            and (
                after is None or (row.stopped_at is not None and row.stopped_at.timestamp() > after)
            )
        )

    wait_until(
        stopped,
        timeout=TIMEOUT,
        what=f"{server.name}'s worker to stop, idle",
        state=lambda: f"its row is {_wakeup_row(engine)}; its last output:\n{server.tail()}",
        every=0.1,
    )


def _moment(moments: Path, run_id: str, what: str) -> float | None:
    """When run `run_id` recorded `what` ("before", its first step; "after", its step past
    its sleep), in epoch seconds, if it has."""
    if not moments.exists():
        return None
    for line in moments.read_text().splitlines():
        seen = json.loads(line)
        if seen["run"] == run_id and seen["what"] == what:
            return float(seen["at"])
    return None


def _wait_moment(
    moments: Path, run_id: str, what: str, server: Process, *, timeout: float = TIMEOUT
) -> float:
    """When run `run_id` recorded `what`, waiting for it."""
    return wait_until(
        lambda: _moment(moments, run_id, what),
        timeout=timeout,
        what=f"run {run_id} to record its {what!r} moment",
        state=lambda: f"{server.name}'s last output:\n{server.tail()}",
        every=0.005,
    )


def _remit(*args: str, env: dict[str, str], unwoken: bool = False) -> str:
    """What `remit ARGS` printed on stdout, once it ended well. `unwoken`: it wrote to a
    stopped instance it was given no way to wake, which it says, exiting 1."""
    done = subprocess.run([REMIT, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    told = unwoken and done.returncode == 1 and "was not woken" in done.stderr
    if done.returncode != 0 and not told:
        raise RuntimeError(
            f"`remit {' '.join(args)}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def _start_nap(seconds: float, env: dict[str, str]) -> str:
    """Start a `nap` of `seconds` from the command line; its run id. With no wakeup service
    in `env`, a stopped worker is not woken, as the command says."""
    said = _remit(
        "--app",
        str(APP),
        "start",
        "nap",
        "--input",
        json.dumps({"seconds": seconds}),
        env=env,
        unwoken=not env.get("REMIT_WAKEUP_URL"),
    )
    named = re.search(r"run_[0-9a-f]+", said)
    assert named is not None, said
    return named.group(0)


def _serve(env: dict[str, str]) -> tuple[Process, str]:
    """`remit serve --worker --stop-when-idle` of the sleepy app, and its URL once it listens."""
    proc = Process(
        "`remit serve --worker --stop-when-idle`",
        [REMIT, "--app", str(APP), "serve", "--worker", "--stop-when-idle", "--port", "0"],
        env=env,
    )
    try:
        return proc, proc.wait_for_line(SERVING, timeout=TIMEOUT).group(1)
    except BaseException:
        proc.stop()
        raise


def _app_env(url: str, moments: Path, **settings: str) -> dict[str, str]:
    """The environment of the instance and the commands run on its app, on database `url`."""
    env = {
        **os.environ,
        "REMIT_DATABASE_URL": url,
        "REMIT_FAKES": "1",
        "MOMENTS_FILE": str(moments),
        **settings,
    }
    for unset in ("REMIT_URL", "REMIT_TOKEN"):
        env.pop(unset, None)
    return env


def _stopped_idle(
    size: Size, server: Process, base: str, engine: sa.Engine, env: dict[str, str], moments: Path
) -> list[Figure]:
    """`stopped_idle_cpu_pct` and `wake_to_first_step_ms`, on `server` (at `base`), stopped
    with nothing due; `env` starts runs without telling the wakeup service."""
    _wait_stopped(engine, server)
    time.sleep(size.pick(smoke=0.2, quick=1.0, full=1.0))  # let the stop settle
    window = size.pick(smoke=1.0, quick=10.0, full=10.0)
    before = _cpu_seconds(server.pid)
    time.sleep(window)
    used = _cpu_seconds(server.pid) - before
    pct = used / window * 100
    print(f"BENCH stopped_idle_cpu_pct {pct:.3f} %", flush=True)
    waits: list[float] = []
    stepped: float | None = None  # when the last run took its first step
    for _ in range(size.pick(smoke=1, quick=3, full=7)):
        # The stop after the last run's, not the one before it, which the row shows until the
        # worker that ran it has written that it started.
        _wait_stopped(engine, server, after=stepped)
        run_id = _start_nap(0, env)
        woken = time.time()
        httpx.get(f"{base}/wake", timeout=10).raise_for_status()
        stepped = _wait_moment(moments, run_id, "before", server)
        waits.append((stepped - woken) * 1000)
    wake = statistics.median(waits)
    print(f"BENCH wake_to_first_step_ms {wake:.1f} ms", flush=True)
    return [
        (
            "stopped_idle_cpu_pct",
            pct,
            "% of a core",
            f"a stopped instance over {window:.0f} s (goal ≤ 0.5)",
        ),
        (
            "wake_to_first_step_ms",
            wake,
            "ms",
            f"median of {len(waits)}, from GET /wake to a queued run's first step, the "
            "worker's start included (goal ≤ 2000)",
        ),
    ]


def _sleep_end(engine: sa.Engine, run_id: str) -> datetime | None:
    """The end of run `run_id`'s sleep, once its sleep has begun."""
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT wake_at FROM remit_timers WHERE run_id = :run"), {"run": run_id}
        ).scalar_one_or_none()


def _nap(
    engine: sa.Engine, server: Process, moments: Path, run_id: str, to_stop: float, label: str
) -> tuple[float, float]:
    """Follow nap `run_id` (just started) through its sleep: its worker must stop before the
    sleep's end, within `to_stop` seconds of the sleep's start (after that the end is within
    the idle horizon, and a worker still up stays up). Prints how it went, as `label`; returns
    when the run carried on, in epoch seconds, and how late that was after the sleep's end,
    in ms."""
    began = _wait_moment(moments, run_id, "before", server)
    deadline = wait_until(
        lambda: _sleep_end(engine, run_id),
        timeout=TIMEOUT,
        what=f"run {run_id}'s sleep to begin",
        state=lambda: f"{server.name}'s last output:\n{server.tail()}",
    )

    def stopped_for_it() -> float | None:
        # The row keeps the stop's time and the deadline it registered until the next stop,
        # after the run has carried on: a worker woken already is no stop missed.
        row = _wakeup_row(engine)
        if row is None or row.at != deadline or row.stopped_at is None:
            return None
        stopped = float(row.stopped_at.timestamp())
        return stopped if stopped > began else None

    stopped = wait_until(
        stopped_for_it,
        timeout=max(0.0, deadline.timestamp() - time.time()) + 1.0,
        what=f"{server.name}'s worker to stop before run {run_id}'s sleep ends, having "
        f"registered that end (a worker not idle within {to_stop:g} s of the sleep's start "
        "stays up)",
        state=lambda: f"its row is {_wakeup_row(engine)}; its last output:\n{server.tail()}",
    )
    if stopped >= deadline.timestamp():
        raise RuntimeError(
            f"{server.name}'s worker stopped only {stopped - deadline.timestamp():.3f} s after "
            f"run {run_id}'s sleep ended: the run did not wait for a wake; its last output:\n"
            + server.tail()
        )
    # Stopped before the deadline, with it registered: nothing but the service's wake carries
    # the run on.
    after = _wait_moment(
        moments,
        run_id,
        "after",
        server,
        timeout=max(0.0, deadline.timestamp() - time.time()) + TIMEOUT,
    )
    late = (after - deadline.timestamp()) * 1000
    print(
        f"({label}: its worker stopped {deadline.timestamp() - stopped:.1f} s before the "
        f"sleep's end, to be woken {_ahead(server, deadline)} ahead of it; the run carried on "
        f"{late:.1f} ms after it)",
        flush=True,
    )
    return after, late


def _ahead(server: Process, deadline: datetime) -> str:
    """How far ahead of `deadline` `server`'s worker asked to be woken, as its log line of the
    stop says."""
    for line in reversed(list(server.lines)):
        found = re.search(STOPS, line)
        if found and datetime.fromisoformat(found.group(2)) == deadline:
            return f"{found.group(1)} s"
    return "? s"


def _sleep_lateness(
    size: Size,
    server: Process,
    engine: sa.Engine,
    env: dict[str, str],
    moments: Path,
    *,
    sleep: float,
    horizon: float,
) -> list[Figure]:
    """`sleep_resumed_late_ms` and `sleep_resumed_late_max_ms`: naps of `sleep` seconds on
    `server`, whose idle horizon is `horizon` seconds; `env` starts them, telling the wakeup
    service."""
    naps = size.pick(smoke=1, quick=3, full=5)
    late: list[float] = []
    done: float | None = None  # when the last nap carried on
    for n in range(1, naps + 1):
        _wait_stopped(engine, server, after=done)
        run_id = _start_nap(sleep, env)
        done, ms = _nap(engine, server, moments, run_id, sleep - horizon, f"nap {n} of {naps}")
        late.append(ms)
    median, latest = statistics.median(late), max(late)
    print(f"BENCH sleep_resumed_late_ms {median:.1f} ms", flush=True)
    print(f"BENCH sleep_resumed_late_max_ms {latest:.1f} ms", flush=True)
    note = (
        f"{naps} naps of {sleep:g} s, from a run's sleep's end to its next step, its worker "
        f"stopped meanwhile and woken by a `remit wakeup serve` (idle horizon {horizon:g} s)"
    )
    return [
        ("sleep_resumed_late_ms", median, "ms", f"median of {note} (goal ≤ 1000)"),
        ("sleep_resumed_late_max_ms", latest, "ms", f"the latest of those {naps}"),
    ]


def measure(*, size: Size, folder: Path) -> list[Figure]:
    # Naps long enough that the worker stops before their end, which it must do more than the
    # idle horizon ahead of it; a horizon longer than a start on a busy machine, so that the
    # worker may be woken ahead by twice its start (at most 80% of the horizon).
    sleep, horizon = size.pick(smoke=(4.0, 2.0), quick=(6.0, 3.0), full=(6.0, 3.0))
    url = fresh_database("postgres", folder)
    engine = _engine(url)
    service_db = fresh_database("sqlite", folder)
    moments = folder / f"moments-{uuid.uuid4().hex[:8]}.jsonl"
    service_env = {**os.environ}
    service_env.pop("REMIT_DATABASE_URL", None)
    started: list[Process] = []
    try:
        account = _remit(
            "wakeup", "accounts", "create", "bench", "--database", service_db, env=service_env
        ).split()[-1]
        service = Process(
            "`remit wakeup serve`",
            [REMIT, "wakeup", "serve", "--port", "0", "--allow-private", "--database", service_db],
            env=service_env,
        )
        started.append(service)
        env = _app_env(
            url,
            moments,
            REMIT_WAKEUP_URL=service.wait_for_line(LISTENING, timeout=TIMEOUT).group(1),
            REMIT_WAKEUP_ACCOUNT_TOKEN=account,
            # What keeps the instance's token, a secret (else a key file is made in the app's
            # folder).
            REMIT_SECRET_KEY=base64.urlsafe_b64encode(os.urandom(32)).decode(),
            REMIT_AS="user:bench",
            REMIT_SUSPEND_AFTER="0",  # a nap of any length suspends its run
            REMIT_IDLE_CHECK_INTERVAL="0.3",
            REMIT_IDLE_HORIZON=f"{horizon:g}",
        )
        server, base = _serve(env)
        started.append(server)
        _remit("--app", str(APP), "wakeup", "connect", base, env=env)
        untold = {**env, "REMIT_WAKEUP_URL": ""}  # a write that does not tell the service
        return _stopped_idle(size, server, base, engine, untold, moments) + _sleep_lateness(
            size, server, engine, env, moments, sleep=sleep, horizon=horizon
        )
    finally:
        for process in reversed(started):
            process.stop()
        engine.dispose()
        drop_database(url)
        drop_database(service_db)
        moments.unlink(missing_ok=True)


def write(figures: list[Figure], *, command: str) -> None:
    body = "\n".join(
        [
            f"`{command}` on {os.cpu_count()} cores, Postgres on the same machine, "
            f"{time.strftime('%Y-%m-%d')}.",
            "",
            "One `remit serve --worker --stop-when-idle` process (the app `tests/apps/sleepy_app`, "
            "on a fresh Postgres database) stops its worker once idle, with nothing due. The CPU "
            "figure is the stopped process's user and system time over 10 s. The wake figure is "
            "the median "
            "time from `GET /wake` to the first step of a run queued while the worker was "
            "stopped: it includes starting the worker (DBOS's launch, the first sweep, the "
            "queue's first poll).",
            "",
            "The sleep figures: the process is connected to a `remit wakeup serve` process (on "
            "a SQLite file). A run sleeps 6 s, its worker stops, having asked the service to "
            "wake it ahead of the sleep's end by twice its last start and a poll "
            "(`REMIT_IDLE_HORIZON=3`), and the figure is how late after that end (the `wake_at` "
            "of the run's timer, the deadline the worker registered) the run's next step ran. "
            "The product promises within 1 s.",
            "",
            *figure_table(figures),
        ]
    )
    write_section("A stopped instance", body)


def main() -> None:
    parser = argparse.ArgumentParser()
    Size.add_options(
        parser,
        quick="3 wakes instead of 7, 3 naps instead of 5",
        smoke="1 s of idle CPU, one wake and one nap of 4 s: only that it runs",
    )
    args = parser.parse_args()
    size = Size.of(parser, args)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "remit-bench"
    folder.mkdir(exist_ok=True)
    made = measure(size=size, folder=folder)
    if args.write:
        write(made, command=f"python bench/scale_to_zero.py{size.flag}")


if __name__ == "__main__":
    main()

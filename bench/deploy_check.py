"""`remit deploy check` on Postgres: replaying 1,000 runs waiting at their gate.

    .venv/bin/python bench/deploy_check.py [--quick | --smoke] [--write]    # `make bench` runs it too

Runs of the bench app's `payout` (a read, an approval gate, a step, a write) are started and a
`remit worker` brings them all to `waiting`; the worker is stopped. Then the check is timed
three ways on the same database: `DeployCheck.run()` in this process (the work itself),
`remit deploy check` as a user runs it (a process that loads the app and connects first), and,
for scale, reading each run's DBOS steps and nothing else (`list_workflow_steps` per run, what
the check cannot do without). Each is the median of five passes after one warm-up pass.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from approvals import APP, WorkerProcess, database, start_runs, wait_waiting
from common import Size, figure_table, run_alone, write_section

from remit.app import load_app
from remit.ops.deploy import DeployCheck

Figure = tuple[str, float, str, str]
PASSES = 5
CLI_TIMEOUT = 300.0  # seconds, at most, for one `remit deploy check`


def _median_ms(work: object, passes: int = PASSES) -> float:
    """The median milliseconds of `passes` calls of `work`, after one to warm up."""
    assert callable(work)
    work()  # warm up
    times = []
    for _ in range(passes):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def measure(*, size: Size, folder: Path) -> list[Figure]:
    waiting = size.pick(smoke=5, quick=300, full=1000)
    passes = size.pick(smoke=1, quick=PASSES, full=PASSES)
    figures: list[Figure] = []
    with database(folder) as (db, url):
        start_runs(db, waiting)
        worker = WorkerProcess(url)
        try:
            wait_waiting(db, worker, waiting)
        finally:
            worker.stop()
        app = load_app(APP)
        client = db.client(app.name)
        try:
            check = DeployCheck(app, db, client)
            report = check.run()
            assert (len(report.checked), report.carrying_on) == (waiting, waiting), report.failing
            run_ids = [c.run_id for c in report.checked]
            in_process = _median_ms(check.run, passes)
            steps_only = _median_ms(
                lambda: [client.list_workflow_steps(f"{r}:1") for r in run_ids], passes
            )
        finally:
            client.destroy()
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMIT_")}
        env["REMIT_DATABASE_URL"] = url
        command = [sys.executable, "-m", "remit", "--app", str(APP), "deploy", "check"]

        def cli() -> None:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=False, timeout=CLI_TIMEOUT
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"{waiting} of {waiting} unfinished runs would carry on" in done.stdout

        from_cli = _median_ms(cli, passes)

    per = "" if waiting == 1000 else f" (measured on {waiting}, its replay scaled to 1,000)"
    scale = 1000 / waiting

    def report_figure(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.2f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    # Measured on fewer runs, only the replay grows to 1,000: the process's start (imports,
    # the app loaded, a connection) is paid once whatever the number of runs.
    report_figure(
        "deploy_check_1000_ms",
        from_cli + in_process * (scale - 1),
        "ms",
        f"`remit deploy check` over 1,000 runs waiting at a gate, process start to exit{per} "
        "(goal ≤ 3000)",
    )
    report_figure(
        "deploy_check_1000_work_ms",
        in_process * scale,
        "ms",
        f"the replay alone, in process, over the same runs{per}",
    )
    report_figure(
        "deploy_check_per_run_ms", in_process / waiting, "ms", "the replay alone, per run"
    )
    report_figure(
        "deploy_check_vs_step_reads_ratio",
        in_process / steps_only,
        "x",
        "the replay ÷ reading each run's DBOS steps and nothing else",
    )
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, Postgres, {time.strftime('%Y-%m-%d')}. Runs of "
        "the bench app's `payout` (a read, an approval gate, a step, a write; fakes) are brought "
        "to `waiting` by a `remit worker`, which is then stopped; the check replays each one "
        "against the same code. Each figure is the median of five passes after a warm-up.",
        "",
        *figure_table(figures),
    ]
    write_section("Deploy check: replaying waiting runs", "\n".join(lines))


def main() -> None:
    run_alone(
        "deploy_check.py",
        measure,
        write,
        quick_help="300 waiting runs instead of 1,000",
        smoke_help="5 waiting runs, each check timed once: only that it runs",
    )


if __name__ == "__main__":
    main()

"""How long a scenario's month takes: `remit test` on the example's month of dunning.

    .venv/bin/python bench/scenarios.py [--quick | --smoke] [--write]    # `make bench` runs it too

Each scenario of examples/acme's `A month of dunning` (thirty days of reminders on a manual
clock, on the app's fakes) runs as `remit test` runs it, on a fresh SQLite file and a fresh
Postgres database each pass. A figure is the median, over the passes, of the time its steps
took (`ScenarioResult.took`: the harness's start and stop left out), for the slower of the
scenarios. The promise is that a month of simulated time costs a fraction of a second of real
time: no step waits for the clock.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

from common import (
    ROOT,
    Figure,
    Size,
    drop_database,
    figure_table,
    fresh_database,
    run_alone,
    write_section,
)

from remit.app import load_app
from remit.scenarios import read, run_scenario
from remit.scenarios.features import app_name_of

FEATURE = ROOT / "examples" / "acme" / "apps" / "ar" / "scenarios" / "dunning.feature"
GOAL_MS = 1000.0


def _month(kind: str, passes: int, folder: Path) -> float:
    """The median milliseconds of the month's steps on `kind` (`sqlite`, `postgres`): for each
    pass, the slowest scenario of the feature."""
    app = load_app(ROOT / "examples" / "acme")
    # The example's schedules miss their instants while the clock jumps, and say so each time.
    logging.getLogger("remit.scheduler").setLevel(logging.ERROR)
    scenarios = read(FEATURE)
    assert scenarios, f"{FEATURE} has no scenarios"
    passes_ms = []
    for _ in range(passes):
        slowest = 0.0
        for scenario in scenarios:
            url = fresh_database(kind, folder)
            try:
                result = run_scenario(
                    app, scenario, database_url=url, app_name=app_name_of(FEATURE)
                )
            finally:
                drop_database(url)
            slowest = max(slowest, result.took)
        passes_ms.append(slowest * 1000)
    return statistics.median(passes_ms)


def measure(*, size: Size, folder: Path) -> list[Figure]:
    passes = size.pick(smoke=1, quick=3, full=7)
    figures: list[Figure] = []
    for kind, suffix in (("sqlite", "sqlite"), ("postgres", "pg")):
        took = _month(kind, passes, folder)
        name = f"scenario_month_ms_{suffix}"
        print(f"BENCH {name} {took:.2f} ms", flush=True)
        figures.append(
            (
                name,
                took,
                "ms",
                f"the steps of a 30-day scenario of dunning on {kind}, median of {passes} "
                f"(goal ≤ {GOAL_MS:.0f})",
            )
        )
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    lines = [
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. The scenarios of "
        "examples/acme's `A month of dunning` run as `remit test` runs them, each pass on a "
        "fresh database; a figure is the slower scenario's steps, without the harness's start "
        "and stop. The tests only check that no real waiting happens (a bound of 30 s).",
        "",
        *figure_table(figures),
    ]
    write_section("Scenarios: a simulated month", "\n".join(lines))


def main() -> None:
    run_alone(
        "scenarios.py",
        measure,
        write,
        quick_help="3 passes instead of 7",
        smoke_help="one pass: only that it runs",
    )


if __name__ == "__main__":
    main()

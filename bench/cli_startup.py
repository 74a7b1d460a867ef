"""How fast the `remit` command starts: `remit --help`, and `remit runs` on a SQLite app folder.

    .venv/bin/python bench/cli_startup.py [--quick | --smoke] [--write]    # or: bench/bench.py --only cli

Each ratio is a command's time from process start to exit divided by the time of
`python -c pass` with the same interpreter in the same run, so that a slower or busier machine
moves both: the median of several repetitions of each, the three commands taking turns, after
one untimed run of each; in wall time (the goals), and in CPU time. `remit runs` lists the runs
of a copy of examples/acme whose own SQLite database (in its `.remit` folder) holds 50 queued
runs of `ar.chase-invoice`. Then each command once more under `python -X importtime` says where
its imports go, and `remit runs`'s work is timed alone, after remit's imports.
"""

from __future__ import annotations

import collections
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Figure, Size, figure_table, run_alone, write_section

RUNS = 50
TIMEOUT = 120.0  # seconds, at most, for one command
_PYCACHE = Path(tempfile.gettempdir()) / "remit-bench-pycache"
HELP_GOAL = 12.0
# `remit runs` is held to its floor (the imports it cannot do without), in the same run: at most
# this many times `cli_runs_floor_ratio`.
RUNS_OVER_FLOOR = 1.25
# What `remit runs` cannot start without: its database layer, its command-line parser (with the
# module that coerces options, which imports pydantic) and the table it prints.
FLOOR = ["sqlalchemy", "typer.main", "typer._adapters", "rich.console", "rich.table"]


def _remit() -> list[str]:
    """The `remit` command installed beside this interpreter, as a user runs it."""
    script = Path(sys.executable).parent / "remit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "remit"]


def _env() -> dict[str, str]:
    """This environment without remit's settings (the app folder's own database, on drivers),
    and with compiled bytecode kept, as an installed remit has it: in a folder of the bench's own
    (`PYTHONPYCACHEPREFIX`), not beside the sources, even where `PYTHONDONTWRITEBYTECODE` is set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("REMIT_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    return env


def _app_with_runs(folder: Path, runs: int = RUNS) -> Path:
    """A copy of the example desk in `folder` whose SQLite database holds `runs` queued runs."""
    from remit.client import Client

    # Not named `acme`: its package would clash with examples/acme's, which `make bench` has
    # imported in this process already (bench/policy.py runs on it).
    app = folder / "acme_copy"
    shutil.copytree(ROOT / "examples" / "acme", app, ignore=shutil.ignore_patterns(".remit"))
    with Client.connect(app, by="user:ann", environ=_env()) as client:
        for i in range(runs):
            client.runs.start("ar.chase-invoice", {"invoice_id": f"inv_{1001 + i}"})
    return app


def _took(command: list[str], cwd: Path) -> tuple[float, float]:
    """Seconds `command` took from start to exit: wall time, and CPU time (user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stdout + done.stderr
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _imports(arguments: list[str], cwd: Path, *, top: int) -> tuple[float, list[tuple[str, float]]]:
    """The milliseconds `python -X importtime ARGUMENTS` spent importing, in all and in each
    top-level package's own modules (importtime slows each import: read the shares)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *arguments],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    )
    spent: collections.Counter[str] = collections.Counter()
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if found:
            spent[found.group(2).split(".")[0]] += int(found.group(1)) / 1000
    return sum(spent.values()), spent.most_common(top)


# In a fresh interpreter: everything remit's command and client import first, then the rest of
# what `remit runs` does, timed: read the settings, open a client on the app's folder, read the
# runs, print them, close.
_WORK = """
import io, sys, time
from pathlib import Path
from rich.console import Console
import remit.cli.main, remit.client, remit.core.runs, remit.core.telemetry
from remit.cli.base import client_of
began = time.perf_counter()
with client_of(Path(sys.argv[1])) as client:
    found = client.runs.list()
Console(file=io.StringIO()).print(*(f"{run.run_id} {run.status}" for run in found))
print((time.perf_counter() - began) * 1000)
"""


def _work_ms(app: Path, cwd: Path, repeats: int) -> float:
    """The milliseconds `remit runs` spends on what is not remit's imports (median of
    `repeats`)."""
    took = [
        float(
            subprocess.run(
                [sys.executable, "-c", _WORK, str(app)],
                cwd=cwd,
                env=_env(),
                capture_output=True,
                text=True,
                check=True,
                timeout=TIMEOUT,
            ).stdout
        )
        for _ in range(repeats)
    ]
    return statistics.median(took)


def measure(*, size: Size, folder: Path) -> list[Figure]:
    repeats = size.pick(smoke=1, quick=7, full=15)
    runs_listed = size.pick(smoke=5, quick=RUNS, full=RUNS)
    app = _app_with_runs(folder, runs_listed)
    commands = {
        "python": [sys.executable, "-c", "pass"],
        "help": [*_remit(), "--help"],
        "runs": [*_remit(), "--app", str(app), "runs"],
        "floor": [sys.executable, "-c", f"import {', '.join(FLOOR)}"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        _took(command, folder)  # warm up: the page cache, and the app's .pyc files
    for _ in range(repeats):
        for name, command in commands.items():
            wall, used = _took(command, folder)
            times[name].append(wall)
            cpu[name].append(used)
    python, help_, runs, floor = (statistics.median(times[name]) * 1000 for name in commands)
    python_cpu, help_cpu, runs_cpu, _ = (statistics.median(cpu[name]) for name in commands)
    help_total, help_packages = _imports(["-m", "remit", "--help"], folder, top=5)
    total, packages = _imports(["-m", "remit", "--app", str(app), "runs"], folder, top=8)
    work_repeats = size.pick(smoke=1, quick=5, full=5)
    work = _work_ms(app, folder, work_repeats)

    figures: list[Figure] = []

    def report(name: str, value: float, unit: str, note: str) -> None:
        print(f"BENCH {name} {value:.3f} {unit}", flush=True)
        figures.append((name, value, unit, note))

    median = f"median of {repeats}"
    report("cli_python_ms", python, "ms", f"`python -c pass`, {median}")
    report("cli_help_ms", help_, "ms", f"`remit --help`, {median}")
    report(
        "cli_runs_ms", runs, "ms", f"`remit runs` listing {runs_listed} runs on SQLite, {median}"
    )
    report(
        "cli_help_ratio",
        help_ / python,
        "x",
        f"`remit --help` ÷ `python -c pass` (goal ≤ {HELP_GOAL:g})",
    )
    report(
        "cli_runs_ratio",
        runs / python,
        "x",
        f"`remit runs` ÷ `python -c pass` (goal ≤ {RUNS_OVER_FLOOR:g} times `cli_runs_floor_ratio`)",
    )
    report(
        "cli_help_cpu_ratio",
        help_cpu / python_cpu,
        "x",
        "the same in CPU time (user and system), which a busy machine moves less",
    )
    report("cli_runs_cpu_ratio", runs_cpu / python_cpu, "x", "the same for `remit runs`")
    report(
        "cli_runs_floor_ratio",
        floor / python,
        "x",
        "`python -c 'import " + ", ".join(FLOOR) + "'` ÷ `python -c pass`: importing only what "
        "`remit runs` cannot do without (SQLAlchemy, Typer with the pydantic adapter it uses to "
        "read options, Rich's table)",
    )
    report(
        "cli_runs_work_ms",
        work,
        "ms",
        "of `remit runs`, what is not remit's imports: the settings read, a client opened on the "
        "app's folder, the runs read and printed, the client closed (median of "
        f"{work_repeats}, remit's imports done first)",
    )
    for package, ms in help_packages:
        report(
            f"cli_help_imports_{package}",
            100 * ms / help_total,
            "%",
            f"of `remit --help`'s import time spent in `{package}` itself (under -X importtime)",
        )
    for package, ms in packages:
        report(
            f"cli_runs_imports_{package}",
            100 * ms / total,
            "%",
            f"of `remit runs`'s import time spent in `{package}` itself (under -X importtime)",
        )
    return figures


def write(figures: list[Figure], *, command: str) -> None:
    value = {name: figure for name, figure, _, _ in figures}
    verdicts = []
    runs_goal = RUNS_OVER_FLOOR * value["cli_runs_floor_ratio"]
    for name, goal, said in (
        ("cli_help_ratio", HELP_GOAL, f"{HELP_GOAL:g}"),
        (
            "cli_runs_ratio",
            runs_goal,
            f"{RUNS_OVER_FLOOR:g} times the floor's {value['cli_runs_floor_ratio']:.1f}, "
            f"{runs_goal:.1f}",
        ),
    ):
        ratio = value[name]
        verdict = "met" if ratio <= goal else f"missed by {ratio - goal:.1f}"
        verdicts.append(f"`{name}` is {ratio:.1f} against a goal of ≤ {said}: {verdict}.")
    lines = [
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Each command is "
        "timed from process start to exit; each ratio divides the median of its repetitions by "
        "the median of `python -c pass` in the same run, the commands taking turns, with compiled "
        "bytecode cached as an installed remit has it (the first, untimed, run of each writes "
        "it). `remit --help` loads neither DBOS, SQLAlchemy, pydantic nor OpenTelemetry. "
        "`remit runs` lists the runs of a copy of examples/acme whose SQLite database holds "
        f"{RUNS} queued runs: it reads the settings and opens the database, but does not import "
        "the app's code (listing runs does not need it), launches nothing, opens no DBOS client "
        "and loads neither DBOS nor OpenTelemetry. The `cli_help_imports_*` and "
        "`cli_runs_imports_*` rows say where their imports go: each package's own share of the "
        "import time of one run of the command under `python -X importtime`.",
        "",
        "`remit --help` is mostly Typer and Rich's console: Typer builds every command's options "
        "from its annotations. remit formats its help as plain text (`cli/base.HelpGroup`), with "
        "the commands under headings; Typer's Rich help formatter would import `rich.markdown`, "
        "and with it markdown_it and pygments, which took longer than all the rest.",
        "",
        "`remit runs` is mostly imports, and most of those are what it cannot start without: "
        "`cli_runs_floor_ratio` times a bare interpreter importing only SQLAlchemy, Typer (with "
        "the adapter that coerces options, which imports pydantic) and Rich's table, and nothing "
        "of remit. On this machine that alone is about 30, which is why `remit runs` is held to "
        "1.25 times the floor, measured in the same run, rather than to 30; what remit adds on top "
        "is the difference between `cli_runs_ratio` and the floor: its core modules (their "
        "tables and the dataclasses for rows), the dialect of the database it reads (the ledger's "
        "partial index is written as DDL, which names neither), and `cli_runs_work_ms`. remit "
        "imports the rest where it "
        "uses it: the app's code when a verb needs the app, DBOS (and with it psycopg) where a "
        "DBOS client, serializer or migration is made or a workflow runs, OpenTelemetry where a "
        "span is made or exported, cryptography where a secret key is read or made, httpx where "
        "the LLM driver or a webhook calls out, croniter where a schedule is made, cedarpy where "
        "policies are compiled.",
        "",
        *figure_table(figures),
        "",
        " ".join(verdicts),
    ]
    write_section("Command line: startup", "\n".join(lines))


def main() -> None:
    run_alone(
        "cli_startup.py",
        measure,
        write,
        quick_help="7 repetitions of each instead of 15",
        smoke_help="one repetition of each, 5 runs listed: only that it runs",
    )


if __name__ == "__main__":
    main()

"""What the benchmarks share: their sizes, throwaway databases, bounded waits, the worker
processes they start, the sections of BENCHMARKS.md, the core figures and bench/baseline.json,
and what lets them measure an older version of remit (bench/compare.py).

Importing this module makes the internal modules of remit the benchmarks import answer under
their present names in an older version that had them elsewhere (see MOVED); every benchmark
imports it before remit's modules."""

from __future__ import annotations

import argparse
import enum
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

if TYPE_CHECKING:
    from dbos import DBOSClient

    from remit.core.database import Database
    from remit.core.runs import RunStore

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get(
    "REMIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

T = TypeVar("T")

# The internal modules of remit the benchmarks of the core figures import (see CORE), each with
# the names it had in older versions, newest first: bench/compare.py measures an older version
# with this version's benchmarks, and remit's modules moved into packages on 2026-12-01.
MOVED: dict[str, tuple[str, ...]] = {
    "remit.core.database": ("remit.store.database",),
    "remit.core.runs": ("remit.runs",),
    "remit.core.schema": ("remit.store.schema",),
    "remit.core.settings": ("remit.settings",),
    "remit.serve.worker": ("remit.ops.worker", "remit.worker"),
    "remit.people.approvals": ("remit.approvals",),
    "remit.people.tasks": ("remit.tasks",),
    "remit.ops.reconciler": ("remit.reconciler",),
    # A pass's report, and its concluding of ended attempts, left the reconciler's module.
    "remit.ops.concluding": ("remit.ops.reconciler", "remit.reconciler"),
}


def _exists(module: str) -> bool:
    """Whether `module` can be imported (its packages are imported to find out, not itself)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a package on its path does not exist
        return False


def follow_moves() -> list[str]:
    """Make each module of MOVED that the remit imported here lacks answer under its present
    name, as the first of its older names it has; return the modules so made. This version
    has them all, and nothing is done; a module found under no name is left for its import to
    fail where it is imported."""
    followed = []
    for name, older in MOVED.items():
        if _exists(name):
            continue
        found = next((old for old in older if _exists(old)), None)
        if found is not None:
            sys.modules[name] = importlib.import_module(found)
            followed.append(f"{name} = {found}")
    return followed


FOLLOWED = follow_moves()


def run_store(db: Database, app: str) -> RunStore:
    """A `RunStore` on `db` starting runs of the app `app`, in any version: before apps shared
    a database (2026-12-01), a store was not told its app."""
    from remit.core.runs import RunStore

    if "app" in inspect.signature(RunStore).parameters:
        return RunStore(db, app=app)
    return RunStore(db)


class Size(enum.Enum):
    """How big a benchmark's run is. `full` is what BENCHMARKS.md reports (`make bench`);
    `quick` the same measures with fewer repetitions (`make bench QUICK=1`); `smoke` the least
    that still goes through every code path (`make bench SMOKE=1`), whose figures say only
    that the benchmark runs and are never written."""

    SMOKE = "smoke"
    QUICK = "quick"
    FULL = "full"

    def pick(self, *, smoke: T, quick: T, full: T) -> T:
        """This size's value of the three."""
        return {Size.SMOKE: smoke, Size.QUICK: quick, Size.FULL: full}[self]

    @property
    def flag(self) -> str:
        """The option that asks a benchmark for this size, with a space before it (`full`:
        none), to append to the command a section of BENCHMARKS.md names."""
        return self.pick(smoke=" --smoke", quick=" --quick", full="")

    @staticmethod
    def add_options(parser: argparse.ArgumentParser, *, quick: str, smoke: str) -> None:
        """`--quick` and `--smoke` (each with what it measures), and `--write`, which a smoke
        run refuses: its figures are not worth a section."""
        sizes = parser.add_mutually_exclusive_group()
        sizes.add_argument("--quick", action="store_true", help=quick)
        sizes.add_argument("--smoke", action="store_true", help=smoke)
        parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")

    @staticmethod
    def of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Size:
        """The size `args` asks for (parsed by `parser`, with `add_options`)."""
        if args.smoke and args.write:
            parser.error("--smoke measures too little to write BENCHMARKS.md: drop --write")
        return Size.SMOKE if args.smoke else Size.QUICK if args.quick else Size.FULL


def _admin() -> sa.Engine:
    return sa.create_engine(
        sa.make_url(POSTGRES).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT"
    )


def fresh_database(kind: str, folder: Path) -> str:
    """A new, empty database: a SQLite file in `folder`, or a Postgres database on the server."""
    if kind == "sqlite":
        return f"sqlite:///{folder / f'bench-{uuid.uuid4().hex[:8]}.sqlite'}"
    admin = _admin()
    name = f"remit_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    admin.dispose()
    return url


def drop_database(url: str) -> None:
    """Drop a database `fresh_database` made: the Postgres database, or the SQLite file with
    the files named after it beside it (its journal, its lock)."""
    if url.startswith("sqlite"):
        made = Path(url.removeprefix("sqlite:///"))
        for path in made.parent.glob(f"{made.name}*"):
            path.unlink(missing_ok=True)
        return
    admin = _admin()
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    state: Callable[[], str] | None = None,
    every: float = 0.05,
) -> T:
    """Call `check` every `every` seconds until it returns something true, and return that.
    Past `timeout` seconds, raise TimeoutError naming what was awaited (`what`) and, from
    `state()`, how things stood then."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            stood = f"; {state()}" if state is not None else ""
            raise TimeoutError(f"waited {timeout:g} s for {what}{stood}")
        time.sleep(every)


def handle_of(client: DBOSClient, workflow_id: str) -> Any:
    """The handle DBOS's `enqueue` returns for `workflow_id`, made without the lookup
    `retrieve_workflow` makes first: so a benchmark waits for a remit run's attempt as it waits
    for a bare DBOS workflow, with no query more."""
    from dbos._client import WorkflowHandleClientPolling

    return WorkflowHandleClientPolling(workflow_id, client._sys_db)


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the block if it takes more than `seconds`: for a wait that has no
    timeout of its own, such as DBOS's `get_result`, which polls for ever. It sets an alarm
    (SIGALRM), so it works in the main thread only, costs no thread, and must not be nested."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"waited {seconds:g} s for {what}")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Process:
    """A process a benchmark starts (a worker, a server), whose output, stdout and stderr
    together, a thread of its own reads and keeps: so the pipe never fills, a wait for a line
    can time out, and a failure can show what the process said last."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._terminated = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 15) -> str:
        """Its last `lines` lines of output, indented, for an error message."""
        last = self.lines[-lines:]
        return "".join(f"    {line}" for line in last) if last else "    (no output)\n"

    def wait_for_line(self, pattern: str, *, timeout: float) -> re.Match[str]:
        """The first match of the regular expression `pattern` in a line of its output,
        waiting at most `timeout` seconds for it; raises if the process exits first."""

        def search() -> re.Match[str] | None:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            return None

        def found() -> re.Match[str] | None:
            match = search()
            if match is not None or self.proc.poll() is None:
                return match
            self._reader.join(5)  # the rest of what it wrote before it exited
            match = search()
            if match is None:
                raise RuntimeError(
                    f"{self.name} exited {self.proc.returncode} before printing {pattern!r}; "
                    f"its last output:\n{self.tail()}"
                )
            return match

        return wait_until(
            found,
            timeout=timeout,
            what=f"{self.name} to print {pattern!r}",
            state=lambda: f"its last output:\n{self.tail()}",
        )

    def terminate(self) -> None:
        """SIGTERM, once, without waiting: to stop several at once, terminate each, then
        `stop()` each."""
        if not self._terminated and self.proc.poll() is None:
            self.proc.terminate()
            self._terminated = True

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (unless `terminate()` sent it), and wait at most `timeout` seconds for it
        to exit; past that, kill it and raise."""
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise TimeoutError(
                f"{self.name} was still running {timeout:g} s after SIGTERM, and was killed; "
                f"its last output:\n{self.tail()}"
            )


def write_section(title: str, body: str) -> None:
    """Put `## title` with `body` in BENCHMARKS.md, in place of the section of that title."""
    section = f"## {title}\n\n{body.strip()}\n"
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(f"## {title}\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def figure_table(figures: list[tuple[str, float, str, str]]) -> list[str]:
    """The lines of a markdown table of `(name, value, unit, what)` figures."""
    return [
        "| figure | value | unit | what |",
        "|---|---|---|---|",
        *[f"| `{name}` | {value:.2f} | {unit} | {note} |" for name, value, unit, note in figures],
    ]


Figure = tuple[str, float, str, str]


class Unsupported(Exception):
    """The remit measured lacks what a benchmark measures (an older version, under
    bench/compare.py): the benchmark has nothing to measure there."""


def parse_sized(
    parser: argparse.ArgumentParser, full: dict[str, Any], smoke: dict[str, Any]
) -> argparse.Namespace:
    """Parse the options of a benchmark whose sizes are options of their own (`--runs` and
    the like, default None): `--write`, or `--smoke`, which fills in the sizes not given from
    `smoke` instead of `full`."""
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    sizes.add_argument(
        "--smoke",
        action="store_true",
        help="sizes not given: "
        + ", ".join(f"--{name} {value}" for name, value in smoke.items())
        + " (only that it runs; writes nothing)",
    )
    args = parser.parse_args()
    for name, value in (smoke if args.smoke else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def run_alone(
    script: str,
    measure: Callable[..., list[Figure]],
    write: Callable[..., None],
    *,
    quick_help: str,
    smoke_help: str,
) -> None:
    """The `main()` of a benchmark run on its own: `--quick`, `--smoke` and `--write`, in a
    throwaway folder."""
    parser = argparse.ArgumentParser()
    Size.add_options(parser, quick=quick_help, smoke=smoke_help)
    args = parser.parse_args()
    size = Size.of(parser, args)
    with tempfile.TemporaryDirectory() as folder:
        figures = measure(size=size, folder=Path(folder))
    if args.write:
        write(figures, command=f"python bench/{script}{size.flag}")


# The core figures, each with which way is better: what `make bench` keeps in bench/baseline.json
# and bench/compare.py measures side by side. `reconcile_1k_ms` is the smoke size's pass, and
# `children_10_*` the smoke size's parents (SMOKE_ONLY: never kept).
CORE: dict[str, str] = {
    "seq_bare_ms_sqlite": "lower",
    "seq_remit_ms_sqlite": "lower",
    "seq_ratio_sqlite": "lower",
    "seq_bare_ms_pg": "lower",
    "seq_remit_ms_pg": "lower",
    "seq_ratio_pg": "lower",
    "drain_bare_1w_pg": "higher",
    "drain_remit_1w_pg": "higher",
    "drain_remit_2w_pg": "higher",
    "drain_ratio_pg": "lower",
    "scale_2w_pg": "higher",
    "decide_resume_p50_ms": "lower",
    "decide_resume_p99_ms": "lower",
    "reconcile_10k_ms": "lower",
    "reconcile_1k_ms": "lower",
    **{
        f"message_resume_{name}_{db}": "lower"
        for db in ("sqlite", "pg")
        for name in ("p50_ms", "p99_ms", "bare_p50_ms", "ratio")
    },
    **{
        f"children_{count}_{name}_{db}": "lower"
        for count in (100, 10)
        for db in ("sqlite", "pg")
        for name in ("ms", "bare_ms", "ratio")
    },
}
SMOKE_ONLY = (
    "reconcile_1k_ms",
    *(f"children_10_{name}_{db}" for db in ("sqlite", "pg") for name in ("ms", "bare_ms", "ratio")),
)
BASELINE = ROOT / "bench" / "baseline.json"


def worse_by(name: str, value: float, than: float) -> float:
    """How much worse `value` of the core figure `name` is than `than`, as a share of `than`
    (negative: better): 0.2 is 20 % slower, or 20 % less throughput."""
    if CORE[name] == "lower":
        return value / than - 1
    return 1 - value / than


def git(*arguments: str, cwd: Path = ROOT, timeout: float = 120.0) -> str:
    """What `git arguments` prints, stripped; raises if it fails or takes over `timeout` s."""
    done = subprocess.run(
        ["git", *arguments], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(arguments)} exited {done.returncode}: {done.stderr}")
    return done.stdout.strip()


def this_version() -> str:
    """The commit checked out here, short, with `+changes` if src/ or bench/ differ from it."""
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "src", "bench")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")


def write_baseline(figures: list[Figure], *, command: str) -> list[str]:
    """Keep the core figures among `figures` in bench/baseline.json, each with its unit, which
    way is better, the version, the date and `command`; the figures it holds that were not
    measured stay as they were. Returns the names written."""
    kept = read_baseline()
    version, date = this_version(), time.strftime("%Y-%m-%d")
    written = []
    for name, value, unit, _ in figures:
        if name in CORE and name not in SMOKE_ONLY:
            better = CORE[name]
            kept[name] = {
                "value": round(value, 3),
                "unit": unit,
                "better": better,
                "commit": version,
                "date": date,
                "command": command,
            }
            written.append(name)
    if written:
        ordered = {name: kept[name] for name in CORE if name in kept}
        BASELINE.write_text(json.dumps(ordered, indent=2, ensure_ascii=False) + "\n")
    return written


def read_baseline() -> dict[str, dict[str, Any]]:
    """bench/baseline.json's figures by name (none if it does not exist)."""
    if not BASELINE.exists():
        return {}
    held: dict[str, dict[str, Any]] = json.loads(BASELINE.read_text())
    return held


@contextmanager
def worktree(rev: str, folder: Path) -> Iterator[Path]:
    """`rev` (any commit-ish) checked out, detached, into a temporary git worktree of this
    repository in `folder`; removed afterwards, however the block ends."""
    tree = folder / f"remit-{uuid.uuid4().hex[:8]}"
    git("worktree", "add", "--detach", str(tree), rev)
    try:
        yield tree
    finally:
        try:
            git("worktree", "remove", "--force", str(tree))
        except (RuntimeError, subprocess.TimeoutExpired):
            shutil.rmtree(tree, ignore_errors=True)
            git("worktree", "prune")

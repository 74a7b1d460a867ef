"""What the benchmarks share: their sizes, throwaway databases, bounded waits, the worker
processes they start, and the sections of BENCHMARKS.md."""

from __future__ import annotations

import argparse
import enum
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get(
    "REMIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

T = TypeVar("T")


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

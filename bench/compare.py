"""The core figures of an earlier version (BASE) and of the working tree, side by side, in one
run; and the working tree held to bench/baseline.json.

    .venv/bin/python bench/compare.py BASE [--rounds N] [--quick | --smoke] [--only GROUPS]

    bench/compare.py HEAD~3 --quick              # 3 rounds: about 5 minutes on 2 cores
    bench/compare.py HEAD~3                      # full size: about twice as long
    bench/compare.py HEAD --quick --only seq     # about 1 minute
    bench/compare.py HEAD --smoke                # the least that goes through the code

BASE is any git commit-ish. It is checked out, detached, into a temporary git worktree, removed
at the end however the run ends (Ctrl-C and SIGTERM included). Both sides are measured by this
version's benchmarks (bench/bench.py, bench/approvals.py, bench/waits.py, bench/reconcile.py) on
this version's bench apps, each side importing its own `remit`: every measure runs in a child process
(`compare.py child GROUP SIZE`, in a session of its own) with the side's `src` first on
PYTHONPATH, ahead of the working tree's that .venv's editable install adds, and the workers it
starts inherit it. The child prints the `remit` it imported; one that is not the side's fails
the measure. Where remit's internal modules have moved since BASE, common.py's MOVED maps
them, and `common.run_store` builds a `RunStore` as the version wants it: that is all it takes
back to 3d69a20 (2026-11-29) at least.

The groups of figures (`--only seq,drain` runs some of them):

    seq        sequential runs, remit and bare DBOS, on SQLite and Postgres (seq_*)
    drain      the queue drain on Postgres: bare DBOS with 1 worker, remit with 1 and 2
               (drain_*, scale_2w_pg)
    approvals  decide to resume, p50 and p99 (decide_resume_p50_ms, decide_resume_p99_ms)
    messages   a message's resume, remit and bare DBOS, on SQLite and Postgres
               (message_resume_*)
    children   a parent's 100 children, remit and bare DBOS, on SQLite and Postgres
               (children_100_*; 10 children at smoke size)
    reconcile  one reconciler pass over 10,000 runs (reconcile_10k_ms; 1,000 at smoke size)

A group the BASE's remit lacks the feature of (messages and children before `ctx.wait_for`)
is dropped with a note, not counted as a failure.

Each round measures every group once per side, the sides taking turns: base first in odd
rounds, the working tree first in even ones, so that what else the machine does falls on both
alike. `--rounds N` (default 3; 1 at smoke size) sets how many; each figure printed is the
median over the rounds. Sizes are bench/bench.py's (`--quick`: a quarter to a third of the runs;
`--smoke`: the least that runs), but the reconciler's pass is over 10,000 runs at full size too.

Then, for each figure: BASE's value, the working tree's, working ÷ base, and whether the
working tree is better or worse (lower is better for times and the ratios to bare DBOS, higher
for throughput and scaling); "noise" where the two sides' values over the rounds overlap. The
figures of bare DBOS are the same code on both sides: how far their ratio is from 1 shows how
far the machine moved under the run. Then every figure of the working tree more than 15 %
worse than bench/baseline.json's (which `make bench` writes). A line `BENCH compare_<figure>
<working ÷ base> x` per figure ends the output, for bench/smoke.py. Exits 1 if a measure failed
(its group is dropped from the rounds after, and the others go on).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import smoke  # bench/smoke.py, beside this file
from common import (
    CORE,
    FOLLOWED,
    ROOT,
    Size,
    Unsupported,
    git,
    read_baseline,
    this_version,
    worktree,
    worse_by,
)

# The figures of each group, as a run at full or quick size prints them.
GROUPS: dict[str, tuple[str, ...]] = {
    "seq": tuple(
        f"seq_{name}_{db}" for db in ("sqlite", "pg") for name in ("bare_ms", "remit_ms", "ratio")
    ),
    "drain": (
        "drain_bare_1w_pg",
        "drain_remit_1w_pg",
        "drain_remit_2w_pg",
        "drain_ratio_pg",
        "scale_2w_pg",
    ),
    "approvals": ("decide_resume_p50_ms", "decide_resume_p99_ms"),
    "messages": tuple(
        f"message_resume_{name}_{db}"
        for db in ("sqlite", "pg")
        for name in ("p50_ms", "p99_ms", "bare_p50_ms", "ratio")
    ),
    "children": tuple(
        f"children_100_{name}_{db}"
        for db in ("sqlite", "pg")
        for name in ("ms", "bare_ms", "ratio")
    ),
    "reconcile": ("reconcile_10k_ms",),
}
# Seconds, at most, for one child to measure its group, by size (smoke, quick, full).
CHILD_TIMEOUTS: dict[str, tuple[float, float, float]] = {
    "seq": (180, 420, 900),
    "drain": (240, 600, 1500),
    "approvals": (180, 420, 900),
    "messages": (180, 420, 900),
    "children": (180, 300, 600),
    "reconcile": (240, 600, 600),
}
WORSE = 0.15  # a working tree's figure this much worse than the baseline's is printed
ROUNDS = 3
REMIT = "COMPARE-REMIT "  # the child's line naming the `remit` it imported
LACKS = "COMPARE-LACKS "  # the child's line saying its `remit` lacks what the group measures
LACKS_EXIT = 3  # the child's exit code then
LINE = re.compile(r"^BENCH (\S+) (\S+) (\S+)")
TAIL = 30  # lines of a failed child's output shown


# The child: one side, one group, one round, in a process of its own.


def _seq(size: Size, folder: Path) -> None:
    import bench  # bench/bench.py, beside this file

    bench.measure_sequential(size=size, folder=folder)


def _drain(size: Size, folder: Path) -> None:
    import bench  # bench/bench.py, beside this file

    bench.measure_drain(size=size, folder=folder)


def _approvals(size: Size, folder: Path) -> None:
    import approvals  # bench/approvals.py, beside this file

    approvals.measure_decide(size=size, folder=folder)


def _messages(size: Size, folder: Path) -> None:
    import waits  # bench/waits.py, beside this file

    waits.measure_messages(size=size, folder=folder)


def _children(size: Size, folder: Path) -> None:
    import waits  # bench/waits.py, beside this file

    waits.measure_children(size=size, folder=folder)


def _reconcile(size: Size, folder: Path) -> None:
    import reconcile  # bench/reconcile.py, beside this file

    runs = size.pick(smoke=1_000, quick=10_000, full=10_000)
    reconcile.measure(size=size, folder=folder, sizes=(runs,), profile=False)


MEASURES: dict[str, Callable[[Size, Path], None]] = {
    "seq": _seq,
    "drain": _drain,
    "approvals": _approvals,
    "messages": _messages,
    "children": _children,
    "reconcile": _reconcile,
}


def child(group: str, size: Size) -> None:
    """Measure `group` at `size` with the `remit` on this process's path, printing which one
    that is, the modules it was found under older names (common.py's MOVED), and the figures'
    `BENCH` lines; or, with exit code LACKS_EXIT, that the `remit` lacks what `group`
    measures."""
    import remit

    print(f"{REMIT}{remit.__file__}", flush=True)
    for followed in FOLLOWED:
        print(f"# an older layout: {followed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="remit-compare-") as folder:
        try:
            MEASURES[group](size, Path(folder))
        except Unsupported as lacking:
            print(f"{LACKS}{lacking}", flush=True)
            sys.exit(LACKS_EXIT)


# The parent: the worktree, the rounds, the sides, the table.


@dataclass
class Side:
    """One version measured: its name, what it is (a commit and its date), its `src`, and its
    figures, round by round."""

    name: str
    label: str
    src: Path
    values: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with the side's `src` first on PYTHONPATH (remit is
        installed editable in .venv, from the working tree: its path comes after)."""
        path = [str(self.src), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
        return {**os.environ, "PYTHONPATH": ":".join(path)}

    def median(self, name: str) -> float:
        return statistics.median(self.values[name])


class ChildFailed(Exception):
    """A child exited non-zero, timed out, or imported the wrong `remit`."""


class GroupLacking(Exception):
    """A side's `remit` lacks what a group measures (the child said so)."""


def _lacks(output: str) -> str | None:
    """What a child's output says its `remit` lacks, if it says so."""
    for line in output.splitlines():
        if line.startswith(LACKS):
            return line[len(LACKS) :].strip()
    return None


def _imported(output: str) -> Path | None:
    """The `remit` module a child's output says it imported."""
    for line in output.splitlines():
        if line.startswith(REMIT):
            return Path(line[len(REMIT) :].strip())
    return None


def figures_in(output: str) -> dict[str, tuple[float, str]]:
    """The core figures among a child's `BENCH` lines: name → (value, unit)."""
    found: dict[str, tuple[float, str]] = {}
    for line in output.splitlines():
        match = LINE.match(line)
        if match and match.group(1) in CORE:
            found[match.group(1)] = (float(match.group(2)), match.group(3))
    return found


def run_child(side: Side, group: str, size: Size) -> dict[str, tuple[float, str]]:
    """Measure `group` on `side` in a child process, in a session of its own (ended, with the
    workers it started, if it times out or this run is interrupted); its core figures."""
    smallest, quick, full = CHILD_TIMEOUTS[group]
    timeout = size.pick(smoke=smallest, quick=quick, full=full)
    command = [sys.executable, __file__, "child", group, size.value]
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=side.env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code: int | None = None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if code is None:
                smoke.end_session(proc)
        output.seek(0)
        said = output.read()
    tail = "".join(f"    {line}\n" for line in said.splitlines()[-TAIL:]) or "    (no output)\n"
    if code is None:
        raise ChildFailed(
            f"{side.name}'s {group} was still running after {timeout:g} s, and was stopped; "
            f"the end of its output:\n{tail}"
        )
    lacking = _lacks(said)
    if code == LACKS_EXIT and lacking is not None:
        raise GroupLacking(f"{side.name} ({side.label}): {lacking}")
    if code != 0:
        raise ChildFailed(f"{side.name}'s {group} exited {code}; the end of its output:\n{tail}")
    imported = _imported(said)
    if imported is None or not imported.resolve().is_relative_to(side.src.resolve()):
        raise ChildFailed(
            f"{side.name}'s {group} imported remit from {imported}, not from {side.src}"
        )
    found = figures_in(said)
    wanted = [name for name in group_figures(group, size) if name not in found]
    if wanted:
        raise ChildFailed(
            f"{side.name}'s {group} printed no BENCH line for {', '.join(wanted)}; the end of "
            f"its output:\n{tail}"
        )
    return found


def group_figures(group: str, size: Size) -> tuple[str, ...]:
    """The figures `group` prints at `size` (the smoke size's reconciler pass is over 1,000)."""
    if group == "reconcile" and size is Size.SMOKE:
        return ("reconcile_1k_ms",)
    if group == "children" and size is Size.SMOKE:
        return tuple(name.replace("children_100_", "children_10_") for name in GROUPS[group])
    return GROUPS[group]


@dataclass
class Run:
    """What a comparison measured, what failed, and the groups a side lacks."""

    sides: tuple[Side, Side]
    groups: list[str]
    size: Size
    rounds: int
    failures: list[str] = field(default_factory=list)
    lacking: list[str] = field(default_factory=list)

    def measure(self) -> None:
        """Every group on both sides, round by round, base first in odd rounds."""
        for n in range(self.rounds):
            order = self.sides if n % 2 == 0 else self.sides[::-1]
            for group in list(self.groups):
                for side in order:
                    if group not in self.groups:  # the other side's failed this round
                        break
                    self.one(side, group, n)

    def one(self, side: Side, group: str, n: int) -> None:
        """One child's measure, kept; a failure is kept instead and drops its group."""
        began = time.monotonic()
        print(f"# round {n + 1}/{self.rounds}, {group}, {side.name} ({side.label}) ...", flush=True)
        try:
            found = run_child(side, group, self.size)
        except ChildFailed as failed:
            self.failures.append(f"round {n + 1}: {failed}")
            self.groups.remove(group)
            print(f"#   FAILED; {group} is dropped: {str(failed).splitlines()[0]}", flush=True)
            return
        except GroupLacking as lacking:
            self.lacking.append(f"{group}: {lacking}")
            self.groups.remove(group)
            print(f"#   {group} is dropped: {lacking}", flush=True)
            return
        for name, (value, unit) in found.items():
            side.values.setdefault(name, []).append(value)
            side.units[name] = unit
        said = ", ".join(f"{name} {value:.2f}" for name, (value, _) in found.items())
        print(f"#   {time.monotonic() - began:.0f} s: {said}", flush=True)


def verdict(name: str, base: float, working: float) -> str:
    """The working tree's `working` against BASE's `base`, by the way `name` is better:
    "better", "worse" or "same"."""
    if working == base:
        return "same"
    return "worse" if worse_by(name, working, base) > 0 else "better"


def overlap(base: list[float], working: list[float]) -> bool:
    """Whether two sides' values over the rounds overlap (a single round says nothing)."""
    if len(base) < 2 or len(working) < 2:
        return False
    return max(min(base), min(working)) <= min(max(base), max(working))


def table(run: Run) -> list[str]:
    """The side-by-side lines: each figure measured on both sides, with working ÷ base."""
    base, working = run.sides
    names = [name for name in CORE if name in base.values and name in working.values]
    width = max([22, *map(len, names)])
    lines = [f"{'figure':<{width}} {'base':>16} {'working':>16} {'working÷base':>13}"]
    for name in names:
        b, w = base.median(name), working.median(name)
        unit = working.units[name]
        notes = [f"{CORE[name]} is better"]
        if overlap(base.values[name], working.values[name]):
            notes.append("noise: the rounds overlap")
        if "_bare_" in name:
            notes.append("bare DBOS on both sides")
        lines.append(
            f"{name:<{width}} {f'{b:.2f} {unit}':>16} {f'{w:.2f} {unit}':>16} {w / b:>13.3f}  "
            f"{verdict(name, b, w):<6} ({'; '.join(notes)})"
        )
    return lines


def against_baseline(working: Side, size: Size) -> list[str]:
    """The working tree's figures more than WORSE worse than bench/baseline.json's."""
    held = read_baseline()
    names = [name for name in CORE if name in held and name in working.values]
    if not names:
        return ["bench/baseline.json holds none of the figures measured (`make bench` writes it)."]
    lines = []
    if size is Size.SMOKE:
        lines.append("(smoke size: the check runs, but what it finds means nothing)")
    sizes = {_size_of(held[name]["command"]) for name in names}
    if sizes != {size}:
        made = ", ".join(sorted(s.value for s in sizes))
        lines.append(f"(the baseline was measured at {made} size, this run at {size.value})")
    worse = []
    for name in names:
        value, kept = working.median(name), held[name]
        by = worse_by(name, value, kept["value"])
        if by > WORSE:
            worse.append(
                f"  {name}: {value:.2f} {kept['unit']} against {kept['value']:.2f}, "
                f"{by * 100:.0f} % worse ({kept['command']} at {kept['commit']}, {kept['date']})"
            )
    if worse:
        lines.append(
            f"The working tree's figures more than {WORSE * 100:.0f} % worse than the baseline:"
        )
        lines += worse
    else:
        lines.append(
            f"None of the {len(names)} figures measured is more than {WORSE * 100:.0f} % worse than "
            "the baseline's."
        )
    return lines


def _size_of(command: str) -> Size:
    """The size a baseline figure's command measured at."""
    return Size.QUICK if "QUICK" in command or "--quick" in command else Size.FULL


def describe(rev: str) -> str:
    """`rev`'s short commit and its date."""
    return git("log", "-1", "--format=%h, %cd", "--date=short", rev)


@contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM ends this run as Ctrl-C does: the children's sessions ended, the worktree
    removed."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def compare(base: str, groups: list[str], size: Size, rounds: int) -> int:
    """Measure, print the table and the baseline's check; the exit code (1: a measure failed)."""
    label = describe(base)
    print(
        f"# bench/compare.py: {base} ({label}) against the working tree ({this_version()}), "
        f"{', '.join(groups)}, {size.value} size, {rounds} round{'s' * (rounds != 1)}",
        flush=True,
    )
    with (
        terminated_as_interrupt(),
        tempfile.TemporaryDirectory(prefix="remit-compare-") as folder,
        worktree(base, Path(folder)) as tree,
    ):
        sides = (
            Side("base", label, tree / "src"),
            Side("working", f"{this_version()}, the working tree", ROOT / "src"),
        )
        run = Run(sides, list(groups), size, rounds)
        run.measure()
    print()
    print(
        f"{base} ({label}) against the working tree ({this_version()}): {size.value} size, "
        f"median of {rounds} round{'s' * (rounds != 1)}"
    )
    print("\n".join(table(run)))
    print()
    print("\n".join(against_baseline(sides[1], size)))
    for name in CORE:
        if name in sides[0].values and name in sides[1].values:
            ratio = sides[1].median(name) / sides[0].median(name)
            print(f"BENCH compare_{name} {ratio:.3f} x", flush=True)
    for lacking in run.lacking:
        print(f"\nnot measured, {lacking}")
    for failure in run.failures:
        print(f"\nFAILED {failure}", file=sys.stderr)
    return 1 if run.failures else 0


def _groups(value: str) -> list[str]:
    """`--only`'s groups: comma-separated names of GROUPS."""
    named = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in named if name not in GROUPS]
    if unknown or not named:
        raise argparse.ArgumentTypeError(
            f"no group {', '.join(unknown) or value!r}: name some of {', '.join(GROUPS)}"
        )
    return named


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        child(sys.argv[2], Size(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("base", metavar="BASE", help="the version to compare: any commit-ish")
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"rounds of every group on both sides (default {ROUNDS}; 1 at smoke size)",
    )
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--quick", action="store_true", help="bench/bench.py's quick sizes")
    sizes.add_argument(
        "--smoke", action="store_true", help="the least that runs: the figures mean nothing"
    )
    parser.add_argument(
        "--only",
        type=_groups,
        metavar="GROUPS",
        help=f"some of the groups, comma-separated: {', '.join(GROUPS)} (default: all)",
    )
    args = parser.parse_args()
    size = Size.SMOKE if args.smoke else Size.QUICK if args.quick else Size.FULL
    rounds = args.rounds or size.pick(smoke=1, quick=ROUNDS, full=ROUNDS)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    chosen = args.only or list(GROUPS)
    try:
        code = compare(args.base, [g for g in GROUPS if g in chosen], size, rounds)
    except KeyboardInterrupt:
        print("\ninterrupted: the children stopped, the worktree removed", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()

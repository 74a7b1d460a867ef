"""Every benchmark at its smallest, each in its own process, checked to print its figures.

    make bench SMOKE=1                              # or: python bench/bench.py --smoke
    .venv/bin/python bench/smoke.py [NAME ...]      # only the modules named (see MODULES)

Each module of bench/ runs as `python bench/<module>.py ... --smoke`, two at a time, each in a
session of its own (so that a module's DBOS, workers and servers never outlive it), with a
timeout; it passes if it exits 0 and printed a `BENCH <name> <value> <unit>` line for every
name it is expected to print. What the figures say is not checked: at this size they say
nothing. Nothing is written to BENCHMARKS.md. Then one line per module (its name, seconds and
`ok` or `FAILED`), and for each failure why (its exit code, its timeout or the names it did
not print) with the tail of its output; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
LINE = re.compile(r"^BENCH (\S+) (\S+) \S")
TAIL = 30  # lines of a failed module's output shown
# Modules run at once. Much of a module's time is spent waiting (on a worker's start, a poll,
# a database made or dropped), so two at once take about half the time of one after another,
# even on two cores.
JOBS = 2


@dataclass(frozen=True)
class Module:
    """A benchmark module as the smoke run runs it: its script in bench/, with `arguments`
    and `--smoke`, and the names of the figures it must print (shell-style patterns where a
    name depends on the machine, such as the packages imports go to)."""

    name: str
    script: str
    prints: tuple[str, ...]
    arguments: tuple[str, ...] = ()
    timeout: float = 150.0

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(BENCH / self.script), *self.arguments, "--smoke"]


def _per_database(*names: str) -> tuple[str, ...]:
    """Each of `names`, with `{db}` made `sqlite` and then `pg`."""
    return tuple(name.format(db=db) for db in ("sqlite", "pg") for name in names)


MODULES = (
    # The commit checked out against the working tree: two of its groups, the one measured in
    # bench/bench.py and the reconciler's (the others call what `bench` and `approvals` run
    # below, and would double its time).
    Module(
        "compare",
        "compare.py",
        tuple(
            f"compare_{name}"
            for name in (
                *_per_database("seq_bare_ms_{db}", "seq_remit_ms_{db}", "seq_ratio_{db}"),
                "reconcile_1k_ms",
            )
        ),
        arguments=("HEAD", "--only", "seq,reconcile"),
        timeout=300.0,
    ),
    Module(
        "bench",
        "bench.py",
        (
            *_per_database("seq_bare_ms_{db}", "seq_remit_ms_{db}", "seq_ratio_{db}"),
            "drain_bare_1w_pg",
            "drain_remit_1w_pg",
            "drain_remit_2w_pg",
            "drain_ratio_pg",
            "scale_2w_pg",
        ),
        arguments=("--only", "bare"),
    ),
    Module(
        "approvals",
        "approvals.py",
        (
            "decide_resume_p50_ms",
            "decide_resume_p99_ms",
            "decide_resume_max_ms",
            "decide_call_p50_ms",
            "waiting_1000_rss_mb",
            "waiting_1000_threads",
            "waiting_1000_served_rss_mb",
            "waiting_1000_served_threads",
        ),
    ),
    Module(
        "waits",
        "waits.py",
        _per_database(
            "message_resume_p50_ms_{db}",
            "message_resume_p99_ms_{db}",
            "message_resume_bare_p50_ms_{db}",
            "message_resume_bare_p99_ms_{db}",
            "message_resume_ratio_{db}",
            "message_send_ms_{db}",
            "message_send_bare_ms_{db}",
            "children_10_ms_{db}",
            "children_10_bare_ms_{db}",
            "children_10_ratio_{db}",
        ),
    ),
    Module("reconcile", "reconcile.py", ("reconcile_1k_ms", "reconcile_1k_idle_ms")),
    Module(
        "policy",
        "policy.py",
        (
            "start_checked_ms",
            "start_unchecked_ms",
            "policy_check_us",
            "policy_check_alone_us",
            "policy_denial_us",
        ),
    ),
    Module(
        "budgets",
        "budgets.py",
        (
            "budget_reserve_ms",
            "budget_reserve_only_ms",
            "budget_settle_only_ms",
            "ledger_finish_ms",
            "budget_reserve_8_threads_ms",
            "budget_calls_per_s_8_threads",
        ),
    ),
    Module(
        "deploy_check",
        "deploy_check.py",
        (
            "deploy_check_1000_ms",
            "deploy_check_1000_work_ms",
            "deploy_check_per_run_ms",
            "deploy_check_vs_step_reads_ratio",
        ),
    ),
    Module(
        "cli_startup",
        "cli_startup.py",
        (
            "cli_python_ms",
            "cli_help_ms",
            "cli_runs_ms",
            "cli_help_ratio",
            "cli_runs_ratio",
            "cli_help_cpu_ratio",
            "cli_runs_cpu_ratio",
            "cli_runs_floor_ratio",
            "cli_runs_work_ms",
            "cli_help_imports_*",
            "cli_runs_imports_*",
        ),
    ),
    Module(
        "calls",
        "calls.py",
        (
            *_per_database(
                "calls_wall_before_mean_ms_{db}",
                "calls_wall_after_mean_ms_{db}",
                "calls_wall_ratio_{db}",
                "calls_reads_ratio_{db}",
                "calls_per_read_added_ms_{db}",
                "calls_op_call_after_ms_{db}",
                "calls_ledger_finish_after_ms_{db}",
                "calls_commits_per_read_before_{db}",
                "calls_commits_per_read_after_{db}",
            ),
            "calls_invoke_direct_us",
            "calls_invoke_within_us",
            "calls_invoke_added_us",
        ),
    ),
    Module(
        "commits",
        "commits.py",
        _per_database(
            "commits_bare_{db}",
            "statements_bare_{db}",
            "commits_remit_{db}",
            "statements_remit_{db}",
        ),
    ),
    Module("wakeup", "wakeup.py", ("wake_lateness_p50_ms", "wake_lateness_p99_ms")),
    Module(
        "scale_to_zero",
        "scale_to_zero.py",
        (
            "stopped_idle_cpu_pct",
            "wake_to_first_step_ms",
            "sleep_resumed_late_ms",
            "sleep_resumed_late_max_ms",
        ),
    ),
    Module(
        "resources",
        "resources.py",
        (
            "plan_1000_ms",
            "plan_1000_create_ms",
            *_per_database(
                "apply_100_ms_{db}",
                "apply_per_resource_ms_{db}",
                "apply_bare_ms_{db}",
                "apply_ratio_{db}",
            ),
        ),
    ),
    Module("scenarios", "scenarios.py", ("scenario_month_ms_sqlite", "scenario_month_ms_pg")),
    Module(
        "console",
        "console.py",
        tuple(
            f"{name}{suffix}"
            for suffix in ("", "_pg")
            for name in (
                "console_runs_page_ms",
                "console_runs_filtered_ms",
                "console_runs_unmatched_ms",
                "console_run_page_ms",
            )
        ),
    ),
    Module(
        "poll",
        "poll.py",
        tuple(
            f"{name}_{db}_0_1s"
            for db in ("sqlite", "postgres")
            for name in ("poll_latency_median", "poll_latency_max", "idle_cpu_pct")
        ),
    ),
)


@dataclass
class Outcome:
    """How one module's smoke run went: `failed` says why, empty if it passed."""

    module: Module
    seconds: float
    failed: str
    output: str

    @property
    def verdict(self) -> str:
        return "FAILED" if self.failed else "ok"


def missing(module: Module, output: str) -> list[str]:
    """The names `module` should have printed a `BENCH` line for and did not (a line whose
    value is not a number does not count)."""
    printed = []
    for line in output.splitlines():
        found = LINE.match(line)
        if found:
            try:
                float(found.group(2))
            except ValueError:
                continue
            printed.append(found.group(1))
    return [want for want in module.prints if not fnmatch.filter(printed, want)]


class Runner:
    """Runs modules, `jobs` at a time, each in a session of its own; keeps the sessions still
    running, to end them if the run is interrupted (a session of its own does not get the
    terminal's Ctrl-C)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.running: set[subprocess.Popen[bytes]] = set()

    def run(self, module: Module) -> Outcome:
        """Run `module` at its smoke size, its output in a file (a pipe could be held open by
        a process it leaves behind); on its timeout, end its session."""
        print(f"# smoke: {module.name} starts: {' '.join(module.command[1:])}", flush=True)
        began = time.monotonic()
        with tempfile.TemporaryFile("w+") as output:
            proc = subprocess.Popen(
                module.command,
                cwd=BENCH.parent,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.running.add(proc)
            try:
                code: int | None = proc.wait(module.timeout)
            except subprocess.TimeoutExpired:
                code = None
                end_session(proc)
            finally:
                self.running.discard(proc)
            seconds = time.monotonic() - began
            output.seek(0)
            said = output.read()
        if code is None:
            failed = f"still running after its timeout of {module.timeout:g} s, and was stopped"
        elif code != 0:
            failed = f"exited {code}"
        else:
            absent = missing(module, said)
            failed = f"printed no BENCH line for {', '.join(absent)}" if absent else ""
        outcome = Outcome(module, seconds, failed, said)
        print(f"# smoke: {module.name} {outcome.verdict} in {seconds:.1f} s", flush=True)
        return outcome

    def run_all(self, modules: Sequence[Module]) -> list[Outcome]:
        """Each of `modules`' outcomes, in their order; they start in that order, as soon
        as fewer than `jobs` run."""
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            try:
                return list(pool.map(self.run, modules))
            except KeyboardInterrupt:
                pool.shutdown(wait=False, cancel_futures=True)
                for proc in list(self.running):
                    end_session(proc)
                raise


def end_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to every process of `proc`'s session (it leads its own), as Ctrl-C would, so the
    module's `finally` blocks stop its workers and drop its databases; then SIGKILL to any
    left after fifteen seconds."""
    for sent, grace in ((signal.SIGINT, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sent)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
        return


def run_all(modules: Sequence[Module], jobs: int = JOBS) -> int:
    """Run `modules`, `jobs` at a time, print the summary, and return the exit code: 1 if any
    failed."""
    began = time.monotonic()
    outcomes = Runner(jobs).run_all(modules)
    total = time.monotonic() - began
    print(flush=True)
    for outcome in outcomes:
        print(f"{outcome.module.name:<14} {outcome.seconds:6.1f} s  {outcome.verdict}")
    failed = [o for o in outcomes if o.failed]
    print(
        f"{'total':<14} {total:6.1f} s  {len(outcomes) - len(failed)} of {len(outcomes)} ok "
        f"({jobs} at a time)",
        flush=True,
    )
    for outcome in failed:
        tail = "".join(f"    {line}\n" for line in outcome.output.splitlines()[-TAIL:])
        print(
            f"\nFAILED {outcome.module.name}: {outcome.failed}. The last lines of its "
            f"output:\n{tail or '    (no output)'}",
            file=sys.stderr,
        )
    if failed:
        names = "; ".join(f"{o.module.name} {o.failed}" for o in failed)
        print(f"\nsmoke run failed: {names}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    known = {module.name: module for module in MODULES}
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"the modules to run (all if none): {', '.join(known)}",
    )
    parser.add_argument(
        "--jobs", type=int, default=JOBS, help=f"modules run at once (default {JOBS})"
    )
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"no benchmark module {', '.join(unknown)}: name some of {', '.join(known)}")
    chosen = [known[name] for name in args.names] or MODULES
    sys.exit(run_all(chosen, max(1, args.jobs)))


if __name__ == "__main__":
    main()

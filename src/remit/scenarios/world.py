"""What one running scenario holds: its harness and clock, the runs and values it named, and
how it waits for the app to settle after each action."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from remit.app import App
from remit.core.clock import ManualClock
from remit.core.errors import AppError, RemitError
from remit.declare.workflows import Workflow
from remit.ops.scheduler import Fired
from remit.resources.workflows import DRIFT
from remit.scenarios.features import Step
from remit.scenarios.values import Names
from remit.testing import Harness

if TYPE_CHECKING:
    from remit.serve.fake_repo import FakeRepo

# How long a step waits for the app to settle before the scenario fails.
SETTLE_TIMEOUT = 30.0
# Statuses a run rests in until someone (or the clock) moves it.
RESTING = ("waiting", "sleeping", "paused")
# The most schedule instants one step may pass: each starts a run, and the scenario waits for
# every one of them to settle.
MOST_INSTANTS = 1000


class Mismatch(AssertionError):
    """A then found something other than it expected: `expected` and `actual` are the lines
    the failure shows as a diff (empty when the message says it all)."""

    def __init__(
        self, message: str, *, expected: Sequence[str] = (), actual: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.expected = list(expected)
        self.actual = list(actual)


class Refused(Exception):
    """The app refused an action a step took (a policy, a decision or a task refused it):
    what the next step may expect with `it is refused because ...`."""

    def __init__(self, error: RemitError) -> None:
        super().__init__(str(error))
        self.error = error


@contextlib.contextmanager
def acting() -> Iterator[None]:
    """Around what a step asks of the app: the app's refusal becomes `Refused`."""
    try:
        yield
    except RemitError as error:
        raise Refused(error) from error


@dataclass
class Refusal:
    """An action the app refused, kept for the next step to expect (`it is refused`)."""

    step: Step
    error: RemitError


def principal(who: str) -> str:
    """A person's short name as a principal (`ann` is `user:ann`); a principal as it is."""
    return who if ":" in who else f"user:{who}"


class World:
    """One scenario's run: the app on a harness and a manual clock, and what its steps named."""

    def __init__(self, app: App, harness: Harness, clock: ManualClock, *, app_name: str | None):
        self.app = app
        self.harness = harness
        self.clock = clock
        self.app_name = app_name
        self.names = Names()
        self.runs: dict[str, str] = {}  # name -> run id, in the order they started
        self.scheduled: list[Fired] = []  # oldest first
        self.refused: Refusal | None = None
        # The changes the scenario opened (name -> change id), and the repo at the forge's
        # fake they are of, once a step needed it (`changes.py`).
        self.changes: dict[str, str] = {}
        self.repo: FakeRepo | None = None

    # Runs the scenario named.

    def name_run(self, name: str, run_id: str) -> None:
        self.runs[name] = run_id
        self.names.keep_live(name, lambda: self.run_view(run_id))

    def run_id(self, name: str) -> str:
        if name not in self.runs:
            known = ", ".join(f"${n}" for n in self.runs) or "none yet"
            raise Mismatch(
                f"${name} is not a run this scenario started (its runs: {known}): start it "
                f"first, `When ann starts <workflow> as ${name}`"
            )
        return self.runs[name]

    def run_view(self, run_id: str) -> dict[str, Any]:
        """A run as `$name` shows it: its id, workflow, status, input, output and error."""
        run = self.harness.runs.get(run_id)
        return {
            "run_id": run.run_id,
            "workflow": run.workflow,
            "status": run.status,
            "attempt": run.attempt,
            "started_by": run.started_by,
            "input": run.input,
            "output": run.output,
            "error": run.error,
        }

    def workflow(self, name: str) -> str:
        """The workflow `name` names in this app: as it is, or with or without the app's
        prefix (`ar.chase-invoice` and `chase-invoice` are one workflow of the app `ar`)."""
        known = self.app.workflows
        candidates = [name]
        if self.app_name is not None:
            candidates += [name.removeprefix(f"{self.app_name}."), f"{self.app_name}.{name}"]
        for candidate in candidates:
            if candidate in known:
                return candidate
        return self.app.workflow(name).name  # raises, naming the workflows there are

    # Waiting for the app to settle.

    def settle(
        self, run_ids: Iterable[str] | None = None, *, moved: Mapping[str, int] | None = None
    ) -> None:
        """Wait until each run in `moved` has gone past its attempt there, then until every
        run (default: all the scenario's) and every run they started as children rests:
        finished, or waiting, sleeping or paused with its attempt over (a parent whose children
        have all ended is not resting: it is about to carry on)."""
        for run_id, attempt in (moved or {}).items():
            self.harness.wait_moved(run_id, attempt, timeout=SETTLE_TIMEOUT)
        roots = list(dict.fromkeys(self._every() if run_ids is None else run_ids))
        seen: dict[str, tuple[str, int]] | None = None
        every, _ = self._family(roots)
        while True:
            rested = {run_id: self._rest(run_id) for run_id in every}
            # A run that rested may have started children meanwhile, and a child that ended
            # after its parent rested may have moved the parent on: look again until nothing
            # new started or moved (with no children, nothing moves another on).
            every, parents = self._family(roots)
            if every == list(rested) and (not parents or rested == seen):
                return
            seen = rested

    def _every(self) -> list[str]:
        return [*self.runs.values(), *(fired.run_id for fired in self.scheduled)]

    def with_children(self, run_ids: Iterable[str]) -> list[str]:
        """`run_ids`, then the runs they started as children, and theirs, oldest first."""
        return self._family(run_ids)[0]

    def _family(self, run_ids: Iterable[str]) -> tuple[list[str], bool]:
        """`with_children`, and whether any of them started a child."""
        found = list(dict.fromkeys(run_ids))
        parents = False
        for run_id in found:  # grows as it goes
            children = self.harness.children(run_id)
            parents = parents or bool(children)
            found += [child.run_id for child in children if child.run_id not in found]
        return found, parents

    def _rest(self, run_id: str) -> tuple[str, int]:
        """Wait until the run rests; its status and attempt then."""
        while True:
            run = self.harness.wait(run_id, timeout=SETTLE_TIMEOUT, until=RESTING)
            if run.finished:
                return run.status, run.attempt
            self.harness.wait_attempt_ended(run_id, run.attempt, timeout=SETTLE_TIMEOUT)
            if run.status != "waiting":
                return run.status, run.attempt
            if self._children_ended(run_id):
                self.harness.wait_moved(run_id, run.attempt, timeout=SETTLE_TIMEOUT)
                continue
            # Its last child's end may have moved it on since it was read.
            now = self.harness.runs.get(run_id)
            if (now.status, now.attempt) == (run.status, run.attempt):
                return run.status, run.attempt

    def _children_ended(self, run_id: str) -> bool:
        """Whether the run waits on its attempt for child runs that have all ended."""
        for waiting in self.harness.runs.waiting(run_id):
            if waiting.kind == "children" and all(
                self.harness.runs.get(child).finished for child in waiting.children
            ):
                return True
        return False

    def scheduled_workflow(self, name: str) -> Workflow:
        """The workflow `name` names, which must run on a schedule."""
        workflow = self.app.workflows[self.workflow(name)]
        if workflow.trigger is None:
            scheduled = ", ".join(
                sorted(wf.name for wf in self.app.workflows.values() if wf.trigger is not None)
            )
            raise AppError(
                f"`{workflow.name}` runs on no schedule (the app's scheduled workflows: "
                f"{scheduled or 'none'}): give it `trigger=schedule(...)`, or name another"
            )
        return workflow

    def schedule_runs(self, workflow: str) -> list[Fired]:
        return [fired for fired in self.scheduled if fired.workflow == workflow]

    def pass_time(self, seconds: float, *, drift: bool = False) -> None:
        """Move the clock on by `seconds`. Every schedule instant on the way fires once, in
        order, the clock standing at it; every run that falls due (a sleep ending, a gate
        expiring) carries on, and each step waits for the runs to settle again.

        The resources' drift check (`drift_schedule`) is remit's, not the app's behaviour: it
        fires as time passes only when `drift` (`the schedule drift fires`)."""
        now = self.clock.now()
        until = now + timedelta(seconds=seconds)
        instants: set[datetime] = set()
        for wf in self.app.workflows.values():
            if wf.trigger is None or (wf.name == DRIFT and not drift):
                continue
            found = wf.trigger.between(now, until, limit=MOST_INSTANTS + 1)
            if len(found) > MOST_INSTANTS:
                raise AppError(
                    f"more than {MOST_INSTANTS} instants of the schedule of `{wf.name}` "
                    f"({wf.trigger.cron}) fall in the {_span(seconds)} that pass, and a "
                    "scenario fires each of them: let less time pass in one step"
                )
            instants.update(found)
        for at in sorted(instants):
            self._advance((at - self.clock.now()).total_seconds())
            self._fire(at)
        self._advance((until - self.clock.now()).total_seconds())

    def _fire(self, at: datetime) -> None:
        """The clock stands at `at`: start the runs of the schedules due there (the worker's
        sweep may start them first: each instant starts one run whoever starts it) and wait
        for them to settle."""
        fired = [f for f in self.harness.fire_schedules() if f.at == at]
        # A workflow missing here had its instant refused by its input model (logged).
        for each in sorted(fired, key=lambda f: f.workflow):
            self.scheduled.append(each)
        self.settle([each.run_id for each in fired])

    def _advance(self, seconds: float) -> None:
        """Move the clock on, and wait for every run that fell due (a sleep ending, a gate
        expiring) to carry on and settle again."""
        until = self.clock.now().timestamp() + seconds
        mine = set(self.with_children(self._every()))
        due = [
            deadline
            for deadline in self.harness.deadlines(limit=1000)
            if deadline.run_id in mine and deadline.at.timestamp() <= until
        ]
        moved = {
            d.run_id: self.harness.runs.get(d.run_id).attempt
            for d in due
            if d.kind in ("wake", "expiry", "message")
        }
        self.clock.advance(seconds)
        for deadline in due:
            if deadline.kind == "timeout":
                self.harness.wait(deadline.run_id, timeout=SETTLE_TIMEOUT)
        self.settle(moved=moved)

    def set_time(self, moment: float) -> None:
        """Move the clock to `moment` (a Unix time), which must not be before now."""
        now = self.clock.now().timestamp()
        if moment < now - 1e-6:
            raise AppError(
                "the scenario sets the time back: a scenario's time only moves on. Set it "
                "once at the start (`Given it is ...`), then let time pass (`When 2 days pass`)"
            )
        self.pass_time(moment - now)

    def expect_refusal(self) -> Refusal:
        refused, self.refused = self.refused, None
        if refused is None:
            raise Mismatch("expected the step before to be refused, and it was not")
        return refused


def _span(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds:g} seconds"

"""What a run recorded at each position, and the check that new code still matches it.

Each `ctx` operation of a run takes the next *position* (DBOS's step id): `ctx.step`, an op
call, a gate, a sleep, a taken `ctx.patch`. A run that resumes on a new attempt (a decision, a
wake, a task's answer, a resume after pause, a redeploy, a retry) runs its workflow function
again from the top on whatever code workers run now: the positions before its *resume point*
are copied from the attempt before and answer from that record, and the resume point itself is
where it carries on.

Before an operation runs at a position the run has passed or stands at, it is compared with
what the run recorded there:

- DBOS's record of the step (its name), for every copied position;
- remit's own rows, which outlive a step cut off mid-call: the ledger (op and idempotency key),
  the approvals (the gate's key), the timers (a long sleep), the waits (a message's topic, or
  children) and the children (a child's start and its key).

remit's rows are compared at every position the run reached, and so are the steps the attempt
before finished past the resume point (a retry from an earlier step runs them again). A
difference raises `CodeChanged` before anything runs at that position, and the run fails
naming the position, what it recorded there and what the code does now. `ctx.patch` is False
at a position that holds any record but that patch's marker, and at the resume point of a run
carried on after it was cut off (a step cut off there by a kill records nothing, but it may
have begun), so a run keeps its old path past the change. Positions past that are the run's future: new code runs
there freely.

The same check serves the live attempt (`Journal`, loaded when an attempt begins) and the
replay of `remit deploy check` (`deploy.py`), so the check predicts what a resume will do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa

from remit.core.errors import CodeChanged
from remit.core.schema import app_writes, approvals, children, ledger, timers, waits

Kind = Literal["step", "op", "approval", "sleep", "patch", "message", "start", "children"]

# The DBOS statuses of an attempt that was cut off mid-way rather than ending at a step's end:
# its worker died (still PENDING, or given up), or it was cancelled (a move to the next attempt
# of a run whose version no worker runs cancels it, as `remit cancel` does).
CUT_OFF = frozenset({"PENDING", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
PATCH_PREFIX = "DBOS.patch-"  # how DBOS names the marker of a taken `ctx.patch`
SHORT_SLEEP = "DBOS.sleep"  # how DBOS names a sleep that holds its thread
WAIT_FOR_PREFIX = "wait_for:"  # a `ctx.wait_for` step: `wait_for:<topic>`
START_PREFIX = "start:"  # a `ctx.start` step: `start:<workflow>`
WAIT_CHILDREN = "wait:children"  # a `ctx.wait` step


@dataclass(frozen=True)
class Mark:
    """What one operation is at its position: its kind, the name DBOS records it under, and
    the key that must not move (an op's idempotency key, a gate's approval key)."""

    kind: Kind
    name: str
    key: str | None = None
    # An op call's input hash (the ledger's): compared only where the call runs again.
    input_hash: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        if self.kind == "op":
            return f"`{self.name}` (an op call, key {self.key})"
        if self.kind == "approval":
            return f"the approval gate `{self.key}`"
        if self.kind == "sleep":
            return _recorded_name(self.name)
        if self.kind == "patch":
            return f"`ctx.patch({self.name.removeprefix(PATCH_PREFIX)!r})`"
        if self.kind in ("message", "start", "children"):
            return _recorded_name(self.name)
        return f"`{self.name}` (a step)"


def step_mark(name: str) -> Mark:
    return Mark("step", name)


def op_mark(op_id: str, key: str, input_hash: str | None = None) -> Mark:
    return Mark("op", op_id, key, input_hash)


def gate_mark(key: str) -> Mark:
    return Mark("approval", f"approval:{key}", key)


def sleep_mark(*, short: bool = False) -> Mark:
    return Mark("sleep", SHORT_SLEEP if short else "sleep")


def message_mark(topic: str) -> Mark:
    return Mark("message", f"{WAIT_FOR_PREFIX}{topic}", topic)


def start_mark(workflow: str, key: str) -> Mark:
    return Mark("start", f"{START_PREFIX}{workflow}", key)


def children_mark() -> Mark:
    return Mark("children", WAIT_CHILDREN)


def _recorded_name(name: str) -> str:
    """A DBOS step name as a person reads it."""
    if name.startswith(WAIT_FOR_PREFIX):
        return f"a wait for a message on `{name.removeprefix(WAIT_FOR_PREFIX)}`"
    if name.startswith(START_PREFIX):
        return f"the start of a child run of `{name.removeprefix(START_PREFIX)}`"
    if name == WAIT_CHILDREN:
        return "a wait for child runs"
    if name.startswith(PATCH_PREFIX):
        return f"`ctx.patch({name.removeprefix(PATCH_PREFIX)!r})`"
    if name.startswith("approval:"):
        return f"the approval gate `{name.removeprefix('approval:')}`"
    if name == "sleep":
        return "a sleep that suspends the run (longer than REMIT_SUSPEND_AFTER)"
    if name == SHORT_SLEEP:
        return "a sleep in its thread (up to REMIT_SUSPEND_AFTER)"
    return f"`{name}`"


@dataclass
class Journal:
    """A run's record, position by position, and what the code has done against it so far.

    `steps` are DBOS's step names: the attempt's copied (or own) checkpoints, before
    `resume_at`, and the steps the attempt before it finished past that point (a retry from an
    earlier step runs those again: they stay what they were). `marks` are remit's rows that
    carry a position, at every position the run reached. Where DBOS holds a step, its record is
    the run's word for that position; remit's row there is compared too when it is of the same
    step (it adds the key). A position with no record is the run's future.
    """

    run_id: str
    steps: Mapping[int, str] = field(default_factory=dict)
    marks: Mapping[int, Mark] = field(default_factory=dict)
    resume_at: int = 1
    # The attempt carries the run on from where it was cut off (its worker died, or it was
    # cancelled, mid-way): a step at the resume point may have begun, though nothing is
    # recorded there. False for a retry after a failure or a resume after a pause or a wait,
    # which stopped at a step's end.
    cut: bool = False
    reached: int = 0
    # The mismatch raised, kept: code that caught it (`gather(..., return_exceptions=True)`)
    # still fails when it ends.
    changed: CodeChanged | None = None

    @classmethod
    def empty(cls, run_id: str) -> Journal:
        """A first attempt's journal: nothing is recorded before it, so nothing is checked."""
        return cls(run_id, resume_at=0)

    @classmethod
    def of(
        cls,
        run_id: str,
        steps: Mapping[int, str],
        marks: Mapping[int, Mark],
        resume_at: int | None = None,
        *,
        passed: Mapping[int, str] | None = None,
        cut: bool = False,
    ) -> Journal:
        """The journal of an attempt whose DBOS record is `steps`: it resumes after the last
        of them unless `resume_at` says where. `passed` are the steps the attempt before it
        finished; those past the resume point are kept."""
        at = 1 + max(steps, default=0) if resume_at is None else resume_at
        known = {p: n for p, n in steps.items() if p < at}
        known.update({p: n for p, n in (passed or {}).items() if p >= at})
        return cls(run_id, steps=known, marks=dict(marks), resume_at=at, cut=cut)

    def check(self, position: int, mark: Mark) -> None:
        """Raise `CodeChanged` if `mark` is not what the run recorded at `position`."""
        self.reached = max(self.reached, position)
        name = self.steps.get(position)
        recorded = self.marks.get(position)
        if name is not None:
            # remit's row there, if it is of DBOS's step, says more of it (its key).
            same = recorded if recorded is not None and recorded.name == name else None
            if name != mark.name:
                raise self._changed(
                    position, mark, same.describe() if same else _recorded_name(name)
                )
            if same is not None and same != mark:
                raise self._changed(position, mark, same.describe())
            if same is not None and position >= self.resume_at:
                self._same_input(position, same, mark)
            return
        if recorded is not None and recorded != mark:
            raise self._changed(position, mark, recorded.describe())
        if recorded is not None and position >= self.resume_at:
            self._same_input(position, recorded, mark)

    def _same_input(self, position: int, recorded: Mark, mark: Mark) -> None:
        """A call the run began, which runs again here, is made on the input it began with:
        its key belongs to that input, and the ledger refuses it other input."""
        if recorded.input_hash is None or mark.input_hash is None:
            return
        if recorded.input_hash == mark.input_hash:
            return
        self.changed = CodeChanged(
            f"run {self.run_id}: its step {position} began {recorded.describe()} on other input "
            "than it is given now (the code changed, or what the input is computed from did, "
            "such as a read made afresh by a retry from an earlier step). Nothing ran at that "
            "step. A call a run began carries on with the input it began with: give runs that "
            "had reached it the old input, e.g. `new if ctx.patch('name') else old` just before "
            "the call, which is False for runs that had reached that point",
            run_id=self.run_id,
            step=position,
            recorded=f"{recorded.describe()} with input {recorded.input_hash[:12]}",
            now=f"{mark.describe()} with input {mark.input_hash[:12]}",
        )
        raise self.changed

    def passed(self, position: int) -> None:
        """Note that the code took `position` (a taken `ctx.patch`)."""
        self.reached = max(self.reached, position)

    def patch_taken(self, position: int, name: str) -> bool | None:
        """Whether `ctx.patch(name)` at `position` is taken: True where the run recorded that
        patch's marker there, False where it recorded anything else (it had passed that point,
        or stands at it), None where it recorded nothing (DBOS's own record decides).

        The resume point of an attempt that carries on a run that was cut off is False too,
        recorded or not: the run had got that far on the code before, and a step cut off there
        (killed mid-call, so nothing is recorded) may have begun. New code does not run before
        it. Where the run stopped at a step's end (a failure it is retried after, a pause),
        nothing began there, and the patch is taken.
        """
        recorded = self.steps.get(position)
        if recorded is not None:
            return recorded == PATCH_PREFIX + name
        if position in self.marks or (self.cut and 0 < position <= self.resume_at):
            return False
        return None

    def finish(self) -> None:
        """At the end of the workflow: raise the mismatch found, if the code caught it, and
        `CodeChanged` if the code ended before a position the run had passed."""
        if self.changed is not None:
            raise self.changed
        left = [p for p in sorted({*self.steps, *self.marks}) if self.reached < p <= self.resume_at]
        if not left:
            return
        position = left[0]
        name = self.steps.get(position)
        recorded = self.marks.get(position)
        what = _recorded_name(name) if name is not None else recorded.describe() if recorded else ""
        self.changed = CodeChanged(
            f"the workflow's code changed under run {self.run_id}: it now ends before its step "
            f"{position}, where the run recorded {what}. Nothing more ran. Keep the steps a "
            "run has passed, and guard changes with `if ctx.patch('name'):`, which is False "
            "for runs that had passed that point",
            run_id=self.run_id,
            step=position,
            recorded=what,
            now="the end of the workflow",
        )
        raise self.changed

    def _changed(self, position: int, mark: Mark, recorded: str) -> CodeChanged:
        self.changed = CodeChanged(
            f"the workflow's code changed under run {self.run_id}: its step {position} ran "
            f"{recorded}, and the code now runs {mark.describe()} there. Nothing ran at that "
            "step. Keep the steps a run has passed in their order, and guard a new one with "
            "`if ctx.patch('name'):`, which is False for runs that had passed that point",
            run_id=self.run_id,
            step=position,
            recorded=recorded,
            now=mark.describe(),
        )
        return self.changed


def load_marks(conn: sa.Connection, run_id: str) -> dict[int, Mark]:
    """remit's rows of `run_id` that carry a position: its op calls (ledger), gates, long
    sleeps, waits, children and transactions' records."""
    return load_marks_of(conn, [run_id]).get(run_id, {})


def load_marks_of(conn: sa.Connection, run_ids: list[str]) -> dict[str, dict[int, Mark]]:
    """`load_marks` for many runs at once, one statement for each 500 of them. A position with
    rows of two kinds keeps the ledger's (it cannot happen: one position is one operation)."""
    found: dict[str, dict[int, Mark]] = {}
    for at in range(0, len(run_ids), 500):
        rows = sorted(conn.execute(_marks(run_ids[at : at + 500])), key=lambda row: row.kind)
        for row in rows:
            found.setdefault(row.run_id, {})[row.step_id] = _mark(row)
    return found


def _text(value: Any = None) -> Any:
    return sa.literal(value, sa.String) if value is not None else sa.null().cast(sa.String)


def _marks(chunk: list[str]) -> sa.CompoundSelect[Any]:
    """Every row of `chunk`'s runs that carries a position, as (kind, run, step, a, b, c), the
    kinds numbered so that the ledger's come last (and win)."""
    return sa.union_all(
        # A transaction's record (`ctx.transaction`): its writes committed at that position,
        # whether or not DBOS lived to record its step.
        sa.select(
            sa.literal(0).label("kind"),
            app_writes.c.run_id,
            app_writes.c.position.label("step_id"),
            app_writes.c.name.label("a"),
            _text().label("b"),
            _text().label("c"),
        ).where(app_writes.c.run_id.in_(chunk)),
        sa.select(
            sa.literal(1),
            timers.c.run_id,
            timers.c.step_id,
            _text().label("a"),
            _text().label("b"),
            _text().label("c"),
        ).where(timers.c.run_id.in_(chunk)),
        sa.select(
            sa.literal(2), waits.c.run_id, waits.c.step_id, waits.c.kind, waits.c.topic, _text()
        ).where(waits.c.run_id.in_(chunk)),
        sa.select(
            sa.literal(3),
            children.c.parent_run_id,
            children.c.step_id,
            children.c.workflow,
            children.c.key,
            _text(),
        ).where(children.c.parent_run_id.in_(chunk)),
        sa.select(
            sa.literal(4),
            approvals.c.run_id,
            approvals.c.step_id,
            approvals.c.key,
            _text(),
            _text(),
        ).where(approvals.c.run_id.in_(chunk)),
        sa.select(
            sa.literal(5),
            ledger.c.run_id,
            ledger.c.step_id,
            ledger.c.op_id,
            ledger.c.idempotency_key,
            ledger.c.input_hash,
        ).where(
            ledger.c.run_id.in_(chunk),
            # A read that never answered (one with a cost leaves a row as it starts) is not a
            # step the run passed: the code there may change.
            sa.not_(
                sa.and_(ledger.c.effect == "read", ledger.c.status.in_(("started", "abandoned")))
            ),
        ),
    )


def _mark(row: Any) -> Mark:
    if row.kind == 0:
        return step_mark(row.a)
    if row.kind == 1:
        return sleep_mark()
    if row.kind == 2:
        return message_mark(row.b) if row.a == "message" else children_mark()
    if row.kind == 3:
        return start_mark(row.a, row.b)
    if row.kind == 4:
        return gate_mark(row.a)
    return op_mark(row.a, row.b, row.c)


def finished(name: str, output: Any, error: Any) -> bool:
    """Whether a recorded step was passed: it did not fail, and it is not a gate still pending,
    a sleep not yet over, a wait still waiting (or one whose message or child failed the run),
    or a call waiting at its task (each of those the run stands at)."""
    if error is not None:
        return False
    if not isinstance(output, dict):
        return True
    if name.startswith("approval:"):
        return output.get("status") != "pending"
    if name.startswith(WAIT_FOR_PREFIX):
        # A message it refused failed the run: a retry waits there again, for the next one.
        return output.get("status") not in ("pending", "refused")
    if name == WAIT_CHILDREN:
        # A child that failed failed the run: a retry reads the children's ends again (a child
        # retried meanwhile may have ended done).
        ends = output.get("children") or []
        return output.get("status") == "done" and all(c.get("status") == "done" for c in ends)
    if name == "sleep":
        return bool(output.get("over"))
    return "error" not in output


def passed_steps(steps: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """Of an attempt's DBOS steps (`list_workflow_steps`), the ones it finished, by position:
    what a later attempt of its run must not change."""
    return {
        step["function_id"]: step["function_name"]
        for step in steps
        if finished(step["function_name"], step["output"], step["error"])
    }


def after_last_finished(steps: Iterable[tuple[int, str, Any, Any]]) -> int:
    """The position after a run's last finished step: where a retry carries it on."""
    return 1 + max(
        (position for position, name, output, error in steps if finished(name, output, error)),
        default=0,
    )

"""What a run's step timeline shows, worked out before anything is drawn (`svg.py` draws it).

Each step is named in the words its workflow wrote: `approval refund`, `sleep 3 days`, `patch
acknowledge`, `waits for paid`, `starts refund-line`, `waits for its children`, `publishes
progress`, rather than the names remit and DBOS record (`approval:refund`, `sleep`,
`DBOS.sleep`, `DBOS.patch-acknowledge`, `wait_for:paid`, `start:refund-line`, `wait:children`,
`publish:progress`); an op call and a `ctx.step` are recorded under their own names. A step the
run then waited at has its wait beside it: a gate's from its opening to its decision or expiry,
a sleep's up to its wake, a call whose outcome is unknown up to the answer of its task, a wait
for a message or for child runs up to the attempt that carried on from it, or each up to now
while the run still waits.

The time scale keeps a step of 5 ms visible beside a wait of 3 days. A stretch in which no step
runs, a wait or (a second or more) time between attempts, that would take more than twice a
break's width is shortened to a break of fixed width: not to scale, its duration written on the
wait. Between breaks, time is to scale, each run of it at a scale of its own.

Pure: steps, approvals and tasks in; rows and a scale out.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from remit.execution.journal import PATCH_PREFIX, SHORT_SLEEP

if TYPE_CHECKING:
    from remit.ops.runs import Step
    from remit.people.approvals import Approval
    from remit.people.tasks import Task

GATE_PREFIX = "approval:"
MESSAGE_PREFIX = "wait_for:"  # `ctx.wait_for(topic)`
START_PREFIX = "start:"  # `ctx.start(workflow, ...)`
PUBLISH_PREFIX = "publish:"  # `ctx.publish(key, ...)`
CHILDREN_WAIT = "wait:children"  # `ctx.wait`, `ctx.wait_all`
LONG_SLEEP = "sleep"  # remit's own step of a sleep that suspends the run until its timer is due

_SUMMARY_CHARS = 160

# Units of time: (short name, singular, plural, milliseconds).
_SECOND, _MINUTE, _HOUR, _DAY = 1000, 60_000, 3_600_000, 86_400_000
_UNITS = (
    ("d", "day", "days", _DAY),
    ("h", "hour", "hours", _HOUR),
    ("min", "minute", "minutes", _MINUTE),
    ("s", "second", "seconds", _SECOND),
)
# Tick spacings to choose from, in milliseconds: the first giving at most `most` ticks.
_SPACINGS = (
    *(1, 2, 5, 10, 20, 50, 100, 200, 500),
    *(n * _SECOND for n in (1, 2, 5, 10, 15, 30)),
    *(n * _MINUTE for n in (1, 2, 5, 10, 15, 30)),
    *(n * _HOUR for n in (1, 2, 3, 6, 12)),
    *(n * _DAY for n in (1, 2, 7, 14, 28, 56, 91, 182, 364)),
)

# The scale: a stretch with no wait in it is shortened only if it lasts `_BREAK_AFTER` ms or
# more. A shortened one is `_BREAK_W` pixels wide, less when there are so many that they would
# take more than `_BREAKS_SHARE` of the plot (never under `_BREAK_MIN`).
_BREAK_AFTER = _SECOND
_BREAK_W = 90
_BREAK_MIN = 36
_BREAKS_SHARE = 0.6

WaitKind = Literal["gate", "sleep", "task", "message", "children"]


def duration(ms: int, *, words: bool = False) -> str:
    """A span of milliseconds as a person reads it, to two units: `350 ms`, `1.5 s`,
    `4 min 10 s`, `21 d`, `3 d 2 h`; with `words`, `3 days`, `1 minute 30 seconds`."""
    ms = max(0, int(ms))
    if ms < _SECOND:
        return f"{ms} milliseconds" if words else f"{ms} ms"
    if ms < 10 * _SECOND and ms % _SECOND:
        return f"{ms / _SECOND:.1f} seconds" if words else f"{ms / _SECOND:.1f} s"
    parts: list[str] = []
    rest = ms // _SECOND * _SECOND
    for short, one, many, size in _UNITS:
        if rest >= size:
            count = rest // size
            parts.append(f"{count} {(one if count == 1 else many) if words else short}")
            rest %= size
        elif parts:
            break  # `1 d 0 h 5 min` reads as `1 d`: two units that are next to each other
        if len(parts) == 2:
            break
    return " ".join(parts)


def ticks(span_ms: int, *, most: int = 8) -> list[tuple[int, str]]:
    """The axis ticks of a span: (offset in ms, label), from 0 to at least the span's end, with
    a spacing that gives at most `most` of them."""
    span_ms = max(1, span_ms)
    most = max(1, most)
    spacing = next((s for s in _SPACINGS if span_ms / s <= most), None)
    if spacing is None:  # more than `most` years: years it is
        spacing = math.ceil(span_ms / most / (364 * _DAY)) * 364 * _DAY
    count = math.ceil(span_ms / spacing)
    return [(i * spacing, "0" if i == 0 else duration(i * spacing)) for i in range(count + 1)]


def label(step: Step, planned_ms: int | None = None) -> str:
    """The step as its workflow wrote it: `approval refund` for `ctx.approval("refund", ...)`,
    `sleep 3 days` for `ctx.sleep(timedelta(days=3))` (`planned_ms`: how long it was to
    sleep), `patch acknowledge` for a taken `ctx.patch("acknowledge")`, `waits for paid` for
    `ctx.wait_for("paid")`, `starts refund-line` for `ctx.start("refund-line", ...)`, `waits
    for its children` for `ctx.wait` and `ctx.wait_all`, `publishes progress` for
    `ctx.publish("progress", ...)`; an op call and a `ctx.step` by their own names."""
    name = step.name
    if name.startswith(GATE_PREFIX):
        return f"approval {name.removeprefix(GATE_PREFIX)}"
    if name.startswith(PATCH_PREFIX):
        return f"patch {name.removeprefix(PATCH_PREFIX)}"
    if name.startswith(MESSAGE_PREFIX):
        return f"waits for {name.removeprefix(MESSAGE_PREFIX)}"
    if name.startswith(START_PREFIX):
        return f"starts {name.removeprefix(START_PREFIX)}"
    if name == CHILDREN_WAIT:
        return "waits for its children"
    if name.startswith(PUBLISH_PREFIX):
        return f"publishes {name.removeprefix(PUBLISH_PREFIX)}"
    if name in (SHORT_SLEEP, LONG_SLEEP):
        return "sleep" if planned_ms is None else f"sleep {duration(planned_ms, words=True)}"
    return name


@dataclass(frozen=True)
class Wait:
    """What a run waited for after one of its steps: at a gate, in a sleep, on a task (a call
    whose outcome a person must give), for a message or for its child runs, from `start` to
    `end` (epoch ms). `open` while it still waits: its end is now. `note` says what it waits
    for or came to."""

    kind: WaitKind
    start: int
    end: int
    open: bool
    note: str
    # When an open wait ends by itself (epoch ms): a sleep's wake, a gate's expiry, a wait for
    # a message timing out.
    due: int | None = None

    @property
    def took(self) -> int:
        return self.end - self.start

    def short(self) -> str:
        """What its bar says: `12 s`, `5 s so far, wakes in 2 d 23 h`."""
        if not self.open:
            return duration(self.took)
        said = f"{duration(self.took)} so far"
        if self.due is not None and self.due > self.end:
            ends = {"sleep": "wakes", "message": "times out"}.get(self.kind, "expires")
            said += f", {ends} in {duration(self.due - self.end)}"
        return said

    def words(self) -> str:
        """`waited at the gate for 12 s`, `sleeping for 5 s so far, wakes in 2 d 23 h`."""
        doing = {
            "gate": ("waiting at the gate", "waited at the gate"),
            "sleep": ("sleeping", "slept"),
            "task": ("waiting for the task's answer", "waited for the task's answer"),
            "message": ("waiting for a message", "waited for a message"),
            "children": ("waiting for its child runs", "waited for its child runs"),
        }[self.kind]
        return f"{doing[0] if self.open else doing[1]} for {self.short()}"


@dataclass(frozen=True)
class Row:
    """One step of one attempt, as the timeline draws it: `kinds` are its rectangle's classes
    (`ran` or `copied`, and `failed`, `open`), `start` to `end` its time (epoch ms; a sleep's
    step is the instant it began, its time being the wait's), and `wait` what followed."""

    step: Step
    label: str
    kinds: tuple[str, ...]
    start: int
    end: int
    summary: str | None
    wait: Wait | None = None

    @property
    def open(self) -> bool:
        return "open" in self.kinds

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.start / 1000, UTC)

    def words(self) -> str:
        """What the step was, in words: `ran for 3 ms`, `copied from the attempt before`,
        `failed`, `not finished`, and what it then waited for."""
        said = (
            "not finished"
            if self.open
            else "failed"
            if "failed" in self.kinds
            else "copied from the attempt before"
            if self.step.copied
            else "ran"
        )
        if self.end > self.start:
            said += f" for {duration(self.end - self.start)}" + (" so far" if self.open else "")
        return said if self.wait is None else f"{said}; {self.wait.words()}"


def rows(
    steps: Sequence[Step],
    *,
    now_ms: int,
    finished_ms: int | None = None,
    approvals: Iterable[Approval[Any]] = (),
    tasks: Iterable[Task] = (),
) -> list[Row]:
    """The timeline's rows of a run's steps, attempt by attempt. `finished_ms`: when the run
    finished (None: it has not, and what is open is drawn up to `now_ms`). `approvals` and
    `tasks` are the run's, which say when a gate was decided and a task answered."""
    gates = {gate.step_id: gate for gate in approvals}
    answers = {task.step_id: task for task in tasks}
    # When a later attempt took each position up again: a wait of the attempt before ends then.
    again: dict[int, list[tuple[int, int]]] = {}
    planned: dict[int, int] = {}
    for step in steps:
        if not step.copied and step.started_ms is not None:
            again.setdefault(step.function_id, []).append((step.attempt, step.started_ms))
        if step.function_id not in planned and step.started_ms is not None:
            until = _sleep_until(step)
            if until is not None:
                planned[step.function_id] = until - step.started_ms
    stop = now_ms if finished_ms is None else min(now_ms, finished_ms)
    found: list[Row] = []
    last = None
    for step in steps:
        start = step.started_ms if step.started_ms is not None else last
        if start is None:
            start = step.finished_ms if step.finished_ms is not None else stop
        output, error = step.summary(_SUMMARY_CHARS)
        waiting = None if step.copied else _waits_at(step)
        kinds = ["copied" if step.copied else "ran"]
        if error is not None and waiting != "task":
            kinds.append("failed")
        # A later attempt that took the position up again ends what this one left open there.
        taken_up = min(
            (at for attempt, at in again.get(step.function_id, []) if attempt > step.attempt),
            default=None,
        )
        if step.finished_ms is None:
            kinds.append("open")
            end = max(start, stop if taken_up is None else min(stop, taken_up))
        else:
            end = max(start, step.finished_ms)
        if step.name in (SHORT_SLEEP, LONG_SLEEP):
            end = start  # the step only set the sleep going: the time is the wait's
        wait = None
        if waiting is not None:
            wait = _wait(
                waiting,
                step,
                begins=end,
                ends=[taken_up, finished_ms],
                now_ms=now_ms,
                gate=gates.get(step.function_id),
                task=answers.get(step.function_id),
            )
        found.append(
            Row(
                step,
                label(step, planned.get(step.function_id)),
                tuple(kinds),
                start,
                end,
                error if error is not None else output,
                wait,
            )
        )
        last = max(end, wait.end if wait is not None else end)
    return found


def _waits_at(step: Step) -> WaitKind | None:
    """What the run waited for after this step, if it stopped there: a gate still pending when
    the step ran, a sleep not over, a call whose outcome a task asks a person for, a message
    not come yet, or child runs not ended yet."""
    output = step.output
    if step.name == SHORT_SLEEP:
        return "sleep"
    if not isinstance(output, dict):
        return None
    if step.name.startswith(GATE_PREFIX):
        return "gate" if output.get("status") == "pending" else None
    if step.name.startswith(MESSAGE_PREFIX):
        return "message" if output.get("status") == "pending" else None
    if step.name == CHILDREN_WAIT:
        return "children" if output.get("status") == "pending" else None
    if step.name == LONG_SLEEP:
        return None if output.get("over") else "sleep"
    error = output.get("error")
    if isinstance(error, dict) and error.get("kind") == "uncertain" and error.get("task_id"):
        return "task"
    return None


def _sleep_until(step: Step) -> int | None:
    """When a sleep's step said it would wake (epoch ms): a long sleep's timer, or the end DBOS
    recorded for a short one."""
    output = step.output
    if step.name == SHORT_SLEEP and isinstance(output, int | float):
        return int(output * 1000)
    if step.name == LONG_SLEEP and isinstance(output, dict) and output.get("wake_at"):
        try:
            return int(datetime.fromisoformat(str(output["wake_at"])).timestamp() * 1000)
        except ValueError:
            return None
    return None


def _wait(
    kind: WaitKind,
    step: Step,
    *,
    begins: int,
    ends: list[int | None],
    now_ms: int,
    gate: Approval[Any] | None,
    task: Task | None,
) -> Wait:
    """The wait after `step`: until its own end (a decision, an answer, a short sleep's end),
    a later attempt taking the position up again (a message come, children ended, a timeout
    passed), or the run's end, whichever came first; up to now while none has."""
    ends = list(ends)
    note = ""
    due = None
    if kind == "gate":
        if gate is not None and gate.status != "pending":
            ends.append(_ms(gate.decided_at))
            by = f" by {gate.decided_by} via {gate.decided_via}" if gate.decided_by else ""
            note = f"{gate.id} {gate.status}{by}"
        elif gate is not None:
            expiry = "" if gate.expires_at is None else f", expires {_when(gate.expires_at)}"
            note = f"{gate.id} pending{expiry}"
            due = _ms(gate.expires_at)
    elif kind == "task":
        if task is not None and task.status != "open":
            ends.append(_ms(task.resolved_at))
            note = f"{task.id} {task.status}" + (
                f" by {task.resolved_by}" if task.resolved_by else ""
            )
        elif task is not None:
            note = f"{task.id} open: did {task.op_id} happen?"
    elif kind == "message":
        output = step.output if isinstance(step.output, dict) else {}
        deadline = _moment(output.get("deadline"))
        note = f"a message on {output.get('topic') or step.name.removeprefix(MESSAGE_PREFIX)}"
        if deadline is not None:
            note += f", times out {_when(deadline)}"
            due = _ms(deadline)
    elif kind == "children":
        output = step.output if isinstance(step.output, dict) else {}
        left = [str(each) for each in output.get("waiting_for") or []]
        note = f"{len(left)} child {'run' if len(left) == 1 else 'runs'}: {', '.join(left)}"
    else:
        until = _sleep_until(step)
        if until is not None:
            note = f"due to wake {_when(datetime.fromtimestamp(until / 1000, UTC))}"
            due = until
            if step.name == SHORT_SLEEP and until <= now_ms:
                ends.append(until)
    known = [at for at in ends if at is not None]
    if not known:
        return Wait(kind, begins, max(begins, now_ms), True, note, due)
    return Wait(kind, begins, max(begins, min(known)), False, note)


def _moment(text: Any) -> datetime | None:
    """An ISO time a step's output holds, or None."""
    try:
        return None if text is None else datetime.fromisoformat(str(text))
    except ValueError:
        return None


def _ms(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1000)


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- the time scale ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """A stretch of the axis between two moments the timeline marks: `start` to `end` (epoch
    ms) drawn from `x0` to `x1`, at the plot's one linear scale or, `shortened`, as a break."""

    start: int
    end: int
    x0: float
    x1: float
    shortened: bool


@dataclass(frozen=True)
class Scale:
    """Where each moment of the timeline is drawn: its pieces, left to right."""

    pieces: tuple[Piece, ...]

    @property
    def t0(self) -> int:
        return self.pieces[0].start

    @property
    def t1(self) -> int:
        return self.pieces[-1].end

    @functools.cached_property
    def _starts(self) -> list[int]:
        return [piece.start for piece in self.pieces]

    def x(self, at: int) -> float:
        """The x of the moment `at` (epoch ms), clamped to the plot."""
        piece = self.pieces[max(0, bisect.bisect_right(self._starts, at) - 1)]
        if at >= piece.end:
            return piece.x1
        if at <= piece.start:
            return piece.x0
        return piece.x0 + (at - piece.start) / (piece.end - piece.start) * (piece.x1 - piece.x0)

    def segments(self) -> list[tuple[Piece, ...]]:
        """The runs of linear pieces between breaks, each at the plot's scale."""
        found: list[tuple[Piece, ...]] = []
        current: list[Piece] = []
        for piece in self.pieces:
            if piece.shortened:
                if current:
                    found.append(tuple(current))
                current = []
            else:
                current.append(piece)
        if current:
            found.append(tuple(current))
        return found

    def breaks(self) -> list[Piece]:
        return [piece for piece in self.pieces if piece.shortened]


def scale(timeline: Sequence[Row], *, left: float, plot: float) -> Scale:
    """The scale of `timeline` over `plot` pixels from `left`: linear, but for the longest
    stretches in which no step runs, each shortened to a break while, drawn to scale, it would
    be more than twice a break's width: a wait (a gate, a sleep, a task), or time between
    attempts of a second or more."""
    marks = sorted(
        {row.start for row in timeline}
        | {row.end for row in timeline}
        | {at for row in timeline if row.wait for at in (row.wait.start, row.wait.end)}
    )
    if len(marks) < 2:
        at = marks[0] if marks else 0
        return Scale((Piece(at, at + 1, left, left + plot, False),))
    stretches = _stretches(timeline, marks)
    # The longest first: each shortened one widens the scale of the rest.
    idle = sorted(
        (i for i, each in enumerate(stretches) if each.idle), key=lambda i: -stretches[i].took
    )
    short: set[int] = set()
    kept = marks[-1] - marks[0]  # the milliseconds drawn to scale
    for i in idle:
        took = stretches[i].took
        rate = (plot - len(short) * _break_width(len(short), plot)) / kept if kept else 0.0
        if took * rate <= 2 * _break_width(len(short) + 1, plot):
            break
        if stretches[i].waited or took >= _BREAK_AFTER:
            short.add(i)
            kept -= took
    width = _break_width(len(short), plot) if kept else plot / max(1, len(short))
    per_ms = _per_ms(timeline, stretches, short, plot - len(short) * width)
    pieces: list[Piece] = []
    x = left
    for i, each in enumerate(stretches):
        wide = width if i in short else each.took * per_ms[i]
        pieces.append(Piece(each.start, each.end, x, x + wide, i in short))
        x += wide
    return Scale(tuple(pieces))


def _per_ms(
    timeline: Sequence[Row], stretches: list[_Stretch], short: set[int], width: float
) -> dict[int, float]:
    """The pixels per millisecond of each stretch drawn to scale. Each run of them between two
    breaks has a scale of its own, and a share of `width` half for the time it lasts and half
    for the steps that start in it: a few steps of 2 ms after a gate are as easy to see as
    those of the 300 ms before it."""
    runs: list[list[int]] = [[]]
    for i in range(len(stretches)):
        if i in short:
            runs.append([])
        else:
            runs[-1].append(i)
    runs = [run for run in runs if sum(stretches[i].took for i in run)]
    took = [sum(stretches[i].took for i in run) for run in runs]
    steps = [
        sum(stretches[run[0]].start <= row.start <= stretches[run[-1]].end for row in timeline)
        for run in runs
    ]
    scales: dict[int, float] = {}
    for run, lasted, started in zip(runs, took, steps, strict=True):
        share = lasted / sum(took) / 2 + (started / sum(steps) / 2 if sum(steps) else 0.5)
        scales.update(dict.fromkeys(run, width * share / lasted))
    return {i: scales.get(i, 0.0) for i in range(len(stretches))}


@dataclass(frozen=True)
class _Stretch:
    start: int
    end: int
    idle: bool  # no step runs in it
    waited: bool  # a wait covers some of it

    @property
    def took(self) -> int:
        return self.end - self.start


def _stretches(timeline: Sequence[Row], marks: list[int]) -> list[_Stretch]:
    """The stretches between consecutive `marks`, those in which no step runs joined into one
    where no step begins between them."""
    # How many steps, and how many waits, run from each mark on: +1 where one starts, -1 where
    # it ends.
    steps: dict[int, int] = {}
    waits: dict[int, int] = {}
    for row in timeline:
        if row.end > row.start:
            steps[row.start] = steps.get(row.start, 0) + 1
            steps[row.end] = steps.get(row.end, 0) - 1
        if row.wait is not None and row.wait.end > row.wait.start:
            waits[row.wait.start] = waits.get(row.wait.start, 0) + 1
            waits[row.wait.end] = waits.get(row.wait.end, 0) - 1
    begins = {row.start for row in timeline}
    found: list[_Stretch] = []
    running = waiting = 0
    for start, end in itertools.pairwise(marks):
        running += steps.get(start, 0)
        waiting += waits.get(start, 0)
        idle, waited = running == 0, waiting > 0
        # Joined, unless a step begins between them (one that took no time, such as a patch).
        if idle and found and found[-1].idle and start not in begins:
            waited = waited or found[-1].waited
            found[-1] = _Stretch(found[-1].start, end, True, waited)
        else:
            found.append(_Stretch(start, end, idle, waited))
    return found


def _break_width(count: int, plot: float) -> float:
    if count == 0:
        return float(_BREAK_W)
    return max(_BREAK_MIN, min(_BREAK_W, plot * _BREAKS_SHARE / count))

"""The steps every scenario may say, whatever its connectors: the clock, starting runs,
deciding and withdrawing gates, resolving tasks, sending messages, and what to expect of runs, gates, the
ledger, budgets, what runs publish and the child runs they start.

Each is a regular expression over the step's text (the keyword, Given, When, Then, And or But,
is not part of it) and a function doing it on the scenario's `World`. `README.md`, "Scenarios",
lists every sentence. The steps about changes to the app's repo are in `changes.py`, which adds
them here when the runner imports it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel

from remit.budgets.model import APP_SCOPE, period_key
from remit.core.errors import AppError
from remit.people.approvals import DecideResult
from remit.resources.workflows import DRIFT
from remit.scenarios.features import Step
from remit.scenarios.messages import message_model, sender
from remit.scenarios.values import cell_texts, doc_json, fields_table, rows_table
from remit.scenarios.world import Mismatch, World, acting, principal

WHO = r"(?P<who>[\w.@:-]+)"
RUN = r"\$(?P<run>[\w-]+)"
UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
RUN_STATUSES = "queued|running|waiting|sleeping|paused|done|failed|cancelled"
GATE_STATUSES = "pending|approved|rejected|expired|cancelled|withdrawn"
# A ledger table's columns, and the row field each reads.
LEDGER_COLUMNS = {
    "op": "op_id",
    "status": "status",
    "attempt": "attempt",
    "effect": "effect",
    "tries": "tries",
    "actor": "actor",
}

Action = Callable[[World, Step, dict[str, str]], None]


@dataclass(frozen=True)
class Generic:
    """One generic step: its pattern, an example of it, and what it does."""

    pattern: re.Pattern[str]
    example: str
    do: Action

    def match(self, text: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(text.strip())
        return None if found is None else {k: v for k, v in found.groupdict().items() if v}


GENERIC: list[Generic] = []


def generic(pattern: str, example: str) -> Callable[[Action], Action]:
    def add(do: Action) -> Action:
        GENERIC.append(Generic(re.compile(pattern), example, do))
        return do

    return add


def parse_moment(text: str) -> datetime:
    """`2026-11-29 09:00 UTC`, `2026-11-29` (midnight UTC) or an ISO 8601 time."""
    cleaned = text.strip()
    if cleaned.upper().endswith(" UTC"):
        cleaned = cleaned[:-4] + "+00:00"
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise AppError(
            f"`it is {text}`: write the time as 2026-11-29 09:00 UTC (or 2026-11-29)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def show(value: Any) -> str:
    """A value as a scenario's table writes it."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, sort_keys=True)


def same(expected: Any, actual: Any) -> bool:
    """Whether a table's value is the one found: equal, or written the same. `true` is not
    `1`, nor `false` `0`, however deep in a record or a list."""
    return _equal(expected, actual) or show(expected) == show(actual)


def _equal(expected: Any, actual: Any) -> bool:
    """`==`, but a bool equals only a bool (Python has `True == 1`)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return expected.keys() == actual.keys() and all(
            _equal(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        return len(expected) == len(actual) and all(map(_equal, expected, actual))
    return bool(expected == actual)


def needs_table(step: Step, what: str, *, docstring: bool = False) -> None:
    """Refuse a step that compares `what` and gives nothing to compare it with: with no
    table (or docstring) it would pass whatever it found."""
    if step.table is None and (not docstring or step.doc is None):
        given = "a table of `| field | value |` rows" + (
            " or a JSON docstring" if docstring else ""
        )
        raise AppError(
            f"`{step.sentence}` gives nothing to compare {what} with: write {given} under it"
        )


def one_field(message: str, field: str, expected: str, actual: str) -> Mismatch:
    """A then's failure about one field: the message, and the field's value expected and found."""
    return Mismatch(message, expected=[f"{field} | {expected}"], actual=[f"{field} | {actual}"])


def differs(what: str, expected: Any, actual: Any) -> Mismatch:
    """A then's failure about a whole value: both written out as JSON, line by line."""
    return Mismatch(
        f"{what} differs",
        expected=json.dumps(expected, indent=2, sort_keys=True, default=str).splitlines(),
        actual=json.dumps(actual, indent=2, sort_keys=True, default=str).splitlines(),
    )


def compare_fields(
    what: str, expected: Mapping[str, Any], actual: Any, texts: Mapping[str, str] | None = None
) -> None:
    """Fail unless `actual` (a mapping) has each expected field with its value, or with a
    value written as its cell in `texts` is (`120.00` is the amount `"120.00"`)."""
    if not isinstance(actual, Mapping):
        raise Mismatch(f"{what} is {show(actual)}, not a record with fields")
    texts = texts or {}
    wrong = [
        f
        for f, v in expected.items()
        if f not in actual or not (same(v, actual[f]) or texts.get(f) == show(actual[f]))
    ]
    if wrong:
        raise Mismatch(
            f"{what} differs in {', '.join(f'`{f}`' for f in wrong)}",
            expected=[f"{f} | {show(v)}" for f, v in expected.items()],
            actual=[
                f"{f} | {show(actual[f]) if f in actual else '(no such field)'}" for f in expected
            ],
        )


# The clock.


@generic(r"it is (?P<moment>\d.*)", "it is 2026-11-29 09:00 UTC")
def it_is(world: World, step: Step, m: dict[str, str]) -> None:
    world.set_time(parse_moment(m["moment"]).timestamp())


@generic(rf"(?P<n>\d+(?:\.\d+)?) (?P<unit>{'|'.join(UNITS)})s? pass(?:es)?", "30 days pass")
def time_passes(world: World, step: Step, m: dict[str, str]) -> None:
    world.pass_time(float(m["n"]) * UNITS[m["unit"]])


# Runs.


@generic(
    rf"{WHO} starts \"?(?P<workflow>[\w.:-]+)\"?(?: as \$(?P<name>[\w-]+))?(?: with)?:?",
    "ann starts chase-invoice as $chase with:",
)
def starts(world: World, step: Step, m: dict[str, str]) -> None:
    name = m.get("name", "run")
    what = f"the input of {m['workflow']}"
    workflow = world.workflow(m["workflow"])
    given = (
        doc_json(step.doc, world.names, what=what)
        if step.doc is not None
        else fields_table(
            step.table, world.names, what=what, model=world.app.workflows[workflow].input
        )
    )
    if not isinstance(given, Mapping):
        raise AppError(f"{what}: the docstring must be a JSON object")
    with acting():
        run = world.harness.start(workflow, given, by=principal(m["who"]))
    world.name_run(name, run.run_id)
    world.settle([run.run_id])


@generic(rf"(?:the child )?{RUN} is (?P<status>{RUN_STATUSES})", "$chase is done")
def run_is(world: World, step: Step, m: dict[str, str]) -> None:
    view = world.run_view(world.run_id(m["run"]))
    if view["status"] != m["status"]:
        error = f" ({view['error']})" if view["error"] else ""
        raise one_field(
            f"${m['run']} is {view['status']}{error}", "status", m["status"], view["status"]
        )


@generic(rf"{RUN} failed because (?P<reason>.+)", "$chase failed because no invoice")
def run_failed(world: World, step: Step, m: dict[str, str]) -> None:
    view = world.run_view(world.run_id(m["run"]))
    reason = m["reason"].strip().strip('"')
    if view["status"] != "failed" or reason.lower() not in (view["error"] or "").lower():
        raise Mismatch(
            f"${m['run']} is {view['status']}, not failed because {reason!r}",
            expected=["status | failed", f"error contains | {reason}"],
            actual=[f"status | {view['status']}", f"error | {view['error']}"],
        )


@generic(rf"the output of {RUN} is:?", "the output of $chase is:")
def output_is(world: World, step: Step, m: dict[str, str]) -> None:
    what = f"the output of ${m['run']}"
    needs_table(step, what, docstring=True)
    actual = world.run_view(world.run_id(m["run"]))["output"]
    if step.doc is not None:
        expected = doc_json(step.doc, world.names, what=what)
        if not same(expected, actual):
            raise differs(what, expected, actual)
        return
    expected = fields_table(step.table, world.names, what=what)
    compare_fields(what, expected, actual, cell_texts(step.table))


@generic(rf"the ledger of {RUN} is:?", "the ledger of $chase is:")
def ledger_is(world: World, step: Step, m: dict[str, str]) -> None:
    expected = rows_table(step.table)
    columns = list(expected[0]) if expected else ["op", "status"]
    unknown = [c for c in columns if c not in LEDGER_COLUMNS]
    if unknown:
        raise AppError(
            f"the ledger table has the column(s) {', '.join(unknown)}: use "
            f"{', '.join(LEDGER_COLUMNS)}"
        )
    rows = world.harness.ledger(world.run_id(m["run"]))
    wanted = [
        " | ".join(show(world.names.resolve_cell(row[c])) for c in columns) for row in expected
    ]
    found = [" | ".join(show(getattr(row, LEDGER_COLUMNS[c])) for c in columns) for row in rows]
    if wanted != found:
        header = " | ".join(columns)
        raise Mismatch(
            f"the ledger of ${m['run']} differs",
            expected=[header, *wanted],
            actual=[header, *found],
        )


# Messages, published state and child runs.

TOPIC = r"\"?(?P<topic>[^\s\"]+)\"?"
KEY = r"\"?(?P<key>[^\s\"]+)\"?"


@generic(
    rf"(?P<sender>.+?) sends {RUN} {TOPIC}(?: with)?:?",
    'the payments feed sends $dunning "paid" with:',
)
def sends(world: World, step: Step, m: dict[str, str]) -> None:
    """Send the run a message: the table as a record (read as the model the run's workflow
    waits for the topic with, where its code names one), or the docstring's JSON."""
    run_id = world.run_id(m["run"])
    run = world.harness.runs.get(run_id)
    what = f"the message on `{m['topic']}` to ${m['run']}"
    if step.doc is not None:
        payload = doc_json(step.doc, world.names, what=what)
    else:
        declared = world.app.workflows.get(run.workflow)
        model = None if declared is None else message_model(declared, m["topic"])
        payload = fields_table(step.table, world.names, what=what, model=model)
    with acting():
        sent = world.harness.send(run_id, m["topic"], payload, by=sender(m["sender"]))
    world.settle(moved={run_id: run.attempt} if sent.resumed_workflow_id else None)


@generic(
    rf"{RUN} is waiting for (?:{TOPIC}|(?P<children>its children))",
    '$dunning is waiting for "paid"',
)
def waiting_for(world: World, step: Step, m: dict[str, str]) -> None:
    run_id = world.run_id(m["run"])
    said = [
        f"a message on `{w.topic}`" if w.kind == "message" else "its children"
        for w in world.harness.runs.waiting(run_id)
    ]
    wanted = "its children" if m.get("children") else f"a message on `{m['topic']}`"
    if wanted not in said:
        status = world.run_view(run_id)["status"]
        raise Mismatch(
            f"${m['run']} is {status}, not waiting for {wanted}",
            expected=[wanted],
            actual=said or [f"{status}, waiting for no message nor child run"],
        )


@generic(rf"{RUN} shows {KEY} as:?(?: (?P<value>.+))?", '$note shows "progress" as:')
def shows(world: World, step: Step, m: dict[str, str]) -> None:
    """What the run last published under the key: the table's fields, the docstring's JSON,
    or the value the sentence ends with."""
    what = f"what ${m['run']} shows as `{m['key']}`"
    state = world.harness.state(world.run_id(m["run"]))
    if m["key"] not in state:
        keys = ", ".join(f"`{key}`" for key in state) or "nothing"
        raise Mismatch(f"${m['run']} has published nothing as `{m['key']}` (it shows {keys})")
    actual = state[m["key"]]
    if m.get("value") is not None:
        expected = world.names.resolve_cell(m["value"].strip())
    elif step.doc is not None:
        expected = doc_json(step.doc, world.names, what=what)
    else:
        needs_table(step, what, docstring=True)
        fields = fields_table(step.table, world.names, what=what)
        compare_fields(what, fields, actual, cell_texts(step.table))
        return
    if not same(expected, actual):
        raise differs(what, expected, actual)


def _children(world: World, name: str, workflow: str | None = None) -> list[Any]:
    """The run's children, oldest first: all, or those of `workflow` (as the app names it)."""
    found = world.harness.children(world.run_id(name))
    if workflow is None:
        return found
    named = world.workflow(workflow)
    return [child for child in found if child.workflow == named]


@generic(
    rf"{RUN} has started (?P<count>no|\d+) \"?(?P<workflow>[\w.:-]+)\"? runs?",
    "$note has started 2 credit-line runs",
)
def started_count(world: World, step: Step, m: dict[str, str]) -> None:
    found = _children(world, m["run"], m["workflow"])
    count = 0 if m["count"] == "no" else int(m["count"])
    if len(found) != count:
        raise Mismatch(
            f"${m['run']} has started {len(found)} {m['workflow']} runs, not {count}",
            expected=[f"{count} runs"],
            actual=[f"{c.key} | {c.status}" for c in found] or ["no runs"],
        )


@generic(
    rf"{RUN} has started (?:an?|the) \"?(?P<workflow>[\w.:-]+)\"?"
    r"(?: \"(?P<key>[^\"]+)\")?(?: as \$(?P<name>[\w-]+))?",
    "$note has started a credit-line as $line",
)
def started_one(world: World, step: Step, m: dict[str, str]) -> None:
    """The run started one child of the workflow (under the key, when given); `as $name`
    names it."""
    every = _children(world, m["run"], m["workflow"])
    key = m.get("key")
    found = [child for child in every if key is None or child.key == key]
    if len(found) != 1:
        keys = ", ".join(f'"{child.key}"' for child in every) or "none"
        hint = (
            f': name one by its key, `${m["run"]} has started the {m["workflow"]} "{every[0].key}"`'
            if len(found) > 1
            else ""
        )
        said = f' "{key}"' if key else ""
        raise Mismatch(
            f"${m['run']} has started {len(found)} {m['workflow']}{said} runs, not one (the "
            f"keys of its {m['workflow']} runs: {keys}){hint}"
        )
    if m.get("name"):
        world.name_run(m["name"], found[0].run_id)


CHILD_COLUMNS = ("workflow", "key", "status", "detached")


@generic(rf"the children of {RUN} are:?", "the children of $note are:")
def children_are(world: World, step: Step, m: dict[str, str]) -> None:
    what = f"the children of ${m['run']}"
    needs_table(step, what)
    expected = rows_table(step.table)
    columns = list(expected[0]) if expected else []
    unknown = [c for c in columns if c not in CHILD_COLUMNS]
    if not columns or unknown:
        raise AppError(
            f"{what}: the table's columns are some of {', '.join(CHILD_COLUMNS)}; it has "
            f"{', '.join(columns) or 'no rows under its header'}"
        )

    def wanted(row: Mapping[str, str]) -> str:
        values = {c: world.names.resolve_cell(row[c]) for c in columns}
        if "workflow" in values:
            values["workflow"] = world.workflow(row["workflow"])
        return " | ".join(show(values[c]) for c in columns)

    found = [
        " | ".join(show(child.as_json()[c]) for c in columns)
        for child in _children(world, m["run"])
    ]
    if [wanted(row) for row in expected] != found:
        header = " | ".join(columns)
        raise Mismatch(
            f"{what} differ",
            expected=[header, *map(wanted, expected)],
            actual=[header, *found],
        )


# Schedules.

SCHEDULE = r"the schedule \"?(?P<workflow>[\w.:-]+)\"?"


@generic(
    rf"{SCHEDULE} fires(?: as \$(?P<name>[\w-]+))?",
    "the schedule nightly-summary fires as $summary",
)
def schedule_fires(world: World, step: Step, m: dict[str, str]) -> None:
    """Let time pass up to the schedule's next instant, which fires it (and whatever else
    falls due on the way)."""
    workflow = world.scheduled_workflow(m["workflow"])
    assert workflow.trigger is not None
    now = world.clock.now()
    at = workflow.trigger.next_after(now)
    world.pass_time((at - now).total_seconds(), drift=workflow.name == DRIFT)
    fired = [f for f in world.schedule_runs(workflow.name) if f.at == at]
    if not fired:
        raise Mismatch(
            f"the schedule of `{workflow.name}` reached {at:%Y-%m-%d %H:%M} UTC and started no "
            "run: its input model refused the instant (the log says why)"
        )
    if m.get("name"):
        world.name_run(m["name"], fired[0].run_id)


@generic(
    rf"{SCHEDULE} has fired (?P<count>no|\d+) runs?",
    "the schedule nightly-summary has fired 2 runs",
)
def schedule_fired(world: World, step: Step, m: dict[str, str]) -> None:
    workflow = world.scheduled_workflow(m["workflow"])
    fired = world.schedule_runs(workflow.name)
    count = 0 if m["count"] == "no" else int(m["count"])
    if len(fired) != count:
        raise Mismatch(
            f"the schedule of `{workflow.name}` has fired {len(fired)} runs, not {count}",
            expected=[f"{count} runs"],
            actual=[_fired_line(world, f.at, f.run_id) for f in fired] or ["no runs"],
        )


@generic(rf"the runs of {SCHEDULE} are:?", "the runs of the schedule nightly-summary are:")
def schedule_runs(world: World, step: Step, m: dict[str, str]) -> None:
    workflow = world.scheduled_workflow(m["workflow"])
    what = f"the runs of the schedule of `{workflow.name}`"
    needs_table(step, what)
    expected = rows_table(step.table)
    columns = list(expected[0])
    unknown = [c for c in columns if c not in ("at", "status")]
    if "at" not in columns or unknown:
        raise AppError(
            f"{what}: the table's columns are `at` (the instant, 2026-11-30 06:00 UTC) and, "
            f"if you like, `status`; it has {', '.join(columns)}"
        )
    wanted = [
        _fired_line(world, parse_moment(row["at"]), None, row.get("status")) for row in expected
    ]
    found = [
        _fired_line(world, f.at, f.run_id, "" if "status" in columns else None)
        for f in world.schedule_runs(workflow.name)
    ]
    if wanted != found:
        raise Mismatch(f"{what} differ", expected=wanted, actual=found)


def _fired_line(world: World, at: datetime, run_id: str | None, status: str | None = "") -> str:
    """One scheduled run as a line of a difference: its instant, and its status when asked
    (`""`: read it from the run; None: leave it out)."""
    line = f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    if status == "" and run_id is not None:
        status = world.run_view(run_id)["status"]
    return line if status is None else f"{line} | {status}"


# Gates.


def _pending_gate(world: World, name: str) -> Any:
    run_id = world.run_id(name)
    pending = world.harness.approvals.list(run_id=run_id, status="pending")
    if not pending:
        view = world.run_view(run_id)
        raise Mismatch(f"${name} has no pending gate to decide (it is {view['status']})")
    return pending[-1]


def _latest_gate(world: World, name: str) -> Any:
    found = world.harness.approvals.list(run_id=world.run_id(name))
    if not found:
        raise Mismatch(
            f"${name} has reached no gate (it is {world.run_view(world.run_id(name))['status']})"
        )
    return found[0]


def _answer(world: World, name: str, give: Callable[[Any], DecideResult]) -> None:
    """Give `give(gate)` (a decision or a withdrawal) to the pending gate of `$name`, and wait
    for its run to settle on its next attempt if that resumed it."""
    gate = _pending_gate(world, name)
    attempt = world.harness.runs.get(gate.run_id).attempt
    with acting():
        decided = give(gate)
    resumed = any(d.resumed_workflow_id for d in decided.decided)
    world.settle(moved={gate.run_id: attempt} if resumed else None)


def _decide(
    world: World,
    name: str,
    decision: str,
    who: str,
    *,
    edits: Mapping[str, Any] | None = None,
    reason: str | None = None,
) -> None:
    _answer(
        world,
        name,
        lambda gate: world.harness.decide(
            gate.id, decision, by=principal(who), edits=edits or None, reason=reason
        ),
    )


@generic(rf"{WHO} approves {RUN}(?: with)?:?", "carol approves $writeoff")
def approves(world: World, step: Step, m: dict[str, str]) -> None:
    gate = _pending_gate(world, m["run"])
    edits = fields_table(
        step.table, world.names, what=f"the edits to ${m['run']}'s draft", model=_draft(world, gate)
    )
    _decide(world, m["run"], "approved", m["who"], edits=edits)


@generic(
    rf"{WHO} rejects {RUN}(?: because (?P<reason>.+))?", "carol rejects $writeoff because paid"
)
def rejects(world: World, step: Step, m: dict[str, str]) -> None:
    reason = m.get("reason")
    _decide(
        world, m["run"], "rejected", m["who"], reason=reason.strip().strip('"') if reason else None
    )


@generic(
    rf"{WHO} withdraws {RUN}(?: because (?P<reason>.+))?", "ann withdraws $writeoff because paid"
)
def withdraws(world: World, step: Step, m: dict[str, str]) -> None:
    reason = m.get("reason")
    _answer(
        world,
        m["run"],
        lambda gate: world.harness.approvals.withdraw(
            gate.id, by=principal(m["who"]), reason=reason.strip().strip('"') if reason else None
        ),
    )


@generic(r"it is refused(?: because (?P<reason>.+))?", "it is refused because not permitted")
def refused(world: World, step: Step, m: dict[str, str]) -> None:
    refusal = world.expect_refusal()
    reason = (m.get("reason") or "").strip().strip('"')
    if reason.lower() not in str(refusal.error).lower():
        raise one_field(
            f"{refusal.step.sentence} was refused, for another reason",
            "refused because",
            reason,
            str(refusal.error),
        )


@generic(rf"the gate of {RUN} is (?P<status>{GATE_STATUSES})", "the gate of $writeoff is pending")
def gate_is(world: World, step: Step, m: dict[str, str]) -> None:
    gate = _latest_gate(world, m["run"])
    if gate.status != m["status"]:
        raise one_field(
            f"the gate of ${m['run']} is {gate.status}", "status", m["status"], gate.status
        )


@generic(rf"the gate of {RUN} was decided by {WHO}", "the gate of $writeoff was decided by carol")
def decided_by(world: World, step: Step, m: dict[str, str]) -> None:
    gate = _latest_gate(world, m["run"])
    if gate.decided_by != principal(m["who"]):
        raise one_field(
            f"the gate of ${m['run']} is {gate.status}, decided by {gate.decided_by or 'no one'}",
            "decided by",
            principal(m["who"]),
            str(gate.decided_by),
        )


@generic(rf"the gate of {RUN} has the draft:?", "the gate of $writeoff has the draft:")
def gate_draft(world: World, step: Step, m: dict[str, str]) -> None:
    gate = _latest_gate(world, m["run"])
    what = f"the draft of ${m['run']}'s gate"
    needs_table(step, what)
    draft = gate.edited_draft_json if gate.edited_draft_json is not None else gate.draft_json
    expected = fields_table(step.table, world.names, what=what, model=_draft(world, gate))
    compare_fields(what, expected, draft, cell_texts(step.table))


def _draft(world: World, gate: Any) -> type[BaseModel] | None:
    """The model of a gate's draft, where the app declares its approval type."""
    declared = world.app.approval_types.get(gate.type)
    return declared.draft if declared is not None else None


# Tasks.


def _resolve(world: World, name: str, who: str, *, done: bool, output: Any = None) -> None:
    run_id = world.run_id(name)
    run = world.harness.runs.get(run_id)
    tasks = world.harness.tasks.list(run_id=run_id, status="open")
    if not tasks:
        raise Mismatch(f"${name} has no open task to resolve (it is {run.status})")
    with acting():
        resolved = world.harness.resolve(
            tasks[0].id,
            done=done,
            output=output,
            by=principal(who),
            key=f"scenario:{uuid.uuid4().hex}",
        )
    world.settle(moved={run_id: run.attempt} if resolved.resumed_workflow_id else None)


@generic(
    rf"{WHO} says the task of {RUN} happened(?: with)?:?", "ann says the task of $post happened"
)
def task_happened(world: World, step: Step, m: dict[str, str]) -> None:
    what = f"the output of ${m['run']}'s task"
    output = (
        doc_json(step.doc, world.names, what=what)
        if step.doc is not None
        else fields_table(step.table, world.names, what=what)
    )
    _resolve(world, m["run"], m["who"], done=True, output=output)


@generic(
    rf"{WHO} says the task of {RUN} did not happen", "ann says the task of $post did not happen"
)
def task_not_done(world: World, step: Step, m: dict[str, str]) -> None:
    _resolve(world, m["run"], m["who"], done=False)


# Budgets.


@generic(
    r"(?P<scope>the app|[\w.:-]+) has spent (?P<most>at most )?(?P<amount>[\d.]+) USD "
    r"(?P<period>this month|this week|today|in [\w-]+)",
    "the app has spent at most 0.05 USD this month",
)
def spent(world: World, step: Step, m: dict[str, str]) -> None:
    try:
        amount = Decimal(m["amount"])
    except InvalidOperation:
        raise AppError(f"{m['amount']} is not an amount in USD: write it as 0.25") from None
    scope = APP_SCOPE if m["scope"] == "the app" else f"workflow:{world.workflow(m['scope'])}"
    now = world.clock.now()
    period = {
        "this month": period_key("month", now),
        "this week": period_key("week", now),
        "today": period_key("day", now),
    }.get(m["period"]) or m["period"].removeprefix("in ")
    states = {(s.scope, s.period): s for s, _ in world.harness.budgets.periods(limit=1000)}
    state = states.get((scope, period))
    found = state.spent_usd if state is not None else Decimal(0)
    ok = found <= amount if m.get("most") else found == amount
    if not ok:
        bound = "at most " if m.get("most") else ""
        raise one_field(
            f"{m['scope']} has spent {found} USD in {period}",
            f"spent in {period}",
            f"{bound}{amount}",
            str(found),
        )

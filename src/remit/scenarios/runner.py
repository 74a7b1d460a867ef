"""Running a scenario: each step, in order, against the app on fakes and a manual clock.

A step is one of the generic steps (`generic.py`) or one a connector of the app declares
(`remit.steps`). A scenario that fails raises `ScenarioFailed`, whose text names the feature,
the scenario and the step (file:line), shows what was expected against what was found, and
each run's steps and ledger.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from remit.app import App
from remit.connectors.base import Fake
from remit.connectors.wakeup import ACCOUNT_TOKEN
from remit.core.clock import ManualClock
from remit.core.errors import AppError
from remit.core.wakeup_tokens import ACCOUNT_PREFIX, INSTANCE_PREFIX, INSTANCE_TOKEN_SECRET
from remit.declare.steps import Given, StepDefinition
from remit.scenarios import features
from remit.scenarios.changes import own_fakes
from remit.scenarios.features import Scenario, Step
from remit.scenarios.generic import GENERIC, it_is, parse_moment, refused
from remit.scenarios.report import failure_report
from remit.scenarios.values import REF, Names, cell, typed_cell
from remit.scenarios.world import Mismatch, Refusal, Refused, World
from remit.testing import Harness

# A step's own name for what its given made: `Given an invoice inv_1 of 1200 as $big`.
_NAMED = re.compile(r"\s+as \$([A-Za-z_][\w-]*)$")

# How a given calls its op: (op id, input, actor or None) -> the op's output as JSON.
Call = Callable[[str, Mapping[str, Any], str | None], Any]


class Calls(Protocol):
    """What `seed` may be given instead of a `Call`: a `Harness` or a `Client`."""

    def call(self, op_id: str, input: Mapping[str, Any], *, by: str | None = ...) -> Any: ...


class ScenarioFailed(AssertionError):
    """A scenario failed; its text is the report (`report.py`)."""

    def __init__(self, report: str, *, scenario: Scenario, step: Step) -> None:
        super().__init__(report)
        self.report = report
        self.scenario = scenario
        self.step = step


@dataclass(frozen=True)
class ScenarioResult:
    """A scenario that passed, and how long its steps took (the harness's start and stop
    left out)."""

    scenario: Scenario
    took: float


class Steps:
    """The steps a scenario of `app` may say: the generic ones, then its connectors'."""

    def __init__(self, app: App) -> None:
        self.declared = [
            definition
            for connector in app.connectors.values()
            if connector.steps is not None
            for definition in connector.steps.definitions
        ]

    def connector_step(
        self, text: str, kind: str | None = None
    ) -> tuple[StepDefinition, dict[str, Any], str | None] | None:
        """The connector step `text` says, its values, and the name it gives its result."""
        named = _NAMED.search(text)
        # A trailing `as $name` names the result, before it could be read as a value.
        tries = ([(text[: named.start()], named.group(1))] if named else []) + [(text, None)]
        for said, name in tries:
            found = [
                (definition, values)
                for definition in self.declared
                if (kind is None or definition.kind == kind)
                and (values := definition.match(said)) is not None
            ]
            if len(found) > 1:
                where = ", ".join(f"{d.vendor}: {d.pattern!r}" for d, _ in found)
                raise AppError(f"`{text}` says more than one connector step ({where}): reword one")
            if found:
                return found[0][0], found[0][1], name
        return None

    def unknown(self, step: Step) -> AppError:
        examples = [g.example for g in GENERIC] + [d.pattern for d in self.declared]
        close = difflib.get_close_matches(step.text, examples, n=3, cutoff=0.4)
        hint = f" Did you mean: {'; '.join(close)}?" if close else ""
        return AppError(
            f'no step reads `{step.text}`: neither a generic step (README, "Scenarios") nor '
            f"one a connector of the app declares.{hint}"
        )


def given(
    definition: StepDefinition,
    values: Mapping[str, Any],
    name: str | None,
    step: Step,
    names: Names,
    call: Call,
    app: App | None = None,
) -> None:
    """Do a connector's given: call the op it returns and keep the output under its name.

    A field of the op's input that the given passed on from a table's cell of the same name
    is read as the op's input model says (`120.00` for a `Decimal` is the amount 120.00)."""
    made = definition.fn(**_arguments(definition, values, step, names))
    if not isinstance(made, Given):
        raise AppError(
            f"the {definition.vendor} given {definition.pattern!r} ({definition.where}) returned "
            f"{made!r}: return `Given(op=..., input=..., actor=..., name=...)`"
        )
    input = names.resolve(made.input_json())
    op = app.ops.get(made.op_id) if app is not None else None
    if op is not None and step.table is not None:
        input = _typed_from_cells(input, op.input, _cells_by_name(step.table))
    output = call(made.op_id, input, made.actor)
    keep = name or made.name
    if keep:
        names.keep(keep, output)


def _arguments(
    definition: StepDefinition, values: Mapping[str, Any], step: Step, names: Names
) -> dict[str, Any]:
    arguments = {key: names.resolve(value) for key, value in values.items()}
    for given, parameter, value in (
        (step.table, "table", lambda: _table(step, names)),
        (step.doc, "doc", lambda: names.resolve(step.doc)),
    ):
        if given is None:
            continue
        if not definition.takes(parameter):
            raise AppError(
                f"`{step.text}` has a {parameter}, which {definition.where} does not take: give "
                f"the function a `{parameter}` parameter, or leave the {parameter} out"
            )
        arguments[parameter] = value()
    return arguments


def _cells_by_name(table: tuple[tuple[str, ...], ...]) -> dict[str, list[str]]:
    """A table's cells by the field they may fill: as the rows of a `field | value` table, and
    as the one row under a header."""
    texts: dict[str, list[str]] = {}
    header, *rows = table
    if len(rows) == 1:
        for field, text in zip(header, rows[0], strict=False):
            texts.setdefault(field, []).append(text)
    if all(len(row) == 2 for row in table):
        for field, text in table:
            texts.setdefault(field, []).append(text)
    return texts


def _typed_from_cells(
    input: dict[str, Any], model: type[BaseModel], texts: Mapping[str, list[str]]
) -> dict[str, Any]:
    """`input` with each field passed on as it is from a cell read as `model` says."""
    typed = dict(input)
    for field, value in input.items():
        declared = model.model_fields.get(field)
        if declared is None:
            continue
        for text in texts.get(field, []):
            if REF.fullmatch(text) or value != cell(text) or isinstance(value, bool):
                continue  # not this cell passed on as it is
            found = typed_cell(text, declared.annotation)
            if found is not None:
                typed[field] = found[0]
            break
    return typed


def _table(step: Step, names: Names) -> list[dict[str, Any]]:
    header, *rows = step.table or ((),)
    return [
        {column: names.resolve_cell(cell) for column, cell in zip(header, row, strict=True)}
        for row in rows
    ]


def call_through(caller: Calls | Call) -> Call:
    """A `Call` from a `Harness` or `Client` (their `call`), or the callable as it is."""
    method = getattr(caller, "call", None)
    if method is None:
        return caller  # type: ignore[return-value]

    def call(op_id: str, input: Mapping[str, Any], actor: str | None) -> Any:
        result = method(op_id, input, by=actor)
        if getattr(result, "status", "ok") != "ok":
            raise AppError(
                f"the given's call of `{op_id}` as {actor or 'the default actor'} came to "
                f"{result.status}: {result.error or result.note or 'no output'}"
            )
        return getattr(result, "output", result)

    return call


# What the fakes see as the environment in a scenario: the instance's made-up tokens at the
# fake wakeup service, so `Given a wakeup for ...` registers the instance there. Nothing in a
# scenario reaches a live vendor, so no real token is ever needed.
SCENARIO_ENVIRON = {
    INSTANCE_TOKEN_SECRET: f"{INSTANCE_PREFIX}scenario",
    ACCOUNT_TOKEN: f"{ACCOUNT_PREFIX}scenario",
}


def start_of(scenario: Scenario) -> datetime | None:
    """When the scenario's clock starts: at the first time it names (`Given it is ...`)."""
    for step in scenario.steps:
        found = next((g.match(step.text) for g in GENERIC if g.do is it_is), None)
        if found:
            return parse_moment(found["moment"])
    return None


def run_scenario(
    app: App,
    scenario: Scenario,
    *,
    database_url: str,
    app_name: str | None = None,
    sweep_interval: float = 0.02,
) -> ScenarioResult:
    """Run `scenario` against `app` on its fakes, a fresh database at `database_url`, and a
    manual clock; `ScenarioFailed` when a step fails. `app_name` is the app's folder under
    `apps/`, whose workflows a scenario may name with or without the prefix `<app>.`. The
    fakes keep what they hold in a folder of the scenario's own (`changes.own_fakes`)."""
    steps = Steps(app)
    clock = ManualClock(start_of(scenario))
    with (
        own_fakes(app),
        Harness(
            app,
            database_url=database_url,
            clock=clock,
            sweep_interval=sweep_interval,
            environ=SCENARIO_ENVIRON,
        ) as harness,
    ):
        world = World(app, harness, clock, app_name=app_name)
        call = call_through(harness)
        began = time.monotonic()
        for index, step in enumerate(scenario.steps):
            try:
                _do(world, steps, step, call)
            except Refused as refusal:
                world.refused = Refusal(step, refusal.error)
            except Exception as error:
                raise ScenarioFailed(
                    failure_report(scenario, index, error, world), scenario=scenario, step=step
                ) from error
        took = time.monotonic() - began
        if world.refused is not None:
            last = len(scenario.steps) - 1
            raise ScenarioFailed(
                failure_report(scenario, last, _unexpected(world.refused), world),
                scenario=scenario,
                step=scenario.steps[last],
            )
    return ScenarioResult(scenario, took)


def _do(world: World, steps: Steps, step: Step, call: Call) -> None:
    for candidate in GENERIC:
        found = candidate.match(step.text)
        if found is None:
            continue
        if world.refused is not None and candidate.do is not refused:
            raise _unexpected(world.refused)
        candidate.do(world, step, found)
        return
    if world.refused is not None:
        raise _unexpected(world.refused)
    connector = steps.connector_step(step.text)
    if connector is None:
        raise steps.unknown(step)
    definition, values, name = connector
    if definition.kind == "given":
        given(definition, values, name, step, world.names, call, world.app)
        return
    fake: Fake = world.harness.fake(definition.vendor)
    arguments = _arguments(definition, values, step, world.names)
    try:
        definition.fn(fake, **arguments)
    except AssertionError as failed:
        raise _then_failed(definition, step, arguments, failed) from failed


def _then_failed(
    definition: StepDefinition, step: Step, arguments: Mapping[str, Any], failed: AssertionError
) -> Mismatch:
    """A connector's then that failed, as the report shows it: the step, the function, what
    it said (a bare `assert` says nothing) and the values it was called with."""
    said = str(failed) or "an `assert` with no message failed (give it one: `assert ok, why`)"
    called = ", ".join(f"{name}={value!r}" for name, value in arguments.items()) or "no values"
    return Mismatch(
        f"{said}\n`{step.text}` ({definition.vendor}: {definition.where}) was called with {called}"
    )


def _unexpected(refusal: Refusal) -> Mismatch:
    return Mismatch(
        f"`{refusal.step.sentence}` (line {refusal.step.line}) was refused: {refusal.error}. "
        "Expect it with `Then it is refused because ...`, or change who acts"
    )


def seed(app: App, files: Iterable[Path | str], caller: Calls | Call) -> dict[str, Any]:
    """Run the connector givens in the backgrounds of `files` (feature files of `app`), each
    through `caller` (a `Harness`, a `Client`, or `call(op_id, input, by) -> output`), and
    return what they made by name: `{"invoice": {"invoice_id": "inv_1", ...}}`.

    What a demo seeds an instance with: the same records its scenarios start from. Each
    distinct given runs once, however many scenarios and files say it (the same text, table
    and docstring): two features that start from one invoice seed it once. A background's
    generic steps (the clock) are left out; a step no connector declares fails.
    """
    steps = Steps(app)
    call = call_through(caller)
    names = Names()
    seen: set[tuple[str, tuple[tuple[str, ...], ...] | None, str | None]] = set()
    for path in files:
        for scenario in features.read(path):
            for step in scenario.steps:
                said = (step.text, step.table, step.doc)
                if not step.background or said in seen:
                    continue
                seen.add(said)
                if any(g.match(step.text) for g in GENERIC):
                    continue
                connector = steps.connector_step(step.text, kind="given")
                if connector is None:
                    raise AppError(
                        f"{path}:{step.line}: `{step.text}` is in a background, and no "
                        "connector of the app declares it as a given"
                    )
                definition, values, name = connector
                given(definition, values, name, step, names, call, app)
    return names.values()

"""What a failing scenario shows: where it failed, what was expected against what was found,
and each run's steps and ledger rows, so the reader sees what the app did."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from remit.scenarios.features import Scenario, Step
from remit.scenarios.world import Mismatch, World


def failure_report(
    scenario: Scenario, failed: int, error: BaseException, world: World | None
) -> str:
    """The text of a scenario that failed at its step `failed` with `error`."""
    step = scenario.steps[failed]
    lines = [
        f"Scenario failed: {scenario.title}",
        f"  at {scenario.where(step)}: {step.sentence}",
        "",
        *_indent(_message(error)),
    ]
    if isinstance(error, Mismatch) and (error.expected or error.actual):
        lines += ["", "  - expected", "  + actual", *_indent(_diff(error.expected, error.actual))]
    lines += ["", "Steps:"]
    for index, said in enumerate(scenario.steps):
        mark = "ok" if index < failed else "FAILED" if index == failed else "--"
        lines.append(f"  {mark:>6}  {said.sentence}  (line {said.line})")
        lines += _argument(said)
    if world is not None and world.runs:
        lines += ["", *_runs(world)]
    return "\n".join(lines)


def _message(error: BaseException) -> str:
    if isinstance(error, Mismatch):
        return error.message
    if isinstance(error, AssertionError):
        return str(error) or "a then's assertion failed"
    return f"{type(error).__name__}: {error}"


def _argument(step: Step, by: str = "          ") -> list[str]:
    """A step's table (its columns aligned) or docstring, as the feature file writes it."""
    if step.table:
        widths = [max(len(row[i]) for row in step.table) for i in range(len(step.table[0]))]
        return [
            by + "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
            for row in step.table
        ]
    if step.doc is not None:
        return [f'{by}"""', *(f"{by}{line}" for line in step.doc.splitlines()), f'{by}"""']
    return []


def _diff(expected: Sequence[str], actual: Sequence[str]) -> list[str]:
    """Each line of both, marked `-` where only expected and `+` where only found."""
    return [
        line for line in difflib.ndiff(list(expected), list(actual)) if not line.startswith("?")
    ]


def _indent(text: str | Sequence[str], by: str = "  ") -> list[str]:
    lines = text.splitlines() if isinstance(text, str) else list(text)
    return [f"{by}{line}" for line in lines]


def _runs(world: World) -> list[str]:
    """Each run the scenario named: its status, the steps of each attempt, its ledger."""
    lines = ["Runs:"]
    for name, run_id in world.runs.items():
        try:
            run = world.harness.runs.get(run_id)
            lines.append(f"  ${name}: {run.workflow} {run_id} is {run.status}")
            if run.error:
                lines.append(f"    error: {run.error}")
            for attempt in range(1, run.attempt + 1):
                lines.append(f"    steps of attempt {attempt}:")
                for info in world.harness.steps(run_id, attempt):
                    failed = f"  error: {info['error']}" if info.get("error") else ""
                    lines.append(f"      {info['function_id']:>3}  {info['function_name']}{failed}")
            rows = world.harness.ledger(run_id)
            lines.append("    ledger:" if rows else "    ledger: (no calls)")
            for row in rows:
                lines.append(
                    f"      {row.op_id}  {row.status}  attempt {row.attempt}  tries {row.tries}"
                    + (f"  error: {row.error}" if row.error else "")
                )
        except Exception as error:  # the report must not hide the failure it reports
            lines.append(f"  ${name}: {run_id} (could not be read: {error})")
    return lines

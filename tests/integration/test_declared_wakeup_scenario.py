"""The scenarios' given for a wakeup, on SQLite and Postgres: `Given a wakeup for "<URL>"` sets up
the instance's wakeup at the fake service (as apply makes the declared one), and the wakeup's
thens read what it holds once a wake is registered through it."""

from __future__ import annotations

import textwrap
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import App, Context, workflow
from remit.connectors.wakeup import Wake, register_wake, wakeup_steps
from remit.scenarios import Scenario, ScenarioFailed, read, run_scenario


class When(BaseModel):
    at: datetime


@workflow(name="wake-at", input=When, uses=[register_wake])
def wake_at(ctx: Context, input: When) -> str:
    """Ask the instance's wakeup to wake it at a time, as a stopping worker does."""
    armed = ctx.wakeup.instances.register(Wake(at=input.at))
    return armed.at.isoformat()


APP = App(name="waking", workflows=[wake_at])

FEATURE = """\
Feature: The instance's wakeup
  Background:
    Given it is 2026-12-01 09:00 UTC
    And a wakeup for "https://desk.example.com"

  Scenario: {name}
{steps}
"""


def scenario_of(tmp_path: Path, steps: str, name: str = "Wakes") -> Scenario:
    path = tmp_path / "wakeup.feature"
    path.write_text(FEATURE.format(name=name, steps=textwrap.indent(steps, "    ")))
    (scenario,) = read(path)
    return scenario


def test_a_wakeup_given_for_the_instance_takes_the_wake_registered(
    tmp_path: Path, database_url: str
) -> None:
    steps = """\
Then the wakeup for "https://desk.example.com" holds no wake
When ann starts wake-at as $wake with:
  | at | 2026-12-01T10:00:00Z |
Then $wake is done
And the wakeup for "https://desk.example.com/" wakes it at 2026-12-01 10:00 UTC
"""
    run_scenario(APP, scenario_of(tmp_path, steps), database_url=database_url)


def test_a_wakeup_then_about_another_host_fails_saying_what_is_held(
    tmp_path: Path, database_url: str
) -> None:
    steps = 'Then the wakeup for "https://other.example.com" holds no wake\n'
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(APP, scenario_of(tmp_path, steps), database_url=database_url)
    assert (
        "the wakeup service holds no instance at https://other.example.com (it holds: "
        "https://desk.example.com)"
    ) in str(failed.value)


def test_the_wakeup_given_takes_its_host_quoted() -> None:
    (given,) = [each for each in wakeup_steps.definitions if each.kind == "given"]
    assert given.match('a wakeup for "https://desk.example.com"') == {
        "host": "https://desk.example.com"
    }
    assert given.match("a wakeup for https://desk.example.com") is None

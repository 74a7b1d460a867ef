"""The example repo's scenarios (`examples/acme/apps/ar/scenarios/`) and its demo's books
(`examples/acme/demo/`) pass on SQLite and Postgres, run through `remit.scenarios` as `remit
test` runs them; its month of dunning waits for no real time, and its credit notes wait for
their child runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit import load_app
from remit.scenarios import Scenario, ScenarioResult, read, run_scenario
from remit.scenarios.features import app_name_of

ACME = Path(__file__).resolve().parent.parent.parent / "examples" / "acme"
FEATURES = sorted([*ACME.glob("apps/*/scenarios/*.feature"), *ACME.glob("demo/*.feature")])
APP = load_app(ACME)
SCENARIOS = [scenario for path in FEATURES for scenario in read(path)]


def run(scenario: Scenario, database_url: str) -> ScenarioResult:
    """Run `scenario` as `remit test` does: an app's names with or without its prefix."""
    return run_scenario(
        APP, scenario, database_url=database_url, app_name=app_name_of(scenario.path)
    )


def test_the_example_has_a_scenario_for_each_of_its_stories() -> None:
    features = {scenario.feature for scenario in SCENARIOS}
    assert {
        "Chasing an overdue invoice",
        "Writing off an invoice",
        "A month of dunning",
        "Crediting an invoice line by line",
    } <= features, features


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.title for s in SCENARIOS])
def test_each_scenario_of_the_example_passes(scenario: Scenario, database_url: str) -> None:
    result = run(scenario, database_url)
    assert result.scenario is scenario


def test_a_month_of_dunning_waits_for_no_real_time(database_url: str) -> None:
    month = [s for s in SCENARIOS if s.feature == "A month of dunning"]
    assert month
    for scenario in month:
        result = run(scenario, database_url)
        # The steps alone, the harness's start and stop left out. Thirty days on a manual clock
        # must not wait for real time: a single real sleep of the month would take a week. How
        # fast the month goes (about half a second) is a benchmark, `scenario_month_ms_*` in
        # bench/scenarios.py, with its goal; this bound only leaves room for a loaded machine.
        assert result.took < 30.0, f"{scenario.title} took {result.took:.2f}s"


def test_the_drift_check_fires_when_a_step_says_so_not_as_time_passes(
    tmp_path: Path, database_url: str
) -> None:
    path = tmp_path / "drift.feature"
    path.write_text(
        """\
Feature: Drift
  Scenario: The morning's drift check
    Given it is 2026-12-01 09:00 UTC
    When 3 days pass
    Then the schedule drift has fired no runs
    When the schedule drift fires as $drift
    Then $drift is done
    And the runs of the schedule drift are:
      | at                   | status |
      | 2026-12-05 04:00 UTC | done   |
"""
    )
    (scenario,) = read(path)
    run_scenario(APP, scenario, database_url=database_url)

"""Scenarios run on the test app's fakes and a manual clock, on SQLite and Postgres: the
app's own feature files pass, a failing one names its step and shows the difference, and
connector givens seed an instance (`seed`)."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remit import load_app
from remit.scenarios import Scenario, ScenarioFailed, read, run_scenario, seed
from remit.testing import Harness, ManualClock

SCEN_APP = Path(__file__).resolve().parent.parent / "apps" / "scen_app"
FEATURES = sorted((SCEN_APP / "scenarios").glob("*.feature"))
APP = load_app(SCEN_APP)
SCENARIOS = [scenario for path in FEATURES for scenario in read(path)]

BACKGROUND = """\
Feature: Chasing, written wrong
  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_1 of 1200 due 2026-10-01

  Scenario: {name}
{steps}
"""


def scenario_of(tmp_path: Path, steps: str, name: str = "Broken") -> Scenario:
    path = tmp_path / "broken.feature"
    path.write_text(BACKGROUND.format(name=name, steps=textwrap.indent(steps, "    ")))
    (scenario,) = read(path)
    return scenario


def failure(tmp_path: Path, database_url: str, steps: str) -> str:
    scenario = scenario_of(tmp_path, steps)
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(APP, scenario, database_url=database_url)
    return failed.value.report


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.title for s in SCENARIOS])
def test_each_scenario_of_the_test_app_passes(scenario: Scenario, database_url: str) -> None:
    result = run_scenario(APP, scenario, database_url=database_url)
    assert result.scenario is scenario


def test_a_month_asleep_waits_for_no_real_time(database_url: str) -> None:
    (month,) = [s for s in SCENARIOS if s.name == "A month asleep, then a second reminder"]
    result = run_scenario(APP, month, database_url=database_url)
    # The steps alone, the harness's start and stop left out: no real waiting happens (its
    # sleep is of days). The speed is a benchmark (bench/scenarios.py); this bound leaves room
    # for a loaded machine.
    assert result.took < 30.0, f"a scenario of 30 days took {result.took:.2f}s"


def test_a_failing_output_names_its_step_and_shows_the_difference(
    tmp_path: Path, database_url: str
) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | inv_1 |
Then $chase is done
And the output of $chase is:
  | invoice_id | inv_1 |
  | reminders  | 2     |
""",
    )
    where = tmp_path / "broken.feature"
    assert report.startswith("Scenario failed: Chasing, written wrong: Broken\n")
    assert f"  at {where}:10: And the output of $chase is:\n" in report
    assert "the output of $chase differs in `reminders`" in report
    assert "  - reminders | 2\n  + reminders | 1\n" in report
    assert "      ok  Then $chase is done  (line 9)" in report
    assert "  FAILED  And the output of $chase is:  (line 10)" in report
    # What the run did: its steps and its ledger.
    assert "$chase: chase run_" in report
    assert "        3  books.invoices.remind" in report
    assert "      books.invoices.remind  ok  attempt 1  tries 1" in report


def test_a_failing_ledger_shows_both_tables(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | inv_1 |
Then the ledger of $chase is:
  | op                    | status |
  | books.invoices.get    | ok     |
  | books.invoices.remind | ok     |
""",
    )
    assert "the ledger of $chase differs" in report
    assert "    op | status\n    books.invoices.get | ok\n  + llm.chat.complete | ok\n" in report


def test_a_connector_then_fails_with_its_message(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase with:
  | invoice_id | inv_1 |
Then the invoice inv_1 has 3 reminders
""",
    )
    assert f"at {tmp_path / 'broken.feature'}:9: Then the invoice inv_1 has 3 reminders" in report
    assert "the invoice inv_1 has 1 reminders, not 3" in report


def test_a_connector_then_with_a_bare_assert_shows_its_values(
    tmp_path: Path, database_url: str
) -> None:
    report = failure(tmp_path, database_url, "Then the amount of inv_1 is 5\n")
    assert "  an `assert` with no message failed (give it one: `assert ok, why`)\n" in report
    assert (
        "  `the amount of inv_1 is 5` (books: scen_app.books.amount_is) was called with "
        "invoice_id='inv_1', amount=5\n"
    ) in report


def test_an_output_with_nothing_to_compare_is_refused(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | inv_1 |
Then the output of $chase is:
""",
    )
    assert (
        "`Then the output of $chase is:` gives nothing to compare the output of $chase with: "
        "write a table of `| field | value |` rows or a JSON docstring under it"
    ) in report


def test_true_is_not_the_number_1(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | inv_1 |
Then the output of $chase is:
  | reminders | true |
""",
    )
    assert "the output of $chase differs in `reminders`" in report
    assert "  - reminders | true\n  + reminders | 1\n" in report


def test_an_unknown_reference_names_what_the_scenario_has(
    tmp_path: Path, database_url: str
) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | $bill.invoice_id |
""",
    )
    assert (
        "$bill.invoice_id refers to $bill, which no earlier step made (the scenario has "
        "$invoice): name it in an earlier step (`as $bill`)"
    ) in report


def test_an_unknown_field_names_the_fields_there_are(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase as $chase with:
  | invoice_id | $invoice.id |
""",
    )
    assert (
        "$invoice.id: $invoice has no `id` (it has: amount, due, email, invoice_id, "
        "reminders, status, written_off)"
    ) in report


def test_a_run_is_referred_to_by_its_fields(tmp_path: Path, database_url: str) -> None:
    scenario = scenario_of(
        tmp_path,
        """\
When ann starts chase as $chase with:
  | invoice_id | inv_1 |
And ann starts follow-up as $follow with:
  | invoice_id | $chase.output.invoice_id |
  | days       | $chase.output.reminders  |
Then $follow is sleeping
And the output of $chase is:
  | invoice_id | $follow.input.invoice_id |
  | reminders  | $follow.input.days       |
""",
    )
    run_scenario(APP, scenario, database_url=database_url)


def test_a_step_no_one_declares_is_named(tmp_path: Path, database_url: str) -> None:
    report = failure(tmp_path, database_url, "Then the invoices were all paid\n")
    assert "no step reads `the invoices were all paid`" in report


def test_a_refusal_no_step_expects_fails_the_scenario(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When bob starts chase as $chase with:
  | invoice_id | inv_1 |
Then $chase is done
""",
    )
    assert "  FAILED  Then $chase is done  (line 9)" in report
    assert "`When bob starts chase as $chase with:` (line 7) was refused: " in report
    assert 'user:bob may not start Workflow::"chase": no policy permits it' in report


def test_an_expected_refusal_that_does_not_come_fails(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase with:
  | invoice_id | inv_1 |
Then it is refused because ann may not
""",
    )
    assert "expected the step before to be refused, and it was not" in report


def test_seed_runs_the_backgrounds_givens_and_returns_what_they_made(database_url: str) -> None:
    files = [
        SCEN_APP / "scenarios" / "write_off.feature",
        SCEN_APP / "scenarios" / "letters.feature",
    ]
    with Harness(APP, database_url=database_url) as harness:
        made = seed(APP, files, harness)
        books: Any = harness.fake("books")
        assert sorted(books.invoices) == ["inv_7", "inv_8"]
    assert sorted(made) == ["big", "small"]
    assert made["big"] == {
        "invoice_id": "inv_7",
        "amount": 1200,
        "due": "2026-09-01",
        "email": "ap@inv_7.example",
        "status": "open",
        "reminders": 0,
        "written_off": 0,
    }
    assert made["small"]["amount"] == 300


def test_a_budget_step_compares_what_was_spent(tmp_path: Path, database_url: str) -> None:
    report = failure(
        tmp_path,
        database_url,
        """\
When ann starts chase with:
  | invoice_id | inv_1 |
Then the app has spent 0.00001 USD this month
And chase has spent at most 0.00001 USD in 2026-11
And the app has spent 0.5 USD this month
""",
    )
    assert "      ok  And chase has spent at most 0.00001 USD in 2026-11  (line 10)" in report
    assert "  FAILED  And the app has spent 0.5 USD this month  (line 11)" in report
    assert "  - spent in 2026-11 | 0.5\n  + spent in 2026-11 | 0.000010\n" in report


def test_an_apps_scenario_names_its_workflows_with_or_without_the_apps_prefix(
    tmp_path: Path, database_url: str
) -> None:
    scenario = scenario_of(
        tmp_path,
        """\
When ann starts desk.chase as $chase with:
  | invoice_id | inv_1 |
And ann starts follow-up as $follow with:
  | invoice_id | inv_1 |
Then $chase is done
And $follow is sleeping
""",
    )
    run_scenario(APP, scenario, database_url=database_url, app_name="desk")


def test_a_givens_cells_are_read_as_the_ops_input_model_says(
    tmp_path: Path, database_url: str
) -> None:
    scenario = scenario_of(
        tmp_path,
        """\
Given an invoice with:
  | field      | value           |
  | invoice_id | 0042            |
  | amount     | 1200            |
  | due        | 2026-10-01      |
  | email      | ap@0042.example |
When ann starts chase as $chase with:
  | invoice_id | 0042 |
Then $chase is done
And the invoice 0042 has 1 reminders
And $invoice.invoice_id is 0042
""",
    )
    # The last line is no step: the scenario fails there, after the others passed.
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(APP, scenario, database_url=database_url)
    report = failed.value.report
    assert "      ok  And the invoice 0042 has 1 reminders" in report, report
    assert "no step reads `$invoice.invoice_id is 0042`" in report


def test_schedule_steps_name_what_is_wrong(tmp_path: Path, database_url: str) -> None:
    report = failure(tmp_path, database_url, "When the schedule chase fires\n")
    assert "`chase` runs on no schedule (the app's scheduled workflows: weekly-summary)" in report
    report = failure(
        tmp_path,
        database_url,
        "When 7 days pass\nThen the schedule weekly-summary has fired 2 runs\n",
    )
    assert "the schedule of `weekly-summary` has fired 1 runs, not 2" in report
    assert "+ 2026-11-30 06:00 UTC | done" in report


def test_passing_time_fires_each_instant_once_and_logs_no_error(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = scenario_of(
        tmp_path,
        """\
When 1 day passes
And 6 days pass
And the schedule weekly-summary fires as $second
Then $second is done
And the runs of the schedule weekly-summary are:
  | at                   |
  | 2026-11-30 06:00 UTC |
  | 2026-12-07 06:00 UTC |
""",
    )
    with caplog.at_level("ERROR"):
        run_scenario(APP, scenario, database_url=database_url)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
    with Harness(APP, database_url=database_url, actor="user:ann") as harness:
        summaries = harness.runs.list(workflow="weekly-summary", limit=100)
    assert sorted(run.input["scheduled_at"] for run in summaries) == [
        "2026-11-30T06:00:00Z",
        "2026-12-07T06:00:00Z",
    ]


def test_a_harness_on_a_manual_clock_fires_a_schedule_at_its_instant(database_url: str) -> None:
    clock = ManualClock(datetime(2026, 11, 29, 9, tzinfo=UTC))
    with Harness(APP, database_url=database_url, clock=clock, actor="user:ann") as harness:
        assert harness.fire_schedules() == []
        clock.advance(hours=21)  # Monday 06:00, the schedule's instant
        (fired,) = harness.fire_schedules()
        assert (fired.workflow, fired.at) == ("weekly-summary", clock.now())
        assert harness.wait(fired.run_id).output == {"week_of": "2026-11-30"}
        # However often it is asked, and whatever the worker's sweep did, one run.
        again = harness.fire_schedules()
        assert [(f.run_id, f.started) for f in again] == [(fired.run_id, False)]
        assert len(harness.runs.list(workflow="weekly-summary")) == 1

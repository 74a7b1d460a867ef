"""The scenario steps about changes, on SQLite and Postgres: the shop's feature file
(`tests/apps/change_app/scenarios/change.feature`) takes a branch through checks, review, merge
and deploy on a repo the scenario makes from the app folder; a push to a failing change's
branch reaches it as the forge's webhook would; a scenario that opens a change is skipped inside
a change's own checks; and a step about changes in an app with no forge says what is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remit.changes.fake_forge import FakeForge
from remit.scenarios import Scenario, ScenarioFailed, read, run_scenario
from remit.scenarios.changes import CHECKING
from tests.change_support import CHANGE_APP, REPO, Shop, shop_at

# A change's checks are processes of their own: under load they take minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCENARIOS = read(CHANGE_APP / "scenarios" / "change.feature")
SCEN_APP = CHANGE_APP.parent / "scen_app"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Shop:
    return shop_at(tmp_path, monkeypatch)


def scenario_of(tmp_path: Path, steps: str) -> Scenario:
    path = tmp_path / "written.feature"
    path.write_text(
        "Feature: A change, as a test writes it\n  Scenario: Written here\n"
        + textwrap.indent(textwrap.dedent(steps), "    ")
    )
    (scenario,) = read(path)
    return scenario


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.title for s in SCENARIOS])
def test_each_change_scenario_of_the_shop_passes(
    scenario: Scenario, shop: Shop, database_url: str
) -> None:
    result = run_scenario(shop.app, scenario, database_url=database_url)
    assert result.scenario is scenario
    # The scenario's repo and fakes were its own, gone with it: the shop's forge (the test's
    # `$REMIT_FAKES_DIR`) holds no change and no branch of it.
    assert shop.forge.changes(REPO) == []
    assert shop.forge.head(REPO, "notes") is None
    assert os.environ["REMIT_FAKES_DIR"] == str(shop.fakes)
    assert CHECKING not in os.environ
    # The deploy bound the fake host's app in the scenario's own lockfile, not the app's.
    assert not (shop.folder / "remit.lock").exists()


def test_a_push_to_a_failing_change_s_branch_checks_it_again(
    shop: Shop, tmp_path: Path, database_url: str
) -> None:
    scenario = scenario_of(
        tmp_path,
        '''\
        Given the branch "broken" changes "tests/test_broken.py" to:
          """
          def test_the_shop_is_broken() -> None:
              assert False, "the shop is broken"
          """
        When ann opens a change of "broken" as $fix
        Then $fix is "failing"
        And the checks of $fix failed on "test"
        And $fix is waiting for "forge"
        When the branch "broken" changes "tests/test_broken.py" to:
          """
          def test_the_shop_is_mended() -> None:
              assert True
          """
        Then $fix is "review"
        And the checks of $fix passed
        ''',
    )
    run_scenario(shop.app, scenario, database_url=database_url)


def test_a_change_found_elsewhere_than_said_shows_its_checks(
    shop: Shop, tmp_path: Path, database_url: str
) -> None:
    scenario = scenario_of(
        tmp_path,
        '''\
        Given the branch "broken" changes "tests/test_broken.py" to:
          """
          def test_the_shop_is_broken() -> None:
              assert False, "the shop is broken"
          """
        When ann opens a change of "broken"
        Then $change is "review"
        ''',
    )
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(shop.app, scenario, database_url=database_url)
    report = failed.value.report
    assert "$change is failing" in report, report
    assert "- status | review" in report, report
    assert "+ test | failed" in report, report
    assert "+ plan | ok" in report, report


def test_a_change_no_step_opened_is_named(shop: Shop, tmp_path: Path, database_url: str) -> None:
    scenario = scenario_of(tmp_path, 'Then $nope is "review"\n')
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(shop.app, scenario, database_url=database_url)
    assert "$nope is not a change this scenario opened (its changes: none yet)" in str(failed.value)


def test_an_app_with_no_forge_has_no_repo_to_change(tmp_path: Path, database_url: str) -> None:
    from remit import load_app

    scenario = scenario_of(
        tmp_path,
        '''\
        Given the branch "notes" changes "NOTES.md" to:
          """
          notes
          """
        ''',
    )
    with pytest.raises(ScenarioFailed) as failed:
        run_scenario(load_app(SCEN_APP), scenario, database_url=database_url)
    assert "has no forge whose fake is a FakeForge, so a scenario has no repo" in str(failed.value)


def test_inside_a_change_s_checks_a_scenario_that_opens_a_change_is_skipped(
    shop: Shop,
) -> None:
    env = {**os.environ, CHECKING: "test"}
    done = subprocess.run(
        [sys.executable, "-m", "remit", "test", "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=shop.folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    assert "1 passed, 1 skipped" in shown, shown
    assert "it opens a change, and this is a change's own check" in shown, shown
    # The scenario never ran: the shop's forge holds no change.
    assert FakeForge().changes(REPO) == []

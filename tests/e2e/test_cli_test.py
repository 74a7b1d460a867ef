"""`remit test` on a copy of the test app: pytest collects its feature files through remit's
plugin, exits 0 when they pass, and prints the failing step's report when one fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCEN_APP = Path(__file__).resolve().parent.parent / "apps" / "scen_app"

FAILING = """\
Feature: Chasing, written wrong
  Background:
    Given it is 2026-11-29 09:00 UTC
    And an invoice inv_1 of 1200 due 2026-10-01

  Scenario: Two reminders expected
    When ann starts chase as $chase with:
      | invoice_id | inv_1 |
    Then the output of $chase is:
      | reminders | 2 |
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    copy = tmp_path / "scen_app"
    shutil.copytree(SCEN_APP, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def remit_test(app: Path, database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    server = "sqlite" if database_url.startswith("sqlite") else database_url
    return subprocess.run(
        [sys.executable, "-m", "remit", "--app", str(app), "test", "--database-url", server, *args],
        env={**os.environ, "COLUMNS": "200"},
        cwd=app.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_green_scenarios_exit_0(app: Path, database_url: str) -> None:
    done = remit_test(app, database_url, "-k", "letter")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed, 11 deselected" in done.stdout


def test_a_red_scenario_exits_1_naming_its_step(app: Path, database_url: str) -> None:
    (app / "scenarios" / "wrong.feature").write_text(FAILING)
    done = remit_test(app, database_url, "-k", "wrong or letter")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 3 passed" in done.stdout
    report = done.stdout
    assert "Scenario failed: Chasing, written wrong: Two reminders expected" in report
    assert f"  at {app / 'scenarios' / 'wrong.feature'}:9: Then the output of $chase is:" in report
    assert "  - reminders | 2\n  + reminders | 1\n" in report


def test_the_repos_own_tests_run_beside_its_scenarios(app: Path, database_url: str) -> None:
    (app / "test_books.py").write_text(
        "from scen_app.books import FakeBooks\n\n\n"
        "def test_a_new_fake_has_no_invoices() -> None:\n"
        "    assert FakeBooks().invoices == {}\n"
    )
    done = remit_test(app, database_url, "-k", "fake or lost")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_another_projects_feature_files_are_left_to_it(tmp_path: Path) -> None:
    # A project with remit installed, whose feature files are pytest-bdd's: no remit app here.
    project = tmp_path / "shop"
    (project / "tests" / "scenarios").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "tests" / "scenarios" / "login.feature").write_text(
        "Feature: Login\n  Scenario: A known user logs in\n    Given a user ann\n"
    )

    def pytest_in_project() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "remit.scenarios.pytest_plugin", "-q"],
            env={**os.environ, "COLUMNS": "200"},
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    nothing = pytest_in_project()
    assert nothing.returncode == 5, nothing.stdout + nothing.stderr  # no tests collected
    (project / "tests" / "test_login.py").write_text("def test_own() -> None:\n    pass\n")
    own = pytest_in_project()
    assert own.returncode == 0, own.stdout + own.stderr
    assert "1 passed" in own.stdout
    assert "login.feature" not in own.stdout + own.stderr

"""The scenario steps about changes read their parts, each as its own step and not as a
generic step about runs; a scenario that opens a change is known as one, and is skipped only
inside a change's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit.scenarios import read
from remit.scenarios.changes import CHECKING, opens_a_change, skipped_here
from remit.scenarios.generic import GENERIC

FEATURE = """\
Feature: Changes
  Scenario: One opens a change
    Given the branch "fix" changes "NOTES.md" to:
      \"\"\"
      notes
      \"\"\"
    When carol opens a change of "fix" as $fix

  Scenario: One does not
    Given the branch "fix" changes "NOTES.md" to:
      \"\"\"
      notes
      \"\"\"
"""


def said(text: str) -> tuple[str, dict[str, str]]:
    found = next((g, m) for g in GENERIC if (m := g.match(text)) is not None)
    return found[0].do.__name__, found[1]


def test_each_change_step_reads_its_parts() -> None:
    assert said('the branch "fix-dns" changes "resources/desk.py" to:') == (
        "branch_changes",
        {"branch": "fix-dns", "path": "resources/desk.py"},
    )
    assert said('ann opens a change of "fix-dns" titled "Point www at the new host" as $fix') == (
        "opens",
        {"who": "ann", "branch": "fix-dns", "title": "Point www at the new host", "name": "fix"},
    )
    assert said('agent:bot opens a change of "fix-dns"') == (
        "opens",
        {"who": "agent:bot", "branch": "fix-dns"},
    )
    assert said('$fix is "review"') == ("change_is", {"run": "fix", "status": "review"})
    assert said("$fix is deployed") == ("change_is", {"run": "fix", "status": "deployed"})
    assert said("$fix is rolled_back")[0] == "change_is"
    assert said("the checks of $fix passed") == ("checks_are", {"run": "fix", "passed": "passed"})
    assert said('the checks of $fix failed on "test" and "deploy-check"') == (
        "checks_are",
        {"run": "fix", "failed": '"test" and "deploy-check"'},
    )


def test_a_change_s_run_is_still_read_as_a_run() -> None:
    # `$fix is done` is its run's status; `carol approves $fix` decides its pending gate.
    assert said("$fix is done")[0] == "run_is"
    assert said("$fix is waiting")[0] == "run_is"
    assert said("carol approves $fix")[0] == "approves"
    assert not [g for g in GENERIC if g.match("$fix is mended")]


def test_a_scenario_that_opens_a_change_is_skipped_inside_a_change_s_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "changes.feature"
    path.write_text(FEATURE)
    opening, other = read(path)
    assert opens_a_change(opening)
    assert not opens_a_change(other)

    monkeypatch.delenv(CHECKING, raising=False)
    assert skipped_here(opening) is None
    monkeypatch.setenv(CHECKING, "test")
    assert skipped_here(opening) is not None
    assert "would check itself without end" in str(skipped_here(opening))
    assert skipped_here(other) is None

"""A harness under policies of the test's own, leaving the app it was given as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit import PolicyDenied
from remit.testing import Harness
from tests.support import make_app

ONLY_ANN_BUYS = """
permit (
    principal == User::"ann",
    action == Action::"start",
    resource == Workflow::"purchase"
);
"""


def test_a_harness_governed_by_a_test_folder_of_policies(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shop.cedar").write_text(ONLY_ANN_BUYS)
    app = make_app()
    workflows = set(app.workflows)

    with Harness(app, database_url=database_url, policies=tmp_path / "policies") as harness:
        assert harness.run("purchase", {"sku": "sku-1"}, by="user:ann").status == "done"
        with pytest.raises(PolicyDenied, match="user:bob"):
            harness.start("purchase", {"sku": "sku-2"}, by="user:bob")
        assert [row.principal for row in harness.client.services.guard.denials()] == ["user:bob"]

    # The app the test holds is not governed, and gained no built-in workflow.
    assert not app.policy.enabled
    assert set(app.workflows) == workflows


def test_a_harness_replaces_the_policies_of_an_app_that_has_some(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shop.cedar").write_text(ONLY_ANN_BUYS)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "shop.cedar").write_text(ONLY_ANN_BUYS.replace("ann", "bob"))
    app = make_app()
    app.use_policies(tmp_path / "policies")

    with Harness(app, database_url=database_url, policies=tmp_path / "other") as harness:
        assert harness.run("purchase", {"sku": "sku-1"}, by="user:bob").status == "done"
        with pytest.raises(PolicyDenied, match="user:ann"):
            harness.start("purchase", {"sku": "sku-2"}, by="user:ann")

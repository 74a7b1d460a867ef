"""What `remit init` plans to make, by the rule: an app in a folder that is a repo, else a new
repo; refusals before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit.core.errors import InitRefused
from remit.init.scaffold import REPO_MARKERS, plan


@pytest.mark.parametrize("marker", REPO_MARKERS)
def test_a_folder_holding_any_marker_is_a_repo_that_gets_an_app(
    tmp_path: Path, marker: str
) -> None:
    if marker.endswith(".py"):
        (tmp_path / marker).write_text("")
        with pytest.raises(InitRefused, match="declares the repo's App"):
            plan("billing", tmp_path)
        return
    (tmp_path / marker).mkdir()
    made = plan("billing", tmp_path)
    assert made.kind == "app"
    assert made.root == tmp_path.resolve()
    assert set(made.files) == {
        "apps/billing/workflows/refund.py",
        "apps/billing/scenarios/refund.feature",
        "connectors/billing_shop.py",
        "tests/test_billing.py",
    }
    assert list(tmp_path.iterdir()) == [tmp_path / marker]  # planning writes nothing


def test_elsewhere_it_plans_a_repo_whose_app_has_the_same_name(tmp_path: Path) -> None:
    made = plan("acme_ops", tmp_path)
    assert made.kind == "repo"
    assert made.root == tmp_path.resolve() / "acme_ops"
    assert 'when { resource.app == "acme_ops" };' in made.files["policies/acme_ops.cedar"]
    workflow = made.files["apps/acme_ops/workflows/refund.py"]
    assert 'ApprovalType(\n    "acme-ops-refund"' in workflow
    assert "from ....connectors.shop import get_order, refund_order" in workflow
    assert "{{" not in "".join(made.files.values())
    assert made.tree().splitlines()[:3] == ["acme_ops/", "├── apps/", "│   └── acme_ops/"]
    assert list(tmp_path.iterdir()) == []


def test_the_filled_templates_of_an_app_name_its_own_vendor(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()  # policies alone do not make a repo
    assert plan("field_ops", tmp_path).kind == "repo"
    (tmp_path / "connectors").mkdir()
    made = plan("field_ops", tmp_path)
    connector = made.files["connectors/field_ops_shop.py"]
    assert 'steps("field_ops_shop")' in connector
    assert '"the field ops shop has an order {order_id} of {amount:d} cents"' in connector
    assert "class FakeFieldOpsShop(Fake):" in connector
    assert 'credentials = ("FIELD_OPS_SHOP_API_KEY",)' in connector
    assert 'principal == User::"carol"' in made.files["policies/field_ops.cedar"]


def test_inside_a_repos_apps_folder_it_points_at_the_repo(tmp_path: Path) -> None:
    (tmp_path / "apps" / "ar").mkdir(parents=True)
    for where in (tmp_path / "apps", tmp_path / "apps" / "ar"):
        with pytest.raises(InitRefused) as refused:
            plan("billing", where)
        assert f"run `remit init billing` in {tmp_path}" in str(refused.value)

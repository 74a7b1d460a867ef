"""A gate assigned to a group the data files declare, in an app with no `policies/` folder: no
policy checks anything, yet the declared group's members decide it and no one else does (on
SQLite and Postgres)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit import App, DecisionRefused
from remit.resources.people import group, person
from remit.testing import Harness
from tests.integration.test_approvals_withdraw import errand
from tests.support import REFUND, shop


def open_desk(tmp: Path) -> App:
    """The errand app with no policies, whose data files declare Ann, Carol and the
    controllers (Carol in them)."""
    app = App(name="desk", workflows=[errand], connectors=[shop], approvals=[REFUND])
    app.use_resources(
        declarations={
            "ann": person(principal="user:ann"),
            "carol": person(principal='User::"carol"'),
            "controllers": group(name="controllers", members=["user:carol"]),
        },
        lockfile=tmp / "remit.lock",
    )
    return app


def test_a_declared_group_decides_its_gate_with_no_policies(
    database_url: str, tmp_path: Path
) -> None:
    app = open_desk(tmp_path)
    assert not app.policy.enabled
    with Harness(app, database_url=database_url, actor="user:ann") as h:
        run = h.start("errand", {"sku": "sku-1", "assignee": "group:controllers"})
        gate = h.gate(run.run_id)
        assert gate.assignee == "group:controllers"
        assert [i.approval.id for i in h.approvals.decidable(by="user:carol")] == [gate.id]
        assert h.approvals.decidable(by="user:ann") == []
        with pytest.raises(DecisionRefused):
            h.decide(gate.id, "approved", by="user:ann")
        assert h.approvals.get(gate.id).status == "pending"
        h.decide(gate.id, "approved", by="user:carol")
        assert h.wait(run.run_id).output == {
            "branch": "approved",
            "order_id": "ord_1",
            "by": "user:carol",
        }

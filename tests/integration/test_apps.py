"""Apps in one repo: two apps with a workflow `chase` each and a collection `notes` each, kept
apart by name, run by one worker, and governed by policies that name the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from remit import load_app
from remit.core.errors import AppError
from remit.policy.cedar import PolicyDenied
from remit.testing import Harness

REPO = Path(__file__).parents[1] / "apps" / "ops_repo"


def test_an_apps_workflows_collections_and_queues_carry_its_name() -> None:
    app = load_app(REPO)
    assert app.apps == {"ar": ["ar.chase"], "payroll": ["payroll.chase"]}
    assert app.workflow("hello").app is None  # the root's keeps its plain name
    assert app.workflow("ar.chase").queue == "ar.default"
    assert {"default", "ar.default", "payroll.default"} <= set(app.queues)
    assert sorted(app.collections) == ["ar.notes", "payroll.notes"]
    assert "data.ar.notes.put" in app.ops
    assert "data.payroll.notes.put" in app.ops
    listed = app.listing()
    assert [(entry.name, entry.workflows, entry.collections) for entry in listed.apps] == [
        ("ar", ["ar.chase"], ["ar.notes"]),
        ("payroll", ["payroll.chase"], ["payroll.notes"]),
    ]


def test_two_apps_run_their_own_chase_and_keep_their_notes_apart(database_url: str) -> None:
    app = load_app(REPO)
    with Harness(app, database_url=database_url, actor="user:sam") as h:
        ar = h.run("ar.chase", {"who": "kim"})
        ar_again = h.run("ar.chase", {"who": "kim"})
        payroll = h.run("payroll.chase", {"who": "kim"})
        assert (ar.status, ar_again.status, payroll.status) == ("done", "done", "done")
        assert ar_again.output["times"] == 2
        assert payroll.output == {"app": "payroll", "times": 1, "message_id": "msg_3"}
        in_ar = h.call("data.ar.notes.get", {"who": "kim"}).output
        in_payroll = h.call("data.payroll.notes.get", {"who": "kim"}).output
        assert in_ar["record"] == {"who": "kim", "times": 2, "by_app": "ar"}
        assert in_payroll["record"] == {"who": "kim", "times": 1, "by_app": "payroll"}
        assert [row.op_id for row in h.ledger(payroll.run_id)] == [
            "data.payroll.notes.get",
            "data.payroll.notes.put",
            "notify.notes.send",
        ]
        assert h.run("hello", {"who": "ann"}).output == "hello ann"
        listed = h.call("remit.apps.list", {}, by="user:pat").output
        assert [entry["name"] for entry in listed["apps"]] == ["ar", "payroll"]


def test_a_policy_naming_the_app_lets_its_clerks_start_only_its_workflows(
    database_url: str,
) -> None:
    app = load_app(REPO)
    with Harness(app, database_url=database_url) as h:
        assert h.run("ar.chase", {"who": "lee"}, by="user:ann").status == "done"
        with pytest.raises(PolicyDenied, match=r"payroll\.chase"):
            h.start("payroll.chase", {"who": "lee"}, by="user:ann")
        assert h.run("payroll.chase", {"who": "lee"}, by="user:pat").status == "done"
        with pytest.raises(PolicyDenied, match=r"ar\.chase"):
            h.start("ar.chase", {"who": "lee"}, by="user:pat")
        assert h.run("hello", {}, by="user:pat").status == "done"


def test_an_app_folder_with_a_name_that_cannot_prefix_its_workflows_is_refused(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "bad_repo"
    (repo / "apps" / "Accounts-Receivable" / "workflows").mkdir(parents=True)
    (repo / "apps" / "Accounts-Receivable" / "workflows" / "x.py").write_text("")
    (repo / "workflows").mkdir()
    (repo / "workflows" / "w.py").write_text(
        "from pydantic import BaseModel\n"
        "from remit import workflow\n"
        "class I(BaseModel):\n    pass\n"
        "@workflow(name='w', input=I)\n"
        "def w(ctx, input):\n    return None\n"
    )
    with pytest.raises(AppError, match=r"apps/Accounts-Receivable.*apps/accounts_receivable"):
        load_app(repo)

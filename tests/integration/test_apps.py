"""Apps in one repo: two apps with a workflow `chase` each and a collection `notes` each, kept
apart by name, run by one worker, and governed by policies that name the app."""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import App, Context, load_app, workflow
from remit.core.database import Database
from remit.core.errors import AppError
from remit.core.runs import RunStore
from remit.ops.reconciler import Reconciler
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


gate = threading.Event()


class Nap(BaseModel):
    n: int = 1


@workflow(name="slow", input=Nap)
def slow(ctx: Context, input: Nap) -> int:
    return ctx.step("wait", lambda: (gate.wait(30), input.n)[1], output=int)


def test_another_repos_reconciler_leaves_this_repos_running_runs_alone(database_url: str) -> None:
    # Repo B's run is in a long step; repo A's reconciler on the same database sees an attempt
    # of a version none of its workers runs, and must not take it for one of its own orphans.
    gate.clear()
    repo_b = App(name="repo-b", workflows=[slow])
    with Harness(repo_b, database_url=database_url) as h:
        run = h.start("slow", {})
        h.wait(run.run_id, until=("running",))
        db = Database(database_url)
        try:
            repo_a = Reconciler(
                RunStore(db, app="repo-a"),
                db.client("repo-a"),
                version="version-of-a",
                live_versions=lambda: {"version-of-a"},
            )
            assert repo_a.run_pass(dry_run=True).actions == []
        finally:
            db.dispose()
        gate.set()
        done = h.wait(run.run_id)
        assert (done.status, done.attempt) == ("done", 1)


def _repo(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    root = tmp_path / name
    for path, text in {"workflows/__init__.py": "", **files}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(textwrap.dedent(text))
    return root


WF = textwrap.dedent("""
    from pydantic import BaseModel
    from remit import workflow

    class I(BaseModel):
        pass

    @workflow(name="w", input=I{queue})
    def w(ctx, input):
        return None
""")


def test_an_apps_queue_declared_after_its_workflows_replaces_the_default(tmp_path: Path) -> None:
    root = _repo(
        tmp_path,
        "queued_repo",
        {
            "apps/ar/workflows/a.py": WF.format(queue=""),
            "apps/ar/workflows/b.py": "from remit import Queue\nq = Queue('default', concurrency=2)\n",
            "apps/ar/workflows/c.py": WF.replace('"w"', '"m"').format(queue=', queue="ar.mail"'),
            "apps/ar/workflows/d.py": "from remit import Queue\nq = Queue('mail')\n",
        },
    )
    app = load_app(root)
    assert app.queues["ar.default"].concurrency == 2
    assert app.workflow("ar.m").queue == "ar.mail"  # a dotted queue is an app's already


def test_a_budget_in_an_apps_folder_names_one_of_its_workflows(tmp_path: Path) -> None:
    root = _repo(
        tmp_path,
        "budget_repo",
        {
            "apps/ar/workflows/a.py": WF.format(queue="")
            + "\nfrom remit import Budget\nlimit = Budget('5')\n",
        },
    )
    with pytest.raises(AppError, match=r"a Budget in an app's folder .* workflow=\.\.\."):
        load_app(root)


def test_the_roots_budgets_may_name_an_apps_workflow(tmp_path: Path) -> None:
    app_py = (
        "from remit import App, Budget\n"
        "app = App(name='r', workflows=[], budgets=iter([Budget('5', workflow='ar.{name}')]))\n"
    )
    root = _repo(
        tmp_path,
        "root_budget_repo",
        {"app.py": app_py.format(name="w"), "apps/ar/workflows/a.py": WF.format(queue="")},
    )
    assert [b.scope for b in load_app(root).budgets] == ["workflow:ar.w"]
    wrong = _repo(
        tmp_path,
        "wrong_budget_repo",
        {"app.py": app_py.format(name="nope"), "apps/ar/workflows/a.py": WF.format(queue="")},
    )
    with pytest.raises(AppError, match=r"budget for the workflow `ar\.nope`"):
        load_app(wrong)


def test_an_apps_module_imported_before_the_repo_loads_is_still_the_apps(tmp_path: Path) -> None:
    root = _repo(tmp_path, "early_repo", {"apps/ar/workflows/a.py": WF.format(queue="")})
    sys.path.insert(0, str(tmp_path))
    try:
        early = importlib.import_module("early_repo.apps.ar.workflows.a")
        assert early.w.name == "ar.w"
        assert load_app(root).apps == {"ar": ["ar.w"]}
    finally:
        sys.path.remove(str(tmp_path))

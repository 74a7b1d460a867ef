"""People as declarations: a person and a group declared in the data files, referenced by a
host's owner, planned and applied with no vendor call for them (apply binds only the host, on
SQLite and Postgres); the policies take the declared group as principals.toml's; and a
principal or group that both name is refused, as is a declaration that does not hold."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit import App, AppError, ref
from remit.connectors.base import CallContext
from remit.declare.ops import Op
from remit.resources.people import group, person
from remit.resources.planner import Change
from remit.testing import Harness

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "apps"))

from alarmed_app.app import hourly
from alarmed_app.clock import FakeClockhost, clockhost, site

POLICY = 'permit (principal in Group::"clerks", action == Action::"start", resource);\n'


def people_app(tmp: Path, **extra: Any) -> App:
    """An app whose data files declare ann, the clerks (ann in them) and a host ann owns."""
    app = App(name="peopled", workflows=[hourly], connectors=[clockhost])
    declarations = {
        "ann": person(principal="user:ann", name="Ann Example"),
        "clerks": group(name="clerks", members=["user:ann"]),
        "web": site(name="desk", owner=ref("ann", "principal")),
        **extra,
    }
    app.use_resources(declarations=declarations, lockfile=tmp / "remit.lock")
    return app


def planned_on_fakes(app: App, called: list[str]) -> tuple[Change, ...]:
    """The changes a plan of `app`'s declarations finds against the clockhost fake, each op it
    calls added to `called`."""
    assert app.resources is not None
    fake = FakeClockhost()

    def call(op: Op[Any, Any], payload: dict[str, Any], key: str) -> BaseModel:
        called.append(op.id)
        context = CallContext(
            op=op, idempotency_key=key, run_id="run_test", attempt=1, actor="user:t", environ={}
        )
        return fake.invoke(op, op.input.model_validate(payload), context)

    return app.resources.plan(call, {}).changes


def test_a_host_owned_by_a_declared_person_plans_with_no_call_for_the_person(
    tmp_path: Path,
) -> None:
    called: list[str] = []
    (change,) = planned_on_fakes(people_app(tmp_path), called)
    assert called == ["clockhost.app.plan"]
    assert (change.name, change.action) == ("web", "create")
    assert change.desired is not None
    assert change.desired["owner"] == "user:ann"


def test_apply_makes_the_host_and_binds_no_person(database_url: str, tmp_path: Path) -> None:
    app = people_app(tmp_path)
    fake = FakeClockhost()
    with Harness(app, database_url=database_url, implementations={"clockhost": fake}) as h:
        run = h.run("apply", {})
        assert run.status == "done", run.error
        calls = [row.op_id for row in h.ledger(run.run_id)]
    assert [r["owner"] for r in fake.records(site).values()] == ["user:ann"]
    assert all(not op_id.startswith("remit.") for op_id in calls), calls
    assert app.resources is not None
    assert set(app.resources.lockfile.read()) == {"web"}


def test_the_policies_take_a_declared_group_as_their_own(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "main.cedar").write_text(POLICY)
    app = people_app(tmp_path)
    app.use_policies(policies)
    assert app.policy.problem is None
    assert app.policy.groups["clerks"] == frozenset({"user:ann"})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        pytest.param(
            '[groups]\nclerks = ["user:bob"]\n',
            "the group `clerks` is declared in the data files (a remit.group) and defined in "
            "policies/principals.toml's [groups]: each group has one source; remove it from "
            "one of them (a group there may still list group:clerks among its members)",
            id="a group",
        ),
        pytest.param(
            '[groups]\nauditors = ["user:ann"]\n',
            "user:ann is declared in the data files (a remit.person) and listed in "
            "policies/principals.toml: each principal has one source; remove them from "
            "policies/principals.toml and list them in declared groups, or remove the "
            "declaration",
            id="a person",
        ),
    ],
)
def test_a_principal_or_group_both_sources_name_is_refused(
    tmp_path: Path, toml: str, message: str
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "main.cedar").write_text(POLICY)
    (policies / "principals.toml").write_text(toml)
    app = people_app(tmp_path)
    app.use_policies(policies)
    assert app.policy.problem == message


def test_principals_toml_alone_keeps_working(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "main.cedar").write_text(POLICY)
    (policies / "principals.toml").write_text('[groups]\nauditors = ["user:bob"]\n')
    app = people_app(tmp_path)
    app.use_policies(policies)
    assert app.policy.problem is None
    assert app.policy.groups["auditors"] == frozenset({"user:bob"})
    assert app.policy.groups["clerks"] == frozenset({"user:ann"})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            {"leads": group(name="leads", members=["user:zed"])},
            "resource `leads`: the group `leads` lists `user:zed`, whom no data file declares: "
            'declare them (`person(principal="user:zed")`), or keep this group in '
            "policies/principals.toml instead",
            id="an undeclared member",
        ),
        pytest.param(
            {"leads": group(name="leads", members=["group:auditors"])},
            "resource `leads`: the group `leads` lists `group:auditors`, a group no data file "
            'declares: declare it (`group(name="auditors", ...)`), or keep this group in '
            "policies/principals.toml instead",
            id="an undeclared group",
        ),
        pytest.param(
            {"leads": group(name="leads", members=["ann"])},
            "resource `leads`: the group `leads` lists `ann`, which is no principal: list "
            "`user:<name>`, `agent:<name>` or `group:<name>`",
            id="a member that is no principal",
        ),
        pytest.param(
            {"ann2": person(principal='User::"ann"')},
            "resources `ann` and `ann2` both declare the person user:ann: keep one",
            id="one principal twice, spelt two ways",
        ),
        pytest.param(
            {"ann2": person(principal="user:ann")},
            "resources `ann` and `ann2` both declare the person user:ann: keep one",
            id="one principal twice",
        ),
        pytest.param(
            {"who": person(principal="ann")},
            "resource `who`: `ann` is not a principal policies know",
            id="not a principal",
        ),
        pytest.param(
            {"other": site(name="x", owner=ref("web", "name"))},
            "resource `other`: `owner` takes a reference to a remit.person or remit.group, "
            "and `web` is a clockhost.app",
            id="an owner that is no person",
        ),
    ],
)
def test_people_that_do_not_hold_are_refused(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(AppError) as refused:
        people_app(tmp_path, **extra)
    assert message in str(refused.value)


def test_a_principal_spelt_as_cedar_writes_it_is_the_same_person(tmp_path: Path) -> None:
    app = App(name="peopled", workflows=[hourly], connectors=[clockhost])
    declarations = {
        "ann": person(principal='User::"ann"'),
        "clerks": group(name="clerks", members=["user:ann", 'Agent::"ar-bot"']),
        "bot": person(principal="agent:ar-bot"),
        "web": site(name="desk", owner=ref("ann", "principal")),
    }
    app.use_resources(declarations=declarations, lockfile=tmp_path / "remit.lock")
    assert app.policy.groups["clerks"] == frozenset({"user:ann", "agent:ar-bot"})
    (change,) = planned_on_fakes(app, [])
    assert change.desired is not None
    assert change.desired["owner"] == "user:ann"


def test_a_principals_toml_group_may_hold_a_declared_group(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "main.cedar").write_text(
        'permit (principal in Group::"controllers", action == Action::"start", resource);\n'
    )
    (policies / "principals.toml").write_text(
        '[groups]\ncontrollers = ["group:clerks", "user:bob"]\n'
    )
    app = people_app(tmp_path)
    app.use_policies(policies)
    assert app.policy.problem is None
    assert app.policy.groups["controllers"] == frozenset({"user:ann", "user:bob"})
    assert app.policy.check("user:ann", "start", "hourly", {}).allowed
    assert not app.policy.check("user:eve", "start", "hourly", {}).allowed

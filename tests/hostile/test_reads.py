"""Every read route of the HTTP API and every page of the console, walked as a principal no
policy names (mallory) and as one the policies let only start runs (ann): a list holds nothing
they may not read, and a single thing is 403 with one denial row; carol, who may do anything,
reads it all. Lists ask the policies once per workflow, not once per run.

The walk is over the routes the API has, so a read route added later without a rule here
fails the first test."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remit import App, DriverError
from remit.policy.cedar import Action, Policy, Verdict
from remit.serve.api import create_api
from remit.testing import Harness
from tests.console_support import sign_in
from tests.support import FakeShop, governed_shop, send_email

POLICIES = (
    'permit (principal == User::"carol", action, resource);\n'
    'permit (principal == User::"ann", action == Action::"start", resource);\n'
    'permit (principal == User::"pat", action == Action::"read_runs", resource == '
    'Workflow::"refund");\n'
)
MALLORY, ANN, CAROL, PAT = "user:mallory", "user:ann", "user:carol", "user:pat"
# Named by no policy, as mallory, each for a test of its own.
NOBODY, ZED, EVE = "user:nobody", "user:zed", "user:eve"
RECORD = ("order", "ord-7")

# Each read route: a list (what may not be read is left out) or one thing (403 and a denial
# row naming the action), and how to fill its path and query.
LISTS = {
    "/runs": {},
    "/approvals": {},
    "/tasks": {},
    "/ledger": {},
    "/records/{record_type}/{record_id}/activity": {},
}
ONE = {
    "/runs/{run_id}": "read_runs",
    "/runs/{run_id}/steps": "read_runs",
    "/runs/{run_id}/messages": "read_runs",
    "/runs/{run_id}/state": "read_runs",
    "/runs/{run_id}/children": "read_runs",
    "/approvals/{approval_id}": "read_approvals",
    "/tasks/{task_id}": "read_runs",
    "/budgets": "read_operations",
    "/deadlines": "read_operations",
    "/workers": "read_operations",
    "/denials": "read_operations",
    "/audit": "read_operations",
    "/secrets": "read_operations",
    "/schedules": "read_operations",
    "/tokens": "manage_tokens",
}
# Changes are the runs of the built-in `change`, read whole or not at all (`read_runs` on
# `change`): a list is empty, and one change 403, for a principal who may not read them. The
# shop has no forge remote, so it has no changes (test_changes_are_read_as_the_runs_of_change).
CHANGES = {"/changes": "list", "/deploys": "list", "/changes/{change_id}": "read_runs"}
# Chats with the operator agent are their owner's, another's read as `read_chats` allows
# (tests/e2e/test_api_chats.py). The shop has no operator agent, so it has no chats
# (test_an_app_with_no_agent_has_no_chats_to_read).
CHATS = {
    "/chats",
    "/chats/{chat_id}",
    "/chats/{chat_id}/messages",
    "/chats/{chat_id}/events",
}
# Not a read of the app's data: its state for probes, its spec, or a wake-up.
OPEN = {"/health", "/wake", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


@dataclass
class Shop:
    harness: Harness
    http: TestClient
    run: str  # a purchase waiting at its task
    gated: str  # a refund waiting at its gate
    approval: str
    task: str
    direct_task: str  # a direct call's: no run holds it
    tokens: dict[str, str]

    def get(self, path: str, who: str, params: Mapping[str, Any] | None = None) -> Any:
        if who not in self.tokens:
            self.tokens[who] = self.harness.client.services.tokens.create(who, by=CAROL)[1]
        return self.http.get(
            path, params=params, headers={"Authorization": f"Bearer {self.tokens[who]}"}
        )

    def fill(self, path: str) -> str:
        return (
            path.replace("{run_id}", self.run)
            .replace("{approval_id}", self.approval)
            .replace("{task_id}", self.task)
            .replace("{record_type}", RECORD[0])
            .replace("{record_id}", RECORD[1])
        )

    def denials(self, who: str) -> list[tuple[str, str]]:
        return sorted(
            (d.action, d.resource)
            for d in self.harness.client.services.guard.denials(limit=1000)
            if d.principal == who
        )


def _app(tmp_path: Path) -> App:
    return governed_shop(tmp_path, POLICIES)


@pytest.fixture(scope="module")
def desk(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """One shop for the module's tests (once per database). Each test reads as principals of
    its own, so the denial rows it checks are its own whatever the order."""
    folder = tmp_path_factory.mktemp("reads")
    with Harness(_app(folder), database_url=database, actor=CAROL) as harness:
        harness.fake("shop", FakeShop).failures[send_email.id] = [
            DriverError("mail relay timeout", retryable=True, status=504)
        ]
        run = harness.start("purchase", {"sku": "sku-1"}, record=RECORD)
        task = harness.task(run.run_id)
        gated = harness.start("refund", {"sku": "sku-1"}, record=RECORD)
        gate = harness.gate(gated.run_id)
        harness.fake("shop", FakeShop).failures[send_email.id] = [
            DriverError("mail relay timeout", retryable=True, status=504)
        ]
        harness.call(send_email.id, {"to": "a@example.com", "text": "hi"}, by=CAROL)
        [direct_task] = [t for t in harness.client.services.tasks.list() if t.id != task.id]
        tokens: dict[str, str] = {}
        api = create_api(harness.client, allowed_hosts=["testserver"])
        with TestClient(api) as http:
            yield Shop(
                harness, http, run.run_id, gated.run_id, gate.id, task.id, direct_task.id, tokens
            )


def test_every_read_route_has_a_rule_here(desk: Shop) -> None:
    spec = desk.get("/openapi.json", CAROL).json()
    reads = {path for path, methods in spec["paths"].items() if "get" in methods}
    assert reads - OPEN == set(LISTS) | set(ONE) | set(CHANGES) | CHATS


def test_an_app_with_no_agent_has_no_chats_to_read(desk: Shop) -> None:
    """Every read of chats is 404 on the shop, which declares no operator agent, saying so,
    whoever asks, and refuses no one: there is nothing to refuse."""
    hal = "user:hal"  # named by no policy, as mallory
    for who in (hal, CAROL):
        for path in CHATS:
            answer = desk.get(path.replace("{chat_id}", "chat_0123456789ab"), who)
            assert answer.status_code == 404, (path, answer.text)
            assert "app `shop` has no operator agent" in answer.json()["error"], path
    assert desk.denials(hal) == []


def test_changes_are_read_as_the_runs_of_change(desk: Shop) -> None:
    """mel, named by no policy, may not read the runs of `change`: the lists hold nothing for
    her, and one change is 403, recorded, whether or not it is there. carol may: the shop, with
    no forge remote, has no deploys, and says why it has no changes."""
    mel = "user:mel"
    for path, rule in CHANGES.items():
        answer = desk.get(path.replace("{change_id}", "chg_0123456789ab"), mel)
        if rule == "list":
            assert (answer.status_code, answer.json()) == (200, []), path
        else:
            assert answer.status_code == 403, answer.text
            assert f"{mel} may not read_runs" in answer.json()["error"]
    assert desk.denials(mel) == [("read_runs", "change")]
    assert desk.get("/deploys", CAROL).json() == []
    for path in ("/changes", "/changes/chg_0123456789ab"):
        answer = desk.get(path, CAROL)
        assert answer.status_code == 404, answer.text
        assert "has no forge remote, so it has no changes" in answer.json()["error"]


@pytest.mark.parametrize("who", [MALLORY, ANN])
def test_a_principal_the_policies_give_no_reads_reads_nothing(desk: Shop, who: str) -> None:
    for path in LISTS:
        answer = desk.get(desk.fill(path), who)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json() == [], path
    assert desk.get("/ledger", who, {"run": desk.run}).status_code == 403
    assert desk.denials(who) == [("read_runs", "purchase")]  # lists record nothing

    for path, action in ONE.items():
        params = {"target": desk.run} if path == "/audit" else None
        answer = desk.get(desk.fill(path), who, params)
        assert answer.status_code == 403, (path, answer.text)
        assert f"{who} may not {action}" in answer.json()["error"], path
    expected = [("read_runs", "purchase")] + [
        (action, _resource(path, action)) for path, action in ONE.items()
    ]
    assert desk.denials(who) == sorted(expected)


def _resource(path: str, action: str) -> str:
    if action == "read_approvals":
        return "refund"
    if action == "read_runs":
        return "purchase"
    return "shop"


def test_whoever_may_read_everything_reads_it_all(desk: Shop) -> None:
    listed = {run["run_id"] for run in desk.get("/runs", CAROL).json()}
    assert {desk.run, desk.gated} <= listed
    assert [a["id"] for a in desk.get("/approvals", CAROL).json()] == [desk.approval]
    assert {t["id"] for t in desk.get("/tasks", CAROL).json()} == {desk.task, desk.direct_task}
    assert {row["run_id"] for row in desk.get("/ledger", CAROL).json()} >= {desk.run}
    activity = desk.get(desk.fill("/records/{record_type}/{record_id}/activity"), CAROL).json()
    assert {row["run_id"] for row in activity} >= {desk.run, desk.gated}
    for path in ONE:
        params = {"target": desk.run} if path == "/audit" else None
        assert desk.get(desk.fill(path), CAROL, params).status_code == 200, path
    assert desk.denials(CAROL) == []


def test_a_list_asks_the_policies_once_per_workflow_not_once_per_run(desk: Shop) -> None:
    for _ in range(30):  # purchases: done at once, and read by no one but carol
        desk.harness.start("purchase", {"sku": "sku-1"}, by=CAROL)
    counting = _Counting(desk.harness.client.services.guard.policy)
    desk.harness.client.services.guard.policy = counting  # type: ignore[assignment]
    listed = desk.get("/runs", CAROL, {"limit": 100}).json()
    assert len(listed) >= 32
    workflows = len({*desk.harness.app.workflows, "call"})  # with the built-in `call`
    # One check a workflow, and one of the operations (runs of workflows the app no longer has).
    assert counting.asked == {"read_runs": workflows, "read_operations": 1}


class _Counting:
    """The app's policies, counting what they are asked, by action."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.enabled = policy.enabled
        self.asked: dict[str, int] = {}

    def check(
        self, principal: str, action: Action, resource: str, context: Mapping[str, Any]
    ) -> Verdict:
        self.asked[action] = self.asked.get(action, 0) + 1
        return self.policy.check(principal, action, resource, context)


CONSOLE_LISTS = (
    "/console/runs",
    "/console/ledger",
    "/console/tasks",
    "/console/inbox",
    "/console/changes",
    "/console/ask",
)
CONSOLE_ONE = (
    "/console/runs/{run_id}",
    "/console/runs/{run_id}/live",
    "/console/operations",
    "/console/budgets",
    "/console/resources",
)


def test_the_console_shows_a_principal_with_no_reads_nothing(desk: Shop) -> None:
    sign_in(desk.http, desk.harness, EVE)
    for path in CONSOLE_LISTS:
        page = desk.http.get(path)
        assert page.status_code == 200, path
        for ident in (desk.run, desk.gated, desk.approval, desk.task):
            assert ident not in page.text, (path, ident)
    for path in CONSOLE_ONE:
        page = desk.http.get(desk.fill(path))
        assert page.status_code == 403, path
        assert "Refused by the policies" in page.text, path

    sign_in(desk.http, desk.harness, CAROL)
    assert desk.run in desk.http.get("/console/runs").text
    assert desk.task in desk.http.get("/console/tasks").text
    for path in CONSOLE_ONE:
        assert desk.http.get(desk.fill(path)).status_code == 200, path


def test_a_principal_who_reads_one_workflow_sees_its_runs_alone(desk: Shop) -> None:
    assert [run["run_id"] for run in desk.get("/runs", PAT).json()] == [desk.gated]
    assert desk.get(f"/runs/{desk.gated}", PAT).status_code == 200
    assert desk.get(f"/runs/{desk.run}", PAT).status_code == 403
    assert desk.get("/tasks", PAT).json() == []  # the purchase's and the direct call's
    assert {row["run_id"] for row in desk.get("/ledger", PAT).json()} == {desk.gated}
    activity = desk.get(desk.fill("/records/{record_type}/{record_id}/activity"), PAT).json()
    assert {row["run_id"] for row in activity} == {desk.gated}
    assert desk.get("/approvals", PAT).json() == []  # gates are read_approvals
    # A prefix matches only what may be read: `run_` is pat's one refund run.
    assert desk.get("/runs/run_", PAT).json()["run_id"] == desk.gated
    assert desk.denials(PAT) == [("read_runs", "purchase")]


def test_a_prefix_names_no_id_its_reader_may_not_read(desk: Shop) -> None:
    for path in ("/runs/run_", "/runs/run_/steps", "/tasks/tsk_", "/approvals/apr_"):
        answer = desk.get(path, NOBODY)
        assert answer.status_code == 404, (path, answer.text)
        for ident in (desk.run, desk.gated, desk.task, desk.approval, desk.direct_task):
            assert ident not in answer.text, path
    assert desk.get("/tasks", NOBODY, {"run": "run_"}).json() == []
    assert desk.denials(NOBODY) == []  # nothing was found to refuse


def test_a_direct_calls_task_is_the_operations(desk: Shop) -> None:
    assert desk.get(f"/tasks/{desk.direct_task}", CAROL).status_code == 200
    assert desk.direct_task in {t["id"] for t in desk.get("/tasks", CAROL).json()}
    refused = desk.get(f"/tasks/{desk.direct_task}", ZED)
    assert refused.status_code == 403
    assert "may not read_operations" in refused.json()["error"]


def test_a_refused_post_in_the_console_shows_nothing_its_poster_may_not_read(
    desk: Shop,
) -> None:
    csrf = sign_in(desk.http, desk.harness, EVE)
    task = desk.harness.client.services.tasks.get(desk.task)
    answered = desk.http.post(
        f"/console/tasks/{desk.task}", data={"csrf": csrf, "done": "perhaps", "key": "k1"}
    )
    assert answered.status_code == 403
    assert "read_runs" in answered.text
    assert task.input is not None
    assert task.input["to"] not in answered.text
    decided = desk.http.post(
        f"/console/inbox/{desk.approval}", data={"csrf": csrf, "decision": "maybe", "key": "k2"}
    )
    assert decided.status_code == 403
    assert "read_approvals" in decided.text
    assert desk.harness.client.approvals.get(desk.approval).status == "pending"
    assert desk.harness.client.services.tasks.get(desk.task).status == "open"

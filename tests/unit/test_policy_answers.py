"""The answers a `Policy` keeps: the same request is answered as Cedar answered it, without
asking again; a context is part of the request wherever a policy that may apply reads it; a
reloaded policy set (a new `Policy`) answers afresh; evaluation errors are logged with every
answer; and what is kept is bounded."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from remit.policy import cedar
from remit.policy.cedar import ACTIONS, Catalog, Policy


class Refund(BaseModel):
    order: str
    amount: int = 0
    rush: bool = False


class Draft(BaseModel):
    amount: int


CATALOG = Catalog(
    workflows={"refund": Refund},
    ops={"shop.refunds.create": (Refund, "write", True)},
    approval_types={"refund": Draft},
)
GROUPS = '[groups]\nstaff = ["user:ann"]\n'


def _policy(folder: Path, files: dict[str, str]) -> Policy:
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return Policy.load(folder, CATALOG)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every request Cedar is asked."""
    import cedarpy

    requests: list[dict[str, Any]] = []
    real = cedarpy.is_authorized

    def counting(request: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        requests.append(request)
        return real(request, *args, **kwargs)

    monkeypatch.setattr(cedarpy, "is_authorized", counting)
    return requests


def test_the_same_request_is_answered_as_before_without_asking_again(
    tmp_path: Path, asked: list[dict[str, Any]]
) -> None:
    policy = _policy(
        tmp_path / "policies",
        {
            "a.cedar": (
                'permit (principal in Group::"staff", action == Action::"start", resource);\n'
            ),
            "principals.toml": GROUPS,
        },
    )
    first = policy.check("user:ann", "start", "refund", {"input": {"order": "o1"}})
    assert (first.allowed, first.reason) == (True, "permitted by policies/a.cedar:1")
    # No policy for `start` reads the context: another input is the same request.
    for order in ("o1", "o2", "o3"):
        assert policy.check("user:ann", "start", "refund", {"input": {"order": order}}) == first
    refused = policy.check("user:bob", "start", "refund", {})
    assert policy.check("user:bob", "start", "refund", {}) == refused
    assert not refused.allowed
    assert [r["principal"]["id"] for r in asked] == ["ann", "bob"]
    # A value the context cannot carry is still refused, kept answer or not.
    unfit = policy.check("user:ann", "start", "refund", {"input": {"amount": 2**63}})
    assert not unfit.allowed
    assert unfit.reason.startswith("context.input.amount cannot be given to the policies")
    # And who is not a principal is refused first, as it always was.
    nobody = policy.check("ann", "start", "refund", {"input": {"amount": 2**63}})
    assert (nobody.allowed, nobody.reason.startswith("`ann` is not a principal")) == (False, True)


def test_a_context_a_policy_reads_is_part_of_the_request(
    tmp_path: Path, asked: list[dict[str, Any]]
) -> None:
    policy = _policy(
        tmp_path / "policies",
        {
            "a.cedar": (
                "permit (principal, action, resource);\n"
                'forbid (principal, action == Action::"start", resource)\n'
                "when { context.input has rush && context.input.rush };\n"
            ),
        },
    )
    for _ in range(2):
        calm = policy.check("user:ann", "start", "refund", {"input": {"order": "o1"}})
        rush = policy.check("user:ann", "start", "refund", {"input": {"rush": True}})
        assert calm.allowed
        assert (rush.allowed, rush.reason) == (False, "forbidden by policies/a.cedar:2")
    assert len(asked) == 2  # each once, then kept
    # Only `start` has a policy reading the context.
    assert policy._reads_context == {"start"}


@pytest.mark.parametrize(
    ("scope", "reading"),
    [
        ("action", set(ACTIONS)),
        ('action == Action::"decide"', {"decide"}),
        ('action in Action::"decide"', {"decide"}),
        ('action in [Action::"decide", Action::"call"]', {"decide", "call"}),
    ],
)
def test_the_actions_whose_context_is_read_follow_the_action_scopes(
    tmp_path: Path, scope: str, reading: set[str]
) -> None:
    policy = _policy(
        tmp_path / "policies",
        {
            "a.cedar": (
                'permit (principal, action == Action::"start", resource);\n'
                f"forbid (principal, {scope}, resource) unless {{ context has decision }};\n"
            )
        },
    )
    assert policy.problem is None
    assert policy._reads_context == reading


def test_an_unconstrained_action_reading_the_context_keys_every_action_on_it(
    tmp_path: Path,
) -> None:
    policy = _policy(
        tmp_path / "policies",
        {
            "a.cedar": (
                "permit (principal, action, resource);\n"
                "forbid (principal, action, resource)\n"
                'when { context has verb && context.verb == "revoke" };\n'
            ),
        },
    )
    issue = policy.check("user:ann", "manage_tokens", "shop", {"verb": "issue"})
    revoke = policy.check("user:ann", "manage_tokens", "shop", {"verb": "revoke"})
    assert issue.allowed
    assert not revoke.allowed
    assert policy.check("user:ann", "manage_tokens", "shop", {"verb": "issue"}).allowed


def test_a_reloaded_policy_set_answers_afresh(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    permit = 'permit (principal in Group::"staff", action == Action::"start", resource);\n'
    before = _policy(folder, {"a.cedar": permit, "principals.toml": GROUPS})
    assert not before.check("user:bob", "start", "refund", {}).allowed
    assert before.check("user:ann", "start", "refund", {}).allowed
    # bob joins the staff, ann leaves: what loads the folder again sees it.
    (folder / "principals.toml").write_text('[groups]\nstaff = ["user:bob"]\n')
    after = Policy.load(folder, CATALOG)
    assert after.check("user:bob", "start", "refund", {}).allowed
    assert not after.check("user:ann", "start", "refund", {}).allowed
    # A policy changed too.
    (folder / "a.cedar").write_text("forbid (principal, action, resource);\n" + permit)
    again = Policy.load(folder, CATALOG)
    assert not again.check("user:bob", "start", "refund", {}).allowed
    # The first load answers as it did: its set is the one it loaded.
    assert before.check("user:ann", "start", "refund", {}).allowed


def test_evaluation_errors_are_logged_with_every_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, asked: list[dict[str, Any]]
) -> None:
    policy = _policy(
        tmp_path / "policies",
        {
            "a.cedar": (
                'permit (principal, action == Action::"decide", resource)\n'
                "when { context.draft has amount && "
                "context.draft.amount + 9223372036854775807 > 0 };\n"
            ),
        },
    )
    assert policy.problem is None
    caplog.set_level(logging.WARNING, logger="remit.policy")
    for _ in range(2):
        verdict = policy.check("user:ann", "decide", "refund", {"draft": {"amount": 5}})
        assert (verdict.allowed, verdict.reason) == (False, "no policy permits it")
    warnings = [r.getMessage() for r in caplog.records if r.name == "remit.policy"]
    assert len(warnings) == 2
    assert all(w.startswith("evaluating policies for user:ann: ") for w in warnings)
    assert len(asked) == 1


def test_what_is_kept_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: list[dict[str, Any]]
) -> None:
    monkeypatch.setattr(cedar, "_KEPT", 3)
    monkeypatch.setattr(cedar, "_KEPT_CONTEXT", 60)
    policy = _policy(
        tmp_path / "policies",
        {"a.cedar": "permit (principal, action, resource) when { context has input };\n"},
    )
    for name in ("a", "b", "c", "d", "e"):
        assert policy.check(f"user:{name}", "start", "refund", {}).allowed
        assert len(policy._answers) <= 3
    # A context longer than what is kept is asked each time.
    long = {"input": {"order": "x" * 100}}
    count = len(asked)
    for _ in range(2):
        assert policy.check("user:a", "start", "refund", long).allowed
    assert len(asked) == count + 2
    # So is a long resource name.
    monkeypatch.setattr(cedar, "_KEPT_RESOURCE", 5)
    for _ in range(2):
        assert not policy.check("user:a", "pause", "a-long-app-name", {}).allowed
    assert len(asked) == count + 4

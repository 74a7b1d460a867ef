"""Loading and checking Cedar policies: deny by default, forbid over permit, a broken set
refusing everything with its file and line, holds, and the schema derived from the app."""

from __future__ import annotations

import enum
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from remit import App, AppError, Connector, Fake, implements, op, workflow
from remit.connectors.apps import list_apps
from remit.connectors.wakeup import wakeup_connector
from remit.execution.context import Context
from remit.policy.cedar import Catalog, Policy, Principal, cedar_type, split_statements


class Refund(BaseModel):
    order: str
    amount: int
    rush: bool = False


class Note(BaseModel):
    amount: str  # typed otherwise than Refund.amount: left out of the union


class Draft(BaseModel):
    amount: int
    currency: Literal["eur", "usd"] = "eur"


CATALOG = Catalog(
    workflows={"refund": Refund, "note": Note},
    ops={"shop.refunds.create": (Refund, "write", True), "shop.orders.get": (Refund, "read", True)},
    approval_types={"refund": Draft},
)


def _policy(tmp_path: Path, files: dict[str, str]) -> Policy:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return Policy.load(folder, CATALOG)


PERMIT_STAFF = """
permit (principal in Group::"staff", action == Action::"start", resource == Workflow::"refund");
"""
GROUPS = '[groups]\nstaff = ["user:ann", "group:leads"]\nleads = ["user:lea"]\n'


def test_deny_by_default_and_groups_nest(tmp_path: Path) -> None:
    policy = _policy(tmp_path, {"a.cedar": PERMIT_STAFF, "principals.toml": GROUPS})
    assert policy.problem is None
    assert policy.check("user:ann", "start", "refund", {}).allowed
    assert policy.check("user:lea", "start", "refund", {}).allowed  # leads are staff
    assert not policy.check("user:bob", "start", "refund", {}).allowed
    assert not policy.check("user:ann", "start", "note", {}).allowed
    assert not policy.check("user:ann", "call", "shop.orders.get", {}).allowed
    assert policy.check("user:bob", "start", "refund", {}).reason == "no policy permits it"


def test_forbid_beats_any_permit(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        {
            "a.cedar": "permit (principal, action, resource);\n",
            "b.cedar": (
                "// rush refunds are never started by hand\n"
                'forbid (principal, action == Action::"start", resource == Workflow::"refund")\n'
                "when { context.input has rush && context.input.rush };\n"
            ),
        },
    )
    calm = policy.check("user:ann", "start", "refund", {"input": {"rush": False}})
    rush = policy.check("user:ann", "start", "refund", {"input": {"rush": True}})
    assert calm.allowed
    assert (rush.allowed, rush.reason) == (False, "forbidden by policies/b.cedar:2")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("permit (principal, action, resource);\n\npermit (principal, action\n", "a.cedar:3"),
        ("permit (principal, action, resource) when { 1 + };\n", "a.cedar:1"),
        (
            'permit (principal, action == Action::"start", resource)\n'
            "  when { context.input.nope > 1 };\n",
            "a.cedar:1",
        ),
        ('permit (principal, action == Action::"fly", resource);\n', "a.cedar:1"),
        ('@hold("x")\nforbid (principal, action, resource);\n', "a.cedar:1"),
        ('@hold\npermit (principal, action == Action::"start", resource);\n', "a.cedar:1"),
        ("@hold\npermit (principal, action, resource);\n", "a.cedar:1"),
    ],
)
def test_a_broken_policy_set_refuses_everything_naming_file_and_line(
    tmp_path: Path, text: str, where: str
) -> None:
    policy = _policy(
        tmp_path, {"ok.cedar": "permit (principal, action, resource);\n", "a.cedar": text}
    )
    assert policy.problem is not None
    assert policy.problem.startswith(f"policies/{where}: ")
    verdict = policy.check("user:ann", "start", "refund", {})
    assert not verdict.allowed
    assert verdict.reason.startswith("the policies are broken and refuse everything: policies/")


def test_a_policy_reading_a_field_typed_two_ways_is_refused(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        {
            "a.cedar": (
                'forbid (principal, action == Action::"start", resource)\n'
                "when { context.input has amount && context.input.amount > 1000 };\n"
            )
        },
    )
    assert policy.problem == (
        "policies/a.cedar:1: reads `context.input.amount`, but the workflow input `amount` is "
        "typed two ways in the app, so no context carries it: make the types agree, or rename one"
    )
    # A draft's `amount` is typed one way only: a policy reading it is fine.
    fine = _policy(
        tmp_path,
        {
            "a.cedar": (
                'forbid (principal, action == Action::"decide", resource)\n'
                "when { context.draft has amount && context.draft.amount > 1000 };\n"
            )
        },
    )
    assert fine.problem is None


def test_a_value_the_policies_cannot_read_exactly_refuses_the_action(tmp_path: Path) -> None:
    policy = _policy(tmp_path, {"a.cedar": "permit (principal, action, resource);\n"})
    assert policy.check("user:ann", "decide", "refund", {"draft": {"amount": 5}}).allowed
    too_big = policy.check("user:ann", "decide", "refund", {"draft": {"amount": 2**63}})
    assert (too_big.allowed, too_big.reason) == (
        False,
        "context.draft.amount cannot be given to the policies: it is beyond Cedar's 64-bit "
        "whole numbers",
    )
    wrong = policy.check("user:ann", "decide", "refund", {"draft": {"currency": 7}})
    assert (
        wrong.reason == "context.draft.currency cannot be given to the policies: it is not a String"
    )


class Priced(BaseModel):
    price: Decimal


def test_decimals_are_given_exactly_or_not_at_all(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "a.cedar").write_text(
        'forbid (principal, action == Action::"start", resource)\n'
        'when { context.input has price && context.input.price.greaterThan(decimal("100.0")) };\n'
        "permit (principal, action, resource);\n"
    )
    policy = Policy.load(folder, Catalog(workflows={"buy": Priced}, ops={}, approval_types={}))
    assert policy.problem is None
    assert policy.check("user:ann", "start", "buy", {"input": {"price": "99.5"}}).allowed
    assert not policy.check("user:ann", "start", "buy", {"input": {"price": "500"}}).allowed
    for unfit in ("100.00004", "1e300", "NaN"):
        verdict = policy.check("user:ann", "start", "buy", {"input": {"price": unfit}})
        assert not verdict.allowed, unfit
        assert verdict.reason.startswith("context.input.price cannot be given to the policies")


def test_a_broken_principals_file_refuses_everything(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        {"a.cedar": PERMIT_STAFF, "principals.toml": '[groups]\nstaff = ["ann"]\n'},
    )
    assert policy.problem is not None
    assert "principals.toml: group `staff`: `ann` is not a principal" in policy.problem
    assert not policy.check("user:ann", "start", "refund", {}).allowed


def test_groups_in_a_cycle_refuse_everything(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        {
            "a.cedar": PERMIT_STAFF,
            "principals.toml": '[groups]\nstaff = ["group:leads", "user:x"]\nleads = ["group:staff"]\n',
        },
    )
    assert policy.problem is not None
    assert policy.problem.startswith("policies/principals.toml: the groups cannot be read")
    assert not policy.check("user:x", "start", "refund", {}).allowed


def test_a_hold_marks_a_call_that_only_held_permits_allow(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        {
            "a.cedar": (
                '@hold("a lead approves refunds")\n'
                'permit (principal in Group::"staff", action == Action::"call", '
                'resource == Op::"shop.refunds.create");\n'
                'permit (principal in Group::"leads", action, resource);\n'
            ),
            "principals.toml": GROUPS,
        },
    )
    ann = policy.check("user:ann", "call", "shop.refunds.create", {"input": {"amount": 5}})
    lea = policy.check("user:lea", "call", "shop.refunds.create", {"input": {"amount": 5}})
    assert (ann.allowed, ann.held, ann.hold_note) == (True, True, "a lead approves refunds")
    assert (lea.allowed, lea.held, lea.hold_note) == (True, False, "")


def test_contexts_carry_what_the_schema_types(tmp_path: Path) -> None:
    policy = _policy(tmp_path, {"a.cedar": "permit (principal, action, resource);\n"})
    # `amount` is Long in Refund and String in Note: no context carries it.
    assert policy.left_out == ["workflow input `amount`"]
    assert policy.context("start", {"input": {"order": "o1", "amount": 5, "rush": True}}) == {
        "input": {"order": "o1", "rush": True}
    }
    assert policy.context("decide", {"draft": {"amount": 7, "currency": "eur"}}) == {
        "decision": "",
        "workflow": "",
        "input": {},
        "draft": {"amount": 7, "currency": "eur"},
        "op": "",
        "call": {},
    }


def test_cedar_types_of_fields() -> None:
    class Colour(enum.Enum):
        RED = "red"

    assert cedar_type(int) == {"type": "Long"}
    assert cedar_type(bool) == {"type": "Boolean"}
    assert cedar_type(str | None) == {"type": "String"}
    assert cedar_type(date) == {"type": "String"}
    assert cedar_type(Colour) == {"type": "String"}
    assert cedar_type(Decimal) == {"type": "Extension", "name": "decimal"}
    assert cedar_type(list[str]) == {"type": "Set", "element": {"type": "String"}}
    assert cedar_type(dict[str, int]) is None
    assert cedar_type(int | str) is None
    assert cedar_type(Refund) is None


def test_statements_split_outside_strings_and_comments() -> None:
    text = 'permit (a) // not ; here\nwhen { "x;y" };\n\n  forbid (b);\ntrailing'
    assert list(split_statements(text)) == [
        (1, 'permit (a) // not ; here\nwhen { "x;y" };'),
        (4, "forbid (b);"),
        (5, "trailing"),
    ]


def test_principals_are_people_or_agents() -> None:
    assert Principal.parse("user:ann") == Principal("User", "ann")
    assert Principal.parse('Agent::"ops-bot"') == Principal("Agent", "ops-bot")
    for bad in ("ann", "group:staff", "user:", "remit:expiry", "user:a b"):
        with pytest.raises(Exception, match="is not a principal policies know"):
            Principal.parse(bad)


ORDERS_GET = op("shop.orders.get", effect="read", input=Refund, output=Refund)


def _app(**kwargs: object) -> App:
    class Shop(Fake):
        @implements(ORDERS_GET)
        def get(self, input: Refund, call: object) -> Refund:
            return input

    @workflow(name="refund", input=Refund, uses=[ORDERS_GET])
    def refund(ctx: Context, input: Refund) -> None:
        ctx.call(ORDERS_GET, input)

    shop = Connector("shop", ops=[ORDERS_GET], driver=Shop, fake=Shop)
    return App(name="shop", workflows=[refund], connectors=[shop], **kwargs)  # type: ignore[arg-type]


def test_an_app_without_policies_checks_nothing_and_one_with_them_has_the_call_workflow(
    tmp_path: Path,
) -> None:
    open_app = _app()
    assert not open_app.policy.enabled
    assert open_app.policy.check("anyone", "start", "refund", {}).allowed
    assert "call" not in open_app.workflows

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.cedar").write_text(PERMIT_STAFF)
    governed = _app(policies=tmp_path / "p")
    assert governed.policy.enabled
    assert governed.policy.problem is None
    assert governed.workflows["call"].op_ids == {
        "shop.orders.get",
        list_apps.id,
        *(o.id for o in wakeup_connector.ops),
    }
    assert "call" in governed.approval_types
    with pytest.raises(AppError, match="no such folder"):
        _app(policies=tmp_path / "missing")


class Ticket(BaseModel):
    id: int  # the `wakeup` ops' `id` is a string: the app's own type wins
    url: str


TICKETS_GET = op("desk.tickets.get", effect="read", input=Ticket, output=Ticket)


def test_remits_own_ops_give_way_to_the_apps_field_types(tmp_path: Path) -> None:
    class Desk(Fake):
        @implements(TICKETS_GET)
        def get(self, input: Ticket, call: object) -> Ticket:
            return input

    @workflow(name="open", input=Ticket, uses=[TICKETS_GET])
    def open_ticket(ctx: Context, input: Ticket) -> None:
        ctx.call(TICKETS_GET, input)

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.cedar").write_text(
        'permit (principal, action == Action::"call", resource) when '
        "{ context.input has id && context.input.id < 10 };\n"
    )
    desk = Connector("desk", ops=[TICKETS_GET], driver=Desk, fake=Desk)
    app = App(name="desk", workflows=[open_ticket], connectors=[desk], policies=tmp_path / "p")
    assert (app.policy.problem, app.policy.left_out) == (None, [])
    assert app.policy.check("user:ann", "call", "desk.tickets.get", {"input": {"id": 3}}).allowed
    # The ops' own fields no app op has are typed as theirs (`at`).
    typed = app.policy.schema[""]["actions"]["call"]["appliesTo"]["context"]
    assert typed["attributes"]["input"]["attributes"]["at"]["type"] == "String"


def test_an_app_cannot_declare_the_wakeup_vendor() -> None:
    wakeup_get = op("wakeup.things.get", effect="read", input=Refund, output=Refund)

    class Mine(Fake):
        @implements(wakeup_get)
        def get(self, input: Refund, call: object) -> Refund:
            return input

    mine = Connector("wakeup", ops=[wakeup_get], driver=Mine, fake=Mine)
    with pytest.raises(AppError, match="`wakeup`, which is remit's own vendor"):
        App(name="shop", workflows=[], connectors=[mine])
    # remit's own connector listed by the app is the one it has anyway.
    assert App(name="shop", workflows=[], connectors=[wakeup_connector]).connectors["wakeup"] is (
        wakeup_connector
    )

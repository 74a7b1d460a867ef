"""The parts of scenarios that need no database: reading feature files, finding them,
`$name.field` references, connectors' step declarations, how the generic steps read, and what
a step knows of a message before it sends it."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import BaseModel

from remit import AppError, Connector, Context, Given, load_app, steps, workflow
from remit.scenarios import feature_files, read, seed
from remit.scenarios.generic import GENERIC, same
from remit.scenarios.messages import message_model, sender
from remit.scenarios.pytest_plugin import app_folder_of
from remit.scenarios.values import Names, UnknownReference, cell, fields_table, typed_cell

SCEN_APP = Path(__file__).resolve().parent.parent / "apps" / "scen_app"
APP = load_app(SCEN_APP)
BOOKS = APP.connectors["books"]
CREATE_INVOICE = APP.ops["books.invoices.create"]

FEATURE = """\
Feature: Reading
  Background:
    Given an invoice inv_1 of 1200 due 2026-10-01

  Scenario: With a table
    When ann starts chase with:
      | field      | value |
      | invoice_id | inv_1 |
    Then $run is done

  Scenario Outline: One per row
    When <who> starts chase
    Examples:
      | who |
      | ann |
      | bob |
"""


def test_a_feature_file_reads_as_scenarios_with_their_background(tmp_path: Path) -> None:
    path = tmp_path / "reading.feature"
    path.write_text(FEATURE)
    first, ann, bob = read(path)
    assert (first.title, first.line) == ("Reading: With a table", 5)
    assert [(s.keyword.strip(), s.text, s.line, s.background) for s in first.steps] == [
        ("Given", "an invoice inv_1 of 1200 due 2026-10-01", 3, True),
        ("When", "ann starts chase with:", 6, False),
        ("Then", "$run is done", 9, False),
    ]
    assert first.steps[1].table == (("field", "value"), ("invoice_id", "inv_1"))
    assert [s.text for s in ann.steps[1:]] == ["ann starts chase"]
    assert [s.text for s in bob.steps[1:]] == ["bob starts chase"]


def test_a_file_that_does_not_parse_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.feature"
    path.write_text("Feature: x\n  Scenario: y\n    Given a\nFeature: twice\n")
    with pytest.raises(AppError, match=r"bad.feature is not a feature file remit can read"):
        read(path)


def test_feature_files_are_found_at_the_root_and_in_each_app(tmp_path: Path) -> None:
    for where in ["scenarios/a.feature", "apps/ar/scenarios/b.feature", "apps/ar/c.feature"]:
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text("Feature: x\n")
    assert feature_files(tmp_path) == [
        tmp_path / "apps/ar/scenarios/b.feature",
        tmp_path / "scenarios/a.feature",
    ]
    # An app's scenarios run on the whole repo, which `load_app` loads with every app in it.
    (tmp_path / "apps/ar/workflows").mkdir()
    assert app_folder_of(tmp_path / "apps/ar/scenarios/b.feature") == (tmp_path, "ar")
    assert app_folder_of(tmp_path / "scenarios/a.feature") == (tmp_path, None)
    # An app of its own (its `app.py`) that sits in a folder named `apps` is loaded alone.
    (tmp_path / "apps/own/scenarios").mkdir(parents=True)
    (tmp_path / "apps/own/app.py").write_text("")
    assert app_folder_of(tmp_path / "apps/own/scenarios/d.feature") == (tmp_path / "apps/own", None)


def test_cells_are_json_when_they_parse_and_text_otherwise() -> None:
    assert [cell(c) for c in ["12", "true", "null", '"12"', "inv_1", '{"a": 1}']] == [
        12,
        True,
        None,
        "12",
        "inv_1",
        {"a": 1},
    ]


def test_references_take_the_value_alone_and_write_it_into_text() -> None:
    names = Names()
    names.keep("invoice", {"invoice_id": "inv_1", "amount": 1200, "lines": [{"sku": "a"}]})
    assert names.resolve("$invoice.amount") == 1200
    assert names.resolve("$invoice.lines.0.sku") == "a"
    assert (
        names.resolve("invoice $invoice.invoice_id of $invoice.amount") == "invoice inv_1 of 1200"
    )
    assert names.resolve({"a": ["$invoice.invoice_id"]}) == {"a": ["inv_1"]}
    assert names.resolve("costs $5.00") == "costs $5.00"
    table = (("field", "value"), ("id", "$invoice.invoice_id"), ("n", "3"))
    assert fields_table(table, names, what="x") == {"id": "inv_1", "n": 3}


def test_an_unknown_reference_names_what_there_is() -> None:
    names = Names()
    names.keep("invoice", {"invoice_id": "inv_1"})
    with pytest.raises(
        UnknownReference, match=r"which no earlier step made \(the scenario has \$invoice\)"
    ):
        names.resolve("$bill.invoice_id")
    with pytest.raises(UnknownReference, match=r"\$invoice has no `amount` \(it has: invoice_id\)"):
        names.resolve("$invoice.amount")


@pytest.mark.parametrize(
    ("expected", "actual", "alike"),
    [
        (1, 1.0, True),
        (True, True, True),
        ("2026-10-01", "2026-10-01", True),
        (1, True, False),
        (0, False, False),
        (True, 1, False),
        ({"paid": 1}, {"paid": True}, False),
        ([0, 1], [False, True], False),
        ({"paid": True, "n": [1]}, {"n": [1], "paid": True}, True),
    ],
)
def test_a_bool_is_the_same_only_as_a_bool(expected: object, actual: object, alike: bool) -> None:
    assert same(expected, actual) is alike


def test_a_step_pattern_must_name_its_values() -> None:
    declared = steps("books")
    with pytest.raises(AppError, match=r"has an unnamed value: name each"):
        declared.given("an invoice {} of {amount:d}")
    declared.then("the invoice {id} is open")(print)
    with pytest.raises(AppError, match=r"declares the step 'the invoice \{id\} is open' twice"):
        declared.then("the invoice {id} is open")(print)


def test_a_connector_takes_only_its_own_vendors_steps() -> None:
    with pytest.raises(AppError, match=r"declare them with `remit.steps\('books'\)`"):
        Connector(
            "books", ops=BOOKS.ops, driver=BOOKS.driver, fake=BOOKS.fake, steps=steps("payments")
        )


def test_seed_calls_each_given_once_through_a_callable(tmp_path: Path) -> None:
    path = tmp_path / "reading.feature"
    path.write_text(FEATURE)
    calls: list[tuple[str, dict[str, object], str | None]] = []

    def call(op_id: str, input: dict[str, object], by: str | None) -> dict[str, object]:
        calls.append((op_id, dict(input), by))
        return {**input, "status": "open"}

    made = seed(APP, [path], call)
    assert calls == [
        (
            CREATE_INVOICE.id,
            {
                "invoice_id": "inv_1",
                "amount": 1200,
                "due": "2026-10-01",
                "email": "ap@inv_1.example",
            },
            "user:sam",
        )
    ]
    assert made == {"invoice": {**calls[0][1], "status": "open"}}


def test_seed_runs_a_given_that_several_files_say_once(tmp_path: Path) -> None:
    first, second = tmp_path / "first.feature", tmp_path / "second.feature"
    first.write_text(FEATURE)
    second.write_text(
        FEATURE.replace(
            "    Given an invoice inv_1 of 1200 due 2026-10-01\n",
            "    Given an invoice inv_1 of 1200 due 2026-10-01\n"
            "    And an invoice inv_2 of 300 due 2026-10-05\n",
        )
    )
    calls: list[str] = []

    def call(op_id: str, input: dict[str, object], by: str | None) -> dict[str, object]:
        calls.append(str(input["invoice_id"]))
        return dict(input)

    seed(APP, [first, second], call)
    assert calls == ["inv_1", "inv_2"]


def test_a_given_returns_what_to_call() -> None:
    made = Given(op=CREATE_INVOICE, input={"invoice_id": "x"}, name="invoice")
    assert (made.op_id, made.input_json(), made.actor) == (
        "books.invoices.create",
        {"invoice_id": "x"},
        None,
    )
    assert Given(op="books.invoices.get").op_id == "books.invoices.get"


class Refund(BaseModel):
    subscription_id: str
    amount: Decimal
    months: int
    on: date | None = None
    tags: list[str] = []


def test_a_table_filling_a_model_reads_each_cell_as_its_field_says() -> None:
    table = (
        ("subscription_id", "0042"),
        ("amount", "120.00"),
        ("months", "3"),
        ("on", "null"),
        ("tags", '["vip"]'),
        ("extra", "12"),
    )
    found = fields_table(table, Names(), what="the refund", model=Refund)
    assert found == {
        "subscription_id": "0042",
        "amount": "120.00",
        "months": 3,
        "on": None,
        "tags": ["vip"],
        "extra": 12,  # no field of the model: read as JSON
    }
    assert Refund.model_validate(found).amount == Decimal("120.00")
    # Without the model, a cell is JSON: the amount is the number 120.0, the id 42.
    assert fields_table(table, Names(), what="the refund")["amount"] == 120.0


def test_a_cell_its_field_cannot_take_is_left_for_the_model_to_refuse() -> None:
    assert typed_cell("lots", Decimal) is None
    assert typed_cell("2026-02-30", date) is None
    assert typed_cell("2026-02-03", date) == ("2026-02-03",)


class _Paid(BaseModel):
    amount: Decimal


class _Other(BaseModel):
    note: str


class _Waits(BaseModel):
    topic: str = "late"


PAID = "paid"


@workflow(name="waits-in-code", input=_Waits)
def _waits_in_code(ctx: Context, input: _Waits) -> None:
    ctx.wait_for(PAID, model=_Paid, timeout=60)
    ctx.wait_for("paid", model=_Paid)
    ctx.wait_for("note")
    ctx.wait_for("either", model=_Paid)
    ctx.wait_for("either", model=_Other)
    ctx.wait_for(input.topic, model=_Paid)


def test_a_message_s_model_is_the_one_the_workflow_s_code_names_for_its_topic() -> None:
    assert message_model(_waits_in_code, "paid") is _Paid  # written out, or by a name
    assert message_model(_waits_in_code, "note") is None  # no model: raw JSON
    assert message_model(_waits_in_code, "either") is None  # two models: neither
    assert message_model(_waits_in_code, "late") is None  # a topic known at run time only
    assert message_model(_waits_in_code, "unknown") is None


def test_the_words_before_sends_name_who_sends() -> None:
    assert sender("ann") == "user:ann"
    assert sender("agent:billing") == "agent:billing"
    assert sender("the payments feed") == "agent:payments-feed"
    assert sender("The bank's SWIFT gateway") == "agent:bank-s-swift-gateway"


def test_each_generic_step_s_example_is_read_as_that_step() -> None:
    for step in GENERIC:
        first = next(g for g in GENERIC if g.match(step.example) is not None)
        assert first is step, f"{step.example!r} is read as {first.example!r}"


def test_the_steps_about_runs_that_wait_read_their_parts() -> None:
    def said(text: str) -> tuple[str, dict[str, str]]:
        found = next((g, m) for g in GENERIC if (m := g.match(text)) is not None)
        return found[0].do.__name__, found[1]

    assert said('the payments feed sends $dun "paid" with:') == (
        "sends",
        {"sender": "the payments feed", "run": "dun", "topic": "paid"},
    )
    assert said("ann sends $quote answer") == (
        "sends",
        {"sender": "ann", "run": "quote", "topic": "answer"},
    )
    assert said("$note is waiting for its children")[1] == {
        "run": "note",
        "children": "its children",
    }
    assert said('$note shows "progress" as {"done": 2}') == (
        "shows",
        {"run": "note", "key": "progress", "value": '{"done": 2}'},
    )
    assert said("$note has started no credit-line runs")[1]["count"] == "no"
    assert said('$note has started the credit-line "line-2" as $fee') == (
        "started_one",
        {"run": "note", "workflow": "credit-line", "key": "line-2", "name": "fee"},
    )
    assert said("$note is waiting")[0] == "run_is"

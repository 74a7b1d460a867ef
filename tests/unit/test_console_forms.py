"""Forms generated from pydantic models: the inputs a model gets, and what a posted form parses
to, or the errors it shows."""

from __future__ import annotations

import enum
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated, Literal

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from remit.console.forms import FormField, as_posted, fields_of, parse_form, posted_values


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: str
    zip: str = Field(pattern=r"^\d{5}$")


class Draft(BaseModel):
    amount: int = Field(gt=0, le=500, description="In cents")
    price: Decimal = Field(ge=Decimal("0.5"), decimal_places=2)
    ratio: float = Field(lt=1.0, default=0.5)
    code: str = Field(min_length=2, max_length=8, pattern=r"^[A-Z]+$", title="Invoice code")
    speed: Literal["fast", "slow"] = "fast"
    tier: Literal[1, 2, 3] = 1
    color: Color = Color.RED
    urgent: bool = False
    due: date
    at: datetime | None = None
    note: str | None = None
    memo: str = ""
    address: Address
    tags: list[str] = []
    count: Annotated[int, Field(ge=3, multiple_of=3)] | None = None


def by_field(fields: list[FormField]) -> dict[str, FormField]:
    return {f.field: f for f in fields}


VALID: dict[str, str] = {
    "draft.amount": "250",
    "draft.price": "12.50",
    "draft.code": "INV",
    "draft.due": "2025-03-01",
    "draft.address": '{"city": "Lyon", "zip": "69001"}',
}


def test_each_field_gets_the_input_its_type_and_constraints_call_for() -> None:
    fields = by_field(fields_of(Draft, None, None, "draft"))

    amount = fields["amount"]
    assert (amount.name, amount.kind, amount.required) == ("draft.amount", "integer", True)
    assert (amount.min, amount.max, amount.step) == ("1", "500", "1")  # gt=0 is min 1
    assert amount.help == "In cents"
    assert amount.label == "Amount"

    price = fields["price"]
    assert (price.kind, price.min, price.step) == ("number", "0.5", "0.01")
    ratio = fields["ratio"]
    assert (ratio.kind, ratio.max, ratio.step, ratio.required) == ("number", "1.0", "any", False)
    assert ratio.value == "0.5"

    code = fields["code"]
    assert (code.kind, code.label, code.min_length, code.max_length) == (
        "text",
        "Invoice code",
        2,
        8,
    )
    assert code.pattern == r"^[A-Z]+$"
    assert code.html_pattern == r"^[A-Z]+$"

    assert fields["speed"].kind == "select"
    assert fields["speed"].options == (("fast", "fast"), ("slow", "slow"))
    assert fields["speed"].value == "fast"
    assert fields["tier"].options == (("1", "1"), ("2", "2"), ("3", "3"))
    assert fields["color"].options == (("red", "RED"), ("blue", "BLUE"))
    assert fields["color"].value == "red"

    assert (fields["urgent"].kind, fields["urgent"].checked) == ("checkbox", False)
    assert (fields["due"].kind, fields["due"].required) == ("date", True)
    assert (fields["at"].kind, fields["at"].required) == ("datetime-local", False)
    assert (fields["note"].kind, fields["note"].required, fields["note"].value) == (
        "text",
        False,
        "",
    )
    assert fields["address"].kind == "json"
    assert fields["tags"].kind == "json"
    assert fields["tags"].value == "[]"
    count = fields["count"]
    assert (count.kind, count.required, count.min, count.step) == ("integer", False, "3", "3")


def test_each_fields_bounds_are_said_in_words() -> None:
    hints = {f.field: f.hint for f in fields_of(Draft, None, None, "draft")}
    assert hints == {
        "amount": "more than 0, at most 500",
        "price": "at least 0.5, at most 2 decimal places",
        "ratio": "less than 1.0",
        "code": "2 to 8 characters, matching ^[A-Z]+$",
        "speed": None,
        "tier": None,
        "color": None,
        "urgent": None,
        "due": None,
        "at": None,
        "note": None,
        "memo": None,
        "address": None,
        "tags": None,
        "count": "at least 3, a multiple of 3",
    }

    class Refund(BaseModel):
        amount: Decimal = Field(ge=Decimal("0.01"), le=Decimal("500.00"))
        reason: str = Field(max_length=200)
        starts: date = Field(ge=date(2026, 1, 1))

    (amount, reason, starts) = fields_of(Refund)
    assert (amount.hint, amount.min, amount.max, amount.step) == (
        "0.01 to 500.00",
        "0.01",
        "500",
        "any",
    )
    assert reason.hint == "at most 200 characters"
    assert (starts.hint, starts.min) == ("at least 2026-01-01", "2026-01-01")


def test_read_only_fields_are_shown_as_they_stand_and_posted_back_unchanged() -> None:
    draft = {**VALID, "draft.color": "blue", "draft.urgent": "true"}
    value, _ = parse_form(Draft, draft, "draft")
    assert value is not None
    fields = fields_of(Draft, value, None, "draft", read_only={"code", "color", "urgent"})
    kept = [f for f in fields if f.read_only]
    assert [(f.field, f.shown) for f in kept] == [
        ("code", "INV"),
        ("color", "BLUE"),
        ("urgent", "yes"),
    ]
    assert by_field(fields)["note"].shown == "(empty)"
    # What the form posts for them, with what was typed in the others, reads as the draft.
    typed = {**VALID, "draft.amount": "300"}
    del typed["draft.code"]
    again, errors = parse_form(Draft, {**as_posted(kept), **typed}, "draft")
    assert errors == {}
    assert again == {**value, "amount": 300}


def test_current_values_are_shown_as_their_inputs_hold_them() -> None:
    draft = Draft(
        amount=120,
        price=Decimal("3.10"),
        code="AB",
        color=Color.BLUE,
        urgent=True,
        due=date(2025, 1, 2),
        at=datetime(2025, 1, 2, 9, 30, tzinfo=UTC),
        memo="line one\nline two",
        address=Address(city="Oslo", zip="01500"),
        tags=["a", "b"],
    )
    fields = by_field(fields_of(Draft, draft.model_dump(mode="json"), None, "draft"))
    assert fields["amount"].value == "120"
    assert fields["price"].value == "3.10"
    assert fields["color"].value == "blue"
    assert fields["urgent"].checked
    assert fields["due"].value == "2025-01-02"
    assert fields["at"].value == "2025-01-02T09:30:00"
    assert fields["memo"].kind == "textarea"  # it spans lines
    assert '"city": "Oslo"' in fields["address"].value
    assert '"a"' in fields["tags"].value


def test_a_valid_form_parses_to_the_model_as_json() -> None:
    value, errors = parse_form(
        Draft,
        {**VALID, "draft.color": "blue", "draft.tier": "2", "draft.urgent": "true"},
        "draft",
    )
    assert errors == {}
    assert value is not None
    assert value["amount"] == 250
    assert value["price"] == "12.50"
    assert value["color"] == "blue"
    assert value["tier"] == 2
    assert value["urgent"] is True
    assert value["address"] == {"city": "Lyon", "zip": "69001"}
    assert value["note"] is None  # left out: its default
    assert value["ratio"] == 0.5


def test_an_unticked_checkbox_is_false_and_an_empty_optional_field_is_none() -> None:
    value, errors = parse_form(
        Draft, {**VALID, "draft.note": "", "draft.count": "", "draft.at": ""}, "draft"
    )
    assert errors == {}
    assert value is not None
    assert value["urgent"] is False
    assert (value["note"], value["count"], value["at"]) == (None, None, None)


def test_a_datetime_input_is_read_as_utc() -> None:
    value, _ = parse_form(Draft, {**VALID, "draft.at": "2025-01-02T09:30"}, "draft")
    assert value is not None
    assert value["at"] == "2025-01-02T09:30:00Z"


def test_each_bad_field_gets_pydantics_message() -> None:
    value, errors = parse_form(
        Draft,
        {
            **VALID,
            "draft.amount": "600",
            "draft.price": "1.234",
            "draft.code": "abc",
            "draft.speed": "medium",
            "draft.color": "green",
            "draft.count": "4",
        },
        "draft",
    )
    assert value is None
    assert errors["amount"] == "Input should be less than or equal to 500"
    assert errors["price"] == "Decimal input should have no more than 2 decimal places"
    assert errors["code"] == "String should match pattern '^[A-Z]+$'"
    assert errors["speed"] == "Input should be 'fast' or 'slow'"
    assert errors["color"] == "Input should be 'red' or 'blue'"
    assert errors["count"] == "Input should be a multiple of 3"
    assert set(errors) == {"amount", "price", "code", "speed", "color", "count"}


def test_a_required_field_left_empty_is_required() -> None:
    value, errors = parse_form(Draft, {**VALID, "draft.amount": "", "draft.code": ""}, "draft")
    assert value is None
    assert errors == {"amount": "Field required", "code": "Field required"}


def test_json_fields_name_bad_json_and_nested_errors() -> None:
    value, errors = parse_form(
        Draft,
        {**VALID, "draft.address": "{city: Lyon}", "draft.tags": '["a", 2]', "draft.amount": "0"},
        "draft",
    )
    assert value is None
    assert errors["address"].startswith("Invalid JSON: Expecting property name")
    assert errors["tags"] == "1: Input should be a valid string"
    assert errors["amount"] == "Input should be greater than 0"

    _, nested = parse_form(Draft, {**VALID, "draft.address": '{"city": "Lyon"}'}, "draft")
    assert nested == {"address": "zip: Field required"}


def test_an_error_of_the_whole_form_has_the_empty_key() -> None:
    from pydantic import model_validator

    class Range(BaseModel):
        low: int
        high: int

        @model_validator(mode="after")
        def ordered(self) -> Range:
            if self.low > self.high:
                raise ValueError("low must not exceed high")
            return self

    value, errors = parse_form(Range, {"low": "5", "high": "1"}, "")
    assert value is None
    assert errors == {"": "Value error, low must not exceed high"}


def test_errors_and_posted_values_are_shown_again() -> None:
    form = {**VALID, "draft.amount": "600", "draft.memo": "typed"}
    _, errors = parse_form(Draft, form, "draft")
    fields = by_field(fields_of(Draft, posted_values(Draft, form, "draft"), errors, "draft"))
    assert fields["amount"].value == "600"
    assert fields["amount"].error == "Input should be less than or equal to 500"
    assert fields["memo"].value == "typed"
    assert fields["urgent"].checked is False
    assert fields["code"].error is None


def test_an_optional_select_offers_none() -> None:
    class Pick(BaseModel):
        color: Color | None = None

    (field,) = fields_of(Pick, None, None, "x")
    assert field.options[0] == ("", "(none)")
    assert parse_form(Pick, {"x.color": ""}, "x") == ({"color": None}, {})
    assert parse_form(Pick, {"x.color": "red"}, "x") == ({"color": "red"}, {})


def test_the_last_of_repeated_values_counts() -> None:
    class One(BaseModel):
        n: int

    assert parse_form(One, {"n": ["1", "2"]}, "") == ({"n": 2}, {})


class Bounded(BaseModel):
    amount: int = Field(ge=-1000, le=1000)
    price: Decimal = Field(ge=0, le=10_000, decimal_places=2)
    name: str = Field(max_length=20)
    flag: bool
    when: date


@given(
    amount=st.integers(-1000, 1000),
    cents=st.integers(0, 1_000_000),
    name=st.text(
        st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20
    ).filter(lambda s: s.strip() == s),
    flag=st.booleans(),
    when=st.dates(),
)
def test_a_value_shown_in_its_form_and_posted_back_is_the_same_value(
    amount: int, cents: int, name: str, flag: bool, when: date
) -> None:
    original = Bounded(
        amount=amount, price=Decimal(cents).scaleb(-2), name=name, flag=flag, when=when
    )
    shown = fields_of(Bounded, original.model_dump(mode="json"), None, "d")
    value, errors = parse_form(Bounded, as_posted(shown), "d")
    assert errors == {}
    assert value == original.model_dump(mode="json")


@given(st.integers())
def test_an_integer_outside_its_bounds_is_refused_and_inside_accepted(n: int) -> None:
    value, errors = parse_form(
        Bounded, {"amount": str(n), "price": "1", "name": "x", "when": "2025-01-01"}, ""
    )
    if -1000 <= n <= 1000:
        assert errors == {}
        assert value is not None
        assert value["amount"] == n
    else:
        assert value is None
        assert set(errors) == {"amount"}

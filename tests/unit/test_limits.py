"""The one check of a value's size and its NUL characters, the settings of the caps, and what
an error quotes of what was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from remit import InputInvalid, Settings, SettingsError, TooLarge
from remit.core.limits import (
    Limits,
    check_json,
    check_limit,
    check_text,
    parse_json,
    size_text,
)
from remit.core.runs import refuse_unknown_fields
from remit.core.text import excerpt

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


@given(JSON)
def test_the_size_is_the_utf8_bytes_of_the_compact_json(value: Any) -> None:
    text = json.dumps(value)
    if "\\u0000" in text:
        with pytest.raises(InputInvalid, match="NUL character"):
            check_json(value, what="v", cap="input_bytes", target="t")
        return
    assert check_json(value, what="v", cap="input_bytes", target="t") == compact(value)


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_number_json_cannot_hold_is_refused_where_it_is(number: float) -> None:
    with pytest.raises(InputInvalid) as refused:
        check_json({"a": [1.5, number]}, what="v", cap="input_bytes", target="t")
    assert str(refused.value) == (
        "v, at `a.1`, holds a number that is not finite (NaN or an infinity), which JSON has no "
        "way to write: send null, or a number. Nothing was written"
    )


def test_one_byte_over_the_cap_is_refused_naming_the_setting() -> None:
    value = {"text": "é" * 10}  # 2 bytes a character
    size = compact(value)
    assert check_json(value, what="v", cap="op_bytes", target="t", limit=size) == size
    with pytest.raises(TooLarge) as refused:
        check_json(value, what="the thing", cap="op_bytes", target="t", limit=size - 1)
    assert (refused.value.size, refused.value.limit) == (size, size - 1)
    assert refused.value.setting == "REMIT_MAX_OP_BYTES"
    assert str(refused.value) == (
        f"the thing is {size} bytes, over the {size - 1} bytes limit (REMIT_MAX_OP_BYTES): "
        "pass a reference to the data instead, or raise the limit"
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("a\x00", []),
        ({"a": {"b": ["ok", "x\x00"]}}, ["a", "b", 1]),
        ({"ke\x00y": 1}, ["ke\x00y"]),
    ],
)
def test_a_nul_anywhere_is_refused_naming_where(value: Any, path: list[Any]) -> None:
    with pytest.raises(InputInvalid) as refused:
        check_json(value, what="the input", cap="input_bytes", target="wf")
    assert refused.value.target == "wf"
    assert refused.value.errors == [
        {"loc": path, "msg": "holds a NUL character (\\u0000)", "type": "nul"}
    ]
    assert "holds a NUL character" in str(refused.value)


def test_a_reason_is_counted_in_characters() -> None:
    check_text("é" * 4000, what="the reason", target="t")
    with pytest.raises(TooLarge) as refused:
        check_text("é" * 4001, what="the reason", target="t")
    assert refused.value.unit == "characters"
    assert "REMIT_MAX_REASON_CHARS" in str(refused.value)
    with pytest.raises(InputInvalid, match="the reason holds a NUL character"):
        check_text("a\x00", what="the reason", target="t")


def test_sizes_read_as_a_person_reads_them() -> None:
    assert size_text(812) == "812 bytes"
    assert size_text(3584) == "3.5 KiB"
    assert size_text(int(10.5 * 1024 * 1024)) == "10.5 MiB"
    assert size_text(2 * 1024 * 1024) == "2 MiB"


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "10"])
def test_a_limit_is_a_whole_number_of_one_or_more(limit: Any) -> None:
    with pytest.raises(InputInvalid, match=r"runs: limit must be a whole number of 1 or more"):
        check_limit(limit, where="runs")
    assert check_limit(1, where="runs") == 1


def test_the_caps_come_from_the_settings() -> None:
    defaults = Settings.from_env(".", environ={})
    assert Limits.of(defaults) == Limits()
    assert (defaults.max_input_bytes, defaults.max_draft_bytes) == (2097152, 262144)
    assert (defaults.max_reason_chars, defaults.max_body_bytes) == (4000, 4194304)
    names = {
        "REMIT_MAX_INPUT_BYTES": "max_input_bytes",
        "REMIT_MAX_OUTPUT_BYTES": "max_output_bytes",
        "REMIT_MAX_OP_BYTES": "max_op_bytes",
        "REMIT_MAX_DRAFT_BYTES": "max_draft_bytes",
        "REMIT_MAX_REASON_CHARS": "max_reason_chars",
        "REMIT_MAX_BODY_BYTES": "max_body_bytes",
        "REMIT_MAX_JSON_DEPTH": "max_json_depth",
    }
    for variable, field in names.items():
        assert getattr(Settings.from_env(".", environ={variable: "123"}), field) == 123
        with pytest.raises(SettingsError, match=f"{variable}='0' must be a whole number"):
            Settings.from_env(".", environ={variable: "0"})
    assert defaults.max_json_depth == 100
    with pytest.raises(SettingsError, match="deeper than remit can parse: give at most 150"):
        Settings.from_env(".", environ={"REMIT_MAX_JSON_DEPTH": "151"})


def test_json_deeper_than_the_cap_or_with_an_endless_integer_is_refused_naming_the_setting() -> (
    None
):
    # A level is a key or an index on the way from the top to a value: 101 brackets hold an
    # empty list 100 indexes down.
    assert parse_json("[" * 101 + "]" * 101, "--input") == _nested(100)
    for text in ("[" * 102 + "]" * 102, "[" * 100_000 + "]" * 100_000):
        with pytest.raises(InputInvalid, match="--input is nested more than 100 levels deep"):
            parse_json(text, "--input")
    with pytest.raises(InputInvalid, match="integer of more than 4,300 digits"):
        parse_json('{"n": ' + "9" * 4301 + "}", "--input")
    assert parse_json('{"n": ' + "9" * 4300 + "}", "--input") == {"n": int("9" * 4300)}
    # A request's own fields around what it carries do not count against the cap here.
    wrapped = '{"edits": {"memo": ' + "[" * 101 + "]" * 101 + "}}"
    assert parse_json(wrapped, "the request body", around=4)["edits"]["memo"] == _nested(100)
    with pytest.raises(InputInvalid, match="nested more than 100 levels deep"):
        parse_json('{"edits": {"memo": ' + "[" * 104 + "]" * 104 + "}}", "body", around=4)
    # A value made in Python is held to the same, at the path where it goes wrong.
    with pytest.raises(InputInvalid, match="nested more than 100 levels deep"):
        check_json({"a": _nested(100)}, what="the input", cap="input_bytes", target="wf")
    check_json({"a": _nested(99)}, what="the input", cap="input_bytes", target="wf")
    with pytest.raises(InputInvalid, match=r"the input, at `a\.2`, holds an integer of more than"):
        check_json({"a": [1, 2, 10**4300]}, what="the input", cap="input_bytes", target="wf")


def _nested(levels: int) -> list[object]:
    nested: list[object] = []
    for _ in range(levels):
        nested = [nested]
    return nested


class Strict(BaseModel):
    name: str
    amount: int = 0


class Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str


def test_unknown_fields_are_refused_unless_the_model_says_otherwise() -> None:
    with pytest.raises(InputInvalid) as refused:
        refuse_unknown_fields(Strict, {"name": "a", "amout": 1}, what="input", target="wf")
    assert str(refused.value).startswith(
        "input does not parse: Strict has no field `amout` (its fields: name, amount)"
    )
    refuse_unknown_fields(Strict, {"name": "a", "amount": 1}, what="input", target="wf")
    refuse_unknown_fields(Loose, {"name": "a", "more": 1}, what="input", target="wf")


class Many(BaseModel):
    values: list[int]


def test_a_validation_error_lists_twenty_problems_and_quotes_excerpts() -> None:
    with pytest.raises(ValidationError) as caught:
        Many.model_validate({"values": ["x" * 1000] * 500})
    invalid = InputInvalid.of(caught.value, what="input", target="wf", after="Fix it")
    assert len(invalid.errors) == 20
    assert all(len(str(error["input"])) <= 81 for error in invalid.errors)
    assert "; and 480 more. Fix it" in str(invalid)
    assert len(str(invalid)) < 3000


def test_an_excerpt_is_at_most_eighty_characters_then_an_ellipsis() -> None:
    assert excerpt("short") == "short"
    assert excerpt("y" * 100) == "y" * 80 + "…"
    assert excerpt({"a": 1}) == '{"a": 1}'

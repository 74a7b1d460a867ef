"""How the command line reads a JSON option (inline, `@FILE`, `-`) and what it says when it
cannot, and how it words a refusal: pure functions, no database."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from remit.cli.base import json_option, near, parse_json, shortened
from remit.cli.main import _refusal
from remit.core.errors import RemitError, TooLarge


class Endless(io.RawIOBase):
    """Standard input that never ends, counting what was read of it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer)
        view[:] = b" " * len(view)
        self.read_bytes += len(view)
        return len(view)


def test_standard_input_past_the_cap_is_read_no_further(monkeypatch: pytest.MonkeyPatch) -> None:
    endless = Endless()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(endless, 64)))
    with pytest.raises(TooLarge) as refused:
        json_option("-", "--input", cap=1000, setting="REMIT_MAX_INPUT_BYTES")
    assert "--input - (standard input) is more than 1000 bytes" in str(refused.value)
    assert refused.value.setting == "REMIT_MAX_INPUT_BYTES"
    assert endless.read_bytes <= 1001 + 64  # the cap, one byte more, and one buffer at most


def test_a_file_past_the_cap_is_refused_with_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"1," * 3000 + b"1]")
    with pytest.raises(TooLarge) as refused:
        json_option(f"@{big}", "--edit", cap=1024, setting="REMIT_MAX_DRAFT_BYTES")
    assert str(refused.value).startswith(f"--edit @{big} is 5.9 KiB, over the 1 KiB limit")
    assert refused.value.size == big.stat().st_size


def test_inline_text_is_capped_too_and_files_and_stdin_parse_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TooLarge):
        json_option('{"a": "' + "x" * 100 + '"}', "--input", cap=50, setting="REMIT_MAX_OP_BYTES")
    given = tmp_path / "given.json"
    given.write_bytes('\ufeff{"a": "é"}'.encode())  # a byte-order mark is let through
    assert json_option(f"@{given}", "--input", cap=50, setting="S") == {"a": "é"}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"a": 1}')))
    assert json_option("-", "--input", cap=50, setting="S") == {"a": 1}
    assert json_option("-1", "--input", cap=50, setting="S") == -1  # a number, not stdin


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("@", "--input @ names no file"),
        ("@/nowhere/x.json", "--input @/nowhere/x.json: the file cannot be read: No such file"),
        ('{"a": NaN}', "it holds NaN, which is no JSON value"),
        ('{"a": -Infinity}', "it holds -Infinity, which is no JSON value"),
        ('{"a": "\\udc00"}', "holds \\udc00, half of a surrogate pair with no other half"),
        ('{"a": 1,\n "b": }', "is not valid JSON: Expecting value at line 2, column 7"),
    ],
)
def test_what_cannot_be_read_says_why(given: str, says: str) -> None:
    with pytest.raises(RemitError) as refused:
        json_option(given, "--input", cap=1000, setting="S")
    assert says in str(refused.value)


def test_bad_json_quotes_only_a_short_excerpt_where_it_goes_wrong() -> None:
    raw = '{"a": "' + "x" * 100_000 + '", "b": oops' + "y" * 100_000 + "}"
    with pytest.raises(RemitError) as refused:
        parse_json(raw, "--input")
    message = str(refused.value)
    assert "oops" in message
    assert len(message) < 200


def test_near_and_shortened_escape_and_cut() -> None:
    assert near("short\x1b[2J") == "short\\x1b[2J"
    assert near("a" * 100 + "HERE" + "b" * 100, 102, width=10) == "…aaaHEREbbb…"
    assert shortened("x" * 250) == "x" * 200 + "… (50 more characters; --full shows all)"
    assert shortened("x" * 250, full=True) == "x" * 250


def test_a_refusal_is_a_message_and_anything_else_is_a_defect() -> None:
    stored = sa.exc.DataError(
        "INSERT ...",
        {},
        psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
    )
    said = _refusal(stored)
    assert said is not None
    assert said.startswith("the database refused a value it cannot store (PostgreSQL text")
    assert _refusal(psycopg.DataError("integer out of range")) is not None
    assert _refusal(TooLarge("too big", what="x", size=2, limit=1, setting="S")) == "too big"
    assert _refusal(ValueError("a bug")) is None

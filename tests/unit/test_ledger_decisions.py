"""What a re-entered op call may do, and the hash of an op's input."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from remit.core.ledger import input_hash, on_reentry


@pytest.mark.parametrize(
    ("status", "safe_to_repeat", "expected"),
    [
        ("started", True, "call"),
        ("started", False, "uncertain"),
        ("ok", True, "replay"),
        ("ok", False, "replay"),
        ("failed", True, "replay"),
        ("failed", False, "replay"),
        ("uncertain", True, "replay"),
        ("uncertain", False, "replay"),
        # A person confirmed it did not happen: calling again cannot double it.
        ("not_done", True, "call"),
        ("not_done", False, "call"),
    ],
)
def test_on_reentry(status: str, safe_to_repeat: bool, expected: str) -> None:
    assert on_reentry(status, safe_to_repeat=safe_to_repeat) == expected


def test_input_hash_is_stable_under_key_order() -> None:
    first = {"invoice_id": "inv_1", "amount": 1200, "meta": {"b": 2, "a": [1, {"y": 0, "x": 1}]}}
    second = {"meta": {"a": [1, {"x": 1, "y": 0}], "b": 2}, "amount": 1200, "invoice_id": "inv_1"}

    assert input_hash(first) == input_hash(second)


def test_input_hash_is_a_sha256_hex_digest_and_repeats() -> None:
    payload = {"invoice_id": "inv_1"}

    digest = input_hash(payload)

    assert len(digest) == 64
    assert int(digest, 16) >= 0
    assert input_hash(dict(payload)) == digest


@pytest.mark.parametrize(
    "other",
    [
        {"invoice_id": "inv_2"},
        {"invoice_id": "inv_1", "amount": 0},
        {"invoice_ID": "inv_1"},
        {"invoice_id": ["inv_1"]},
    ],
)
def test_input_hash_differs_when_the_input_differs(other: dict[str, object]) -> None:
    assert input_hash({"invoice_id": "inv_1"}) != input_hash(other)


def test_input_hash_accepts_values_json_cannot_encode() -> None:
    payload = {"due": date(2024, 5, 1), "amount": Decimal("12.50")}

    assert input_hash(payload) == input_hash({"amount": Decimal("12.50"), "due": date(2024, 5, 1)})
    assert input_hash(payload) != input_hash({"due": date(2024, 5, 2), "amount": Decimal("12.50")})

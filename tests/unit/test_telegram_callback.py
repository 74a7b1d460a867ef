"""The callback data a Telegram button carries: it decodes to what was encoded, fits Telegram's
64 bytes for every approval id remit makes, and anything else is refused with a clear error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remit.core.errors import RemitError
from remit.people.gates import new_approval_id
from remit.people.telegram import (
    CALLBACK_LIMIT,
    Callback,
    decode_callback,
    encode_callback,
    keyboard,
    new_nonce,
)

approval_ids = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16).map(
    lambda hex16: f"apr_{hex16}"
)
# Any nonce up to 32 URL-safe characters (new_nonce makes 8): all fit beside an approval id.
nonces = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
    min_size=1,
    max_size=32,
)
decisions = st.sampled_from(["approved", "rejected"])


@given(approval_id=approval_ids, decision=decisions, nonce=nonces)
def test_callback_data_round_trips_within_64_bytes(
    approval_id: str, decision: str, nonce: str
) -> None:
    data = encode_callback(approval_id, decision, nonce)
    assert len(data.encode()) <= CALLBACK_LIMIT
    assert decode_callback(data) == Callback(approval_id, decision, nonce)  # type: ignore[arg-type]


def test_the_ids_and_nonces_remit_makes_fit() -> None:
    for _ in range(200):
        approval_id, nonce = new_approval_id(), new_nonce()
        data = Callback(approval_id, "approved", nonce).encode()
        assert data == f"r1:a:{approval_id}:{nonce}"
        assert decode_callback(data).approval_id == approval_id


def test_a_keyboard_has_an_approve_and_a_reject_button_of_one_nonce() -> None:
    markup = keyboard("apr_0123456789abcdef", "n0nce")
    [[approve, reject]] = markup["inline_keyboard"]
    assert approve == {"text": "Approve", "callback_data": "r1:a:apr_0123456789abcdef:n0nce"}
    assert reject == {"text": "Reject", "callback_data": "r1:r:apr_0123456789abcdef:n0nce"}


def test_over_long_data_is_refused_naming_its_length_and_the_limit() -> None:
    with pytest.raises(RemitError) as refused:
        encode_callback("apr_0123456789abcdef", "approved", "n" * 40)
    message = str(refused.value)
    assert "would be 66 bytes" in message
    assert "limit of 64" in message
    assert "at most 38 characters" in message
    with pytest.raises(RemitError, match="is 65 bytes, past Telegram's limit of 64"):
        decode_callback("r1:a:apr_0123456789abcdef:" + "n" * 39)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("r2:a:apr_0123456789abcdef:abc", "version 'r2', which this remit does not read"),
        ("approve", "version 'approve', which this remit does not read"),
        ("", "version '', which this remit does not read"),
        ("r1:a:apr_0123456789abcdef", "is malformed: expected r1:<a|r>:<approval id>:<nonce>"),
        ("r1:a:apr_0123456789abcdef:abc:def", "is malformed: expected"),
        ("r1:x:apr_0123456789abcdef:abc", "its decision letter 'x' is not `a`"),
        ("r1:a::abc", "the approval id and nonce are letters, digits"),
        ("r1:a:apr_0123456789abcdef:a b", "the approval id and nonce are letters, digits"),
    ],
)
def test_malformed_data_is_refused_naming_the_problem(data: str, problem: str) -> None:
    with pytest.raises(RemitError) as refused:
        decode_callback(data)
    assert problem in str(refused.value)


def test_encoding_refuses_what_would_not_decode() -> None:
    with pytest.raises(RemitError, match="decides `approved` or `rejected`, not 'expired'"):
        encode_callback("apr_0123456789abcdef", "expired", "abc")
    with pytest.raises(RemitError, match="the nonce 'a:b' cannot go in Telegram callback data"):
        encode_callback("apr_0123456789abcdef", "approved", "a:b")
    with pytest.raises(RemitError, match="the approval id '' cannot go"):
        encode_callback("", "approved", "abc")

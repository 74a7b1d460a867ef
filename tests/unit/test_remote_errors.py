"""The remote client raises what a local client would from the API's error answers."""

from __future__ import annotations

import httpx

from remit import RemitError, TooLarge, Unauthenticated
from remit.remote import _error


def test_a_413_is_too_large_naming_the_setting_the_answer_names() -> None:
    answer = httpx.Response(
        413,
        json={
            "error": "the run's input is 3 MiB, over the 2 MiB limit (REMIT_MAX_INPUT_BYTES): "
            "pass a reference to the data instead, or raise the limit"
        },
    )
    error = _error(answer, "/runs")
    assert isinstance(error, TooLarge)
    assert error.setting == "REMIT_MAX_INPUT_BYTES"
    assert "over the 2 MiB limit" in str(error)


def test_a_413_from_the_body_cap_names_it() -> None:
    error = _error(httpx.Response(413, text="too large"), "/runs")
    assert isinstance(error, TooLarge)
    assert error.setting == "REMIT_MAX_BODY_BYTES"


def test_other_answers_keep_their_kinds() -> None:
    assert isinstance(
        _error(httpx.Response(401, json={"error": "no token"}), "/runs"), Unauthenticated
    )
    plain = _error(httpx.Response(409, json={"error": "refused"}), "/runs")
    assert type(plain) is RemitError

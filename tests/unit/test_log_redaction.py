"""No log line holds a credential: the secret part of each token remit mints, and a query
parameter that carries one, are written as `[redacted]`, in the message, in a traceback and in
JSON lines, whichever logger wrote them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from remit.core.telemetry import JsonFormatter, redact_logs, redacted
from remit.core.wakeup_tokens import mint_account_token, mint_instance_token
from remit.policy.tokens import mint

SECRETS = [
    mint("rml_")[1],  # a sign-in link's code
    mint("rms_")[1],  # a console session
    mint("rmt_")[1],  # an API token
    mint_account_token(),
    mint_instance_token(),
]


def _secret_part(credential: str) -> str:
    return credential.split("_", 2)[2] if credential.startswith("rm") else credential[4:]


def test_each_credential_keeps_its_prefix_and_id_and_loses_its_secret() -> None:
    for credential in SECRETS:
        shown = redacted(f"signed in with {credential}.")
        assert _secret_part(credential) not in shown
        assert shown.endswith("[redacted].")
    code = SECRETS[0]
    ident = code.split("_")[1]
    assert redacted(code) == f"rml_{ident}_[redacted]"


def test_a_credential_is_found_wherever_it_stands() -> None:
    token, code = SECRETS[2], SECRETS[0]
    for text in (f"Bearer%20{token}", repr(f"x\n{token}"), f"x{token}", f"[{token}]"):
        assert _secret_part(token) not in redacted(text)
    inner = f"/console/sign-in?next=%2Fconsole%2Fruns%3Fcode%3D{code}%26a%3D1&b=2"
    assert _secret_part(code) not in redacted(inner)
    assert (
        redacted("?next=%2Fx%3Ftoken%3Dab%2Fcd%26z%3D1")
        == "?next=%2Fx%3Ftoken%3D[redacted]%26z%3D1"
    )


def test_a_query_parameter_that_carries_a_secret_is_redacted_and_others_are_kept() -> None:
    line = '127.0.0.1:5 - "GET /console/sign-in?code=abc123&next=/runs HTTP/1.1" 200'
    assert (
        redacted(line)
        == '127.0.0.1:5 - "GET /console/sign-in?code=[redacted]&next=/runs HTTP/1.1" 200'
    )
    assert redacted("GET /x?status=done&token=t0k") == "GET /x?status=done&token=[redacted]"
    assert redacted("GET /runs?status=done&limit=5") == "GET /runs?status=done&limit=5"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, io.StringIO]]:
    """A logger writing text to one stream and JSON to another, with redaction installed."""
    previous = logging.getLogRecordFactory()
    redact_logs()
    text, as_json = io.StringIO(), io.StringIO()
    plain = logging.StreamHandler(text)
    plain.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    structured = logging.StreamHandler(as_json)
    structured.setFormatter(JsonFormatter())
    logger = logging.getLogger("uvicorn.access.redaction-test")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(plain)
    logger.addHandler(structured)
    try:
        yield logger, text, as_json
    finally:
        logger.removeHandler(plain)
        logger.removeHandler(structured)
        logging.setLogRecordFactory(previous)


def test_no_line_holds_a_credential_at_debug_in_text_or_json(
    captured: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    logger, text, as_json = captured
    code = SECRETS[0]
    logger.debug('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/console/sign-in?code={code}",
                 "1.1", 200)  # fmt: skip
    try:
        raise ValueError(f"that is not a sign-in code: {SECRETS[2]}")
    except ValueError:
        logger.exception("sign-in failed for %s", SECRETS[3])
    written = text.getvalue() + as_json.getvalue()
    for credential in (code, SECRETS[2], SECRETS[3]):
        assert _secret_part(credential) not in written
    assert "ValueError: that is not a sign-in code: rmt_" in text.getvalue()
    lines = [json.loads(line) for line in as_json.getvalue().splitlines()]
    assert (
        lines[0]["message"] == '127.0.0.1:5 - "GET /console/sign-in?code=[redacted] HTTP/1.1" 200'
    )
    assert "[redacted]" in lines[1]["error"]

"""The forms of what the HTTP API takes, as its spec states them and its routes check them: keys,
limits, ids and names, and the texts no database column may hold (a NUL character)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Header, Path, Query

IDEMPOTENCY_HEADER = "Idempotency-Key"
KEY_HINT = (
    f"send an {IDEMPOTENCY_HEADER} header of 1 to 200 printable characters with no spaces, "
    "unique to this request (a UUID will do); sending the request again with the same key "
    "returns the first result"
)
# No text the database keeps may hold a NUL character: the spec says so of every string field
# and parameter, and the API refuses one (422) rather than let the database fail on it.
NUL_FREE: dict[str, Any] = {"pattern": r"^[^\u0000]*$"}
# What a key is: printable ASCII with no spaces (`remit.core.keys`).
KEY_FORM = r"^[!-~]+$"
# A principal a token may act as, a secret's name, a token's lifetime, as the spec states them
# (the routes check them too, with messages that say what to send).
PRINCIPAL_FORM = re.compile(r"^(user|agent):[A-Za-z0-9][A-Za-z0-9._@+-]*$")
SECRET_FORM = r"^[A-Z_][A-Z0-9_]*$"
# At most 999999 days (or as many weeks as fit): a token's expiry stays a date a database holds.
# A budget's limit as a string: up to 11 digits, to the micro-dollar (the column holds 18, 6).
AMOUNT_FORM = re.compile(r"^[0-9]{1,11}(\.[0-9]{1,6})?$")
DURATION_FORM = re.compile(r"^([1-9][0-9]{0,5}[mhd]|[1-9][0-9]{0,4}w)$")
# The most rows a list route returns at once.
MAX_LIMIT = 1000
# The longest a summary of a step's output or error is.
SUMMARY = 200


def limit_query(what: str) -> Any:
    return Query(ge=1, le=MAX_LIMIT, description=f"How many (1 to {MAX_LIMIT}), {what}.")


NewestFirst = Annotated[int, limit_query("newest first")]
# An optional Idempotency-Key: the same request sent again with it returns the first result.
OptionalKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=200,
        pattern=KEY_FORM,
        description="Optional, unique to this request: sent again with the same key and the "
        "same body, the request returns its first result and does nothing twice.",
    ),
]
RequiredKey = Annotated[
    str,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=200,
        pattern=KEY_FORM,
        description="Unique to this decision; a request repeated with the same key returns the "
        "first decision.",
    ),
]
# A direct call's key is kept in the ledger as `direct:<key>`: at most 100 characters.
CallKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=100,
        pattern=KEY_FORM,
        description="Optional, unique to this call: sent again with the same key and the same "
        "body, the call returns its first outcome and calls nothing again.",
    ),
]
RunId = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=NUL_FREE,
        description="The run's id, or a prefix of it that only it begins with.",
    ),
]
SecretName = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra={"pattern": SECRET_FORM},
        description="The secret's name, written like an environment variable's: SHOP_TOKEN.",
    ),
]
TaskId = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=NUL_FREE,
        description="The task's id, or a prefix only it begins with.",
    ),
]
ApprovalId = Annotated[str, Path(json_schema_extra=NUL_FREE, description="The approval's id.")]

"""Keys a person or a workflow gives remit: an op call's (`key=`), a gate's, a decision's, a
task answer's and a retry's.

`key_problem` is the one check of a key's form: printable ASCII with no spaces, so it reads the
same in a log, a URL, a vendor's idempotency header and a DBOS step name.

A key a person sends with a request (a decision, a task's answer) names that one request: sent
again with the same request it replays the first result; sent with another request it is
refused (`KeyReused`), naming the first, as Stripe's idempotency keys and the IETF
Idempotency-Key draft behave. `first_use` and `record_use` keep, in `remit_request_keys`, a
fingerprint of the request each key was first sent with.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from remit.core.errors import KeyReused
from remit.core.schema import request_keys

_KEY = re.compile(r"[!-~]+")


def key_problem(value: object, *, what: str, longest: int, example: str) -> str | None:
    """What is wrong with `value` as a key (named `what`), or None when nothing is."""
    if isinstance(value, str) and len(value) <= longest and _KEY.fullmatch(value):
        return None
    return (
        f"{what} {value!r} must be 1 to {longest} printable characters with no spaces, "
        f"e.g. {example!r}"
    )


def fingerprint(request: Mapping[str, Any]) -> str:
    """A request's fingerprint: SHA-256 of its canonical JSON (keys sorted)."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_reuse(
    conn: sa.Connection, scope: str, key: str, request: Mapping[str, Any], *, what: str
) -> None:
    """Raise `KeyReused` if `key` (in `scope`: `decision`, `task`) was first sent with another
    request than `request`; `what` names the key (e.g. "decision key")."""
    first = conn.execute(
        sa.select(request_keys).where(request_keys.c.scope == scope, request_keys.c.key == key)
    ).one_or_none()
    if first is not None and first.fingerprint != fingerprint(request):
        raise KeyReused(what, key, first.summary)


def record_use(
    conn: sa.Connection,
    scope: str,
    key: str,
    request: Mapping[str, Any],
    *,
    summary: str,
    at: datetime,
) -> None:
    """Record that `key` was first sent with `request` (described by `summary`), in the
    transaction that answers it. A second request under the key that commits first makes this
    insert fail, and the answer is tried again (and then replays or is refused)."""
    conn.execute(
        request_keys.insert().values(
            scope=scope,
            key=key,
            fingerprint=fingerprint(request),
            summary=summary[:500],
            first_at=at,
        )
    )

"""The one check of every key a person or a workflow gives remit: an op call's (`key=`), a gate's,
a decision's, a task answer's and a retry's. A key is printable ASCII with no spaces, so it
reads the same in a log, a URL, a vendor's idempotency header and a DBOS step name."""

from __future__ import annotations

import re

_KEY = re.compile(r"[!-~]+")


def key_problem(value: object, *, what: str, longest: int, example: str) -> str | None:
    """What is wrong with `value` as a key (named `what`), or None when nothing is."""
    if isinstance(value, str) and len(value) <= longest and _KEY.fullmatch(value):
        return None
    return (
        f"{what} {value!r} must be 1 to {longest} printable characters with no spaces, "
        f"e.g. {example!r}"
    )
